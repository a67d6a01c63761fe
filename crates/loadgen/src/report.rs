//! The text summary (ab/wrk style) and the JSON document (schema 1, see docs/bench.md).

use std::fmt::Write;

use hdrhistogram::Histogram;
use serde_json::{json, Map, Value};

use crate::args::Config;
use crate::stats::{Stats, ERROR_LABELS, ERROR_NAMES};
use crate::Outcome;

/// The percentiles reported, with their JSON keys.
pub const PERCENTILES: [(f64, &str, &str); 6] = [
    (50.0, "p50", "50%"),
    (75.0, "p75", "75%"),
    (90.0, "p90", "90%"),
    (99.0, "p99", "99%"),
    (99.9, "p99_9", "99.9%"),
    (99.99, "p99_99", "99.99%"),
];

/// min/mean/stdev/max/percentiles of a histogram, in microseconds.
pub fn summary(histogram: &Histogram<u64>) -> Value {
    let mut map = Map::new();
    let empty = histogram.is_empty();
    let value = |v: f64| if empty { json!(0.0) } else { json!(v) };
    map.insert("min".into(), value(histogram.min() as f64));
    map.insert("mean".into(), value(histogram.mean()));
    map.insert("stdev".into(), value(histogram.stdev()));
    map.insert("max".into(), value(histogram.max() as f64));
    for (percentile, key, _) in PERCENTILES {
        map.insert(
            key.into(),
            value(histogram.value_at_percentile(percentile) as f64),
        );
    }
    Value::Object(map)
}

/// The percentile spectrum for plots: (percentile, microseconds) points.
pub fn distribution(histogram: &Histogram<u64>) -> Vec<(f64, u64)> {
    if histogram.is_empty() {
        return Vec::new();
    }
    let mut points: Vec<(f64, u64)> = histogram
        .iter_quantiles(4)
        .map(|v| {
            (
                v.quantile_iterated_to() * 100.0,
                histogram.highest_equivalent(v.value_iterated_to()),
            )
        })
        .filter(|(p, _)| *p < 100.0)
        .collect();
    points.dedup_by(|a, b| a.0 == b.0);
    points.push((100.0, histogram.max()));
    points
}

/// The status codes answered, with their counts, in code order.
pub fn status_counts(stats: &Stats) -> impl Iterator<Item = (usize, u64)> + '_ {
    stats
        .status
        .iter()
        .enumerate()
        .filter(|(_, &count)| count > 0)
        .map(|(code, &count)| (code, count))
}

/// Warnings about what the run measured: when most responses are not 2xx,
/// the figures are of redirects or error pages, not of the page meant (the
/// counting rules take a 3xx as a success).
pub fn warnings(stats: &Stats) -> Vec<String> {
    let not_success: Vec<(usize, u64)> = status_counts(stats)
        .filter(|(code, _)| !(200..300).contains(code))
        .collect();
    let not_success_total: u64 = not_success.iter().map(|(_, count)| count).sum();
    if not_success_total * 2 <= stats.requests {
        return Vec::new();
    }
    let redirects: u64 = not_success
        .iter()
        .filter(|(code, _)| (300..400).contains(code))
        .map(|(_, count)| count)
        .sum();
    let codes: Vec<String> = not_success
        .iter()
        .map(|(code, count)| format!("{code}: {count}"))
        .collect();
    let consequence = if redirects * 2 > not_success_total {
        "tines bench does not follow redirects, so the figures are of the redirects (check the URL)"
    } else {
        "the figures are of those answers, not of the page"
    };
    vec![format!(
        "most responses were not 2xx: {not_success_total} of {} ({:.0}%) were {}; {consequence}",
        stats.requests,
        not_success_total as f64 * 100.0 / stats.requests as f64,
        codes.join(", "),
    )]
}

fn mode(config: &Config) -> String {
    match config.rate {
        Some(rate) => format!("open loop at {rate} req/s"),
        None => "closed loop".into(),
    }
}

/// The JSON document.
pub fn json(config: &Config, outcome: &Outcome) -> Value {
    let stats = &outcome.stats;
    let elapsed = outcome.elapsed.as_secs_f64();
    let per_sec = |n: u64| {
        if elapsed > 0.0 {
            n as f64 / elapsed
        } else {
            0.0
        }
    };
    let mut errors = Map::new();
    for (index, name) in ERROR_NAMES.iter().enumerate() {
        errors.insert((*name).into(), json!(stats.errors[index]));
    }
    errors.insert("total".into(), json!(stats.total_errors()));
    let mut examples = Map::new();
    for (index, name) in ERROR_NAMES.iter().enumerate() {
        if let Some(example) = &stats.examples[index] {
            examples.insert((*name).into(), json!(example));
        }
    }
    let mut counts = Map::new();
    for (code, count) in status_counts(stats) {
        counts.insert(code.to_string(), json!(count));
    }
    let timeline: Vec<Value> = outcome
        .timeline
        .iter()
        .map(|p| json!({"t_s": p.t_s, "duration_s": p.duration_s, "requests": p.requests, "errors": p.errors, "p50_us": p.p50_us, "p99_us": p.p99_us}))
        .collect();
    let distribution: Vec<Value> = distribution(&stats.latency)
        .into_iter()
        .map(|(p, us)| json!({"percentile": p, "latency_us": us}))
        .collect();
    json!({
        "schema": 1,
        "tool": "tines bench",
        "version": env!("CARGO_PKG_VERSION"),
        "config": {
            "urls": config.requests_specs.iter().map(|s| s.url.clone()).collect::<Vec<_>>(),
            "connections": config.connections,
            "threads": config.threads,
            "duration_s": config.duration.map(|d| d.as_secs_f64()),
            "requests": config.requests,
            "rate": config.rate,
            "keepalive": config.keepalive,
            "pipeline": config.pipeline,
            "warmup_s": config.warmup.as_secs_f64(),
            "timeout_s": config.timeout.as_secs_f64(),
            "connect_timeout_s": config.connect_timeout.as_secs_f64(),
            "tls": config.tls.is_some(),
            "http2": config.http2.map(|h| h.label()),
            "streams": config.streams,
        },
        "interrupted": outcome.interrupted,
        "elapsed_s": elapsed,
        "requests": stats.requests,
        "ok": stats.ok,
        "in_flight_at_end": stats.in_flight_at_end,
        "warmup_requests": stats.warmup_requests,
        "warmup_errors": stats.warmup_errors,
        "errors": errors,
        "error_examples": examples,
        "requests_per_sec": per_sec(stats.requests),
        "bytes_read": stats.bytes_read,
        "transfer_bytes_per_sec": per_sec(stats.bytes_read),
        "tls_handshakes": {"full": stats.tls_full, "resumed": stats.tls_resumed},
        "status_counts": counts,
        "warnings": warnings(stats),
        "latency_us": summary(&stats.latency),
        "connect_us": summary(&stats.connect),
        "first_byte_us": summary(&stats.first_byte),
        "latency_distribution": distribution,
        "timeline": timeline,
    })
}

fn bytes(n: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.2} {}", UNITS[unit])
}

fn ms(us: f64) -> String {
    format!("{:.3}", us / 1000.0)
}

/// The text summary.
pub fn text(config: &Config, outcome: &Outcome) -> String {
    let stats = &outcome.stats;
    let elapsed = outcome.elapsed.as_secs_f64();
    let mut out = String::new();
    let urls: Vec<&str> = config
        .requests_specs
        .iter()
        .map(|s| s.url.as_str())
        .collect();
    let shown = if urls.len() > 1 {
        format!("{} (+{} more, round-robin)", urls[0], urls.len() - 1)
    } else {
        urls[0].to_string()
    };
    let _ = writeln!(out, "tines bench {}: {shown}", env!("CARGO_PKG_VERSION"));
    let depth = match config.http2 {
        Some(http2) => format!(
            "{}, {} streams per connection",
            http2.label(),
            config.streams
        ),
        None => format!("pipeline {}", config.pipeline),
    };
    let _ = writeln!(
        out,
        "  {}, {} connections, {} thread{}, {}, {depth}{}",
        mode(config),
        config.connections,
        config.threads,
        if config.threads == 1 { "" } else { "s" },
        if config.keepalive {
            "keep-alive"
        } else {
            "a connection per request"
        },
        if config.warmup.is_zero() {
            String::new()
        } else {
            format!(", {:.1} s warm-up (excluded)", config.warmup.as_secs_f64())
        },
    );
    if outcome.interrupted {
        let _ = writeln!(out, "  interrupted (Ctrl-C): results so far");
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "Time taken:          {elapsed:.3} s");
    let _ = writeln!(
        out,
        "Requests completed:  {} ({} ok: 2xx/3xx)",
        stats.requests, stats.ok
    );
    let _ = writeln!(
        out,
        "In flight at end:    {} (not counted)",
        stats.in_flight_at_end
    );
    if !config.warmup.is_zero() {
        let _ = writeln!(
            out,
            "Warm-up (excluded):  {} responses, {} failures",
            stats.warmup_requests, stats.warmup_errors
        );
    }
    let _ = writeln!(out, "Failed requests:     {}", stats.total_errors());
    for (index, label) in ERROR_LABELS.iter().enumerate() {
        if stats.errors[index] > 0 {
            let example = stats.examples[index].as_deref().unwrap_or("");
            let _ = writeln!(
                out,
                "   {label:<26} {:>10}   e.g. {example}",
                stats.errors[index]
            );
        }
    }
    let per_sec = |n: u64| {
        if elapsed > 0.0 {
            n as f64 / elapsed
        } else {
            0.0
        }
    };
    let _ = writeln!(
        out,
        "Requests per second: {:.2} [#/sec]",
        per_sec(stats.requests)
    );
    let _ = writeln!(
        out,
        "Transfer rate:       {}/s ({} read)",
        bytes(per_sec(stats.bytes_read)),
        bytes(stats.bytes_read as f64)
    );
    if config.tls.is_some() {
        let _ = writeln!(
            out,
            "TLS handshakes:      {} full, {} resumed",
            stats.tls_full, stats.tls_resumed
        );
    }
    let codes: Vec<String> = status_counts(stats)
        .map(|(code, count)| format!("{code}: {count}"))
        .collect();
    let _ = writeln!(
        out,
        "Status codes:        {}",
        if codes.is_empty() {
            "none".into()
        } else {
            codes.join(", ")
        }
    );
    for warning in warnings(stats) {
        let _ = writeln!(out, "Warning: {warning}");
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "Connection times (ms)");
    let _ = writeln!(
        out,
        "              {:>9} {:>9} {:>9} {:>9} {:>9}",
        "min", "mean", "[+/-sd]", "median", "max"
    );
    let row = |name: &str, h: &Histogram<u64>| {
        if h.is_empty() {
            format!("{name:<13} {:>9}\n", "-")
        } else {
            format!(
                "{name:<13} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
                ms(h.min() as f64),
                ms(h.mean()),
                ms(h.stdev()),
                ms(h.value_at_quantile(0.5) as f64),
                ms(h.max() as f64)
            )
        }
    };
    out.push_str(&row("Connect:", &stats.connect));
    out.push_str(&row("Waiting:", &stats.first_byte));
    out.push_str(&row("Total:", &stats.latency));
    let _ = writeln!(out);
    let origin = if config.rate.is_some() {
        "from the intended send time"
    } else {
        "from the request's start"
    };
    let _ = writeln!(out, "Latency percentiles (ms, {origin})");
    if stats.latency.is_empty() {
        let _ = writeln!(out, "  (no responses)");
    } else {
        for (percentile, _, label) in PERCENTILES {
            let _ = writeln!(
                out,
                "  {label:>7}  {:>10}",
                ms(stats.latency.value_at_percentile(percentile) as f64)
            );
        }
        let _ = writeln!(
            out,
            "  {:>7}  {:>10} (longest request)",
            "100%",
            ms(stats.latency.max() as f64)
        );
    }
    out
}

/// Why the run counts as failed (no 2xx/3xx response at all), or `None`.
pub fn failure_reason(outcome: &Outcome) -> Option<String> {
    let stats = &outcome.stats;
    if stats.ok > 0 {
        return None;
    }
    if stats.total_errors() == 0 {
        return Some(format!(
            "no request completed ({} in flight at the end, {} in the warm-up)",
            stats.in_flight_at_end, stats.warmup_requests
        ));
    }
    let (index, count) = stats
        .errors
        .iter()
        .enumerate()
        .max_by_key(|(_, &count)| count)
        .expect("at least one kind");
    let example = stats.examples[index].as_deref().unwrap_or("");
    Some(format!(
        "every request failed: {} of {} were {} errors, e.g. {example}",
        count,
        stats.total_errors(),
        ERROR_NAMES[index]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats_with(codes: &[(usize, u64)]) -> Stats {
        let mut stats = Stats::default();
        for &(code, count) in codes {
            stats.status[code] = count;
            stats.requests += count;
        }
        stats
    }

    #[test]
    fn no_warning_while_at_least_half_the_responses_are_2xx() {
        assert!(warnings(&stats_with(&[])).is_empty());
        assert!(warnings(&stats_with(&[(200, 10)])).is_empty());
        assert!(warnings(&stats_with(&[(200, 5), (302, 3), (404, 2)])).is_empty());
    }

    #[test]
    fn most_responses_redirected_warns_that_redirects_are_not_followed() {
        let warning = warnings(&stats_with(&[(200, 4), (301, 1), (302, 5)])).join("\n");
        assert_eq!(
            warning,
            "most responses were not 2xx: 6 of 10 (60%) were 301: 1, 302: 5; tines bench \
             does not follow redirects, so the figures are of the redirects (check the URL)"
        );
    }

    #[test]
    fn most_responses_errors_warns_that_the_figures_are_of_those_answers() {
        let warning = warnings(&stats_with(&[(200, 1), (302, 1), (404, 3)])).join("\n");
        assert_eq!(
            warning,
            "most responses were not 2xx: 4 of 5 (80%) were 302: 1, 404: 3; the figures are \
             of those answers, not of the page"
        );
    }
}
