//! `/metrics`: the Prometheus text exposition format (0.0.4), or OpenMetrics 1.0 when the
//! client's `Accept` asks for `application/openmetrics-text`. Every figure comes from the
//! scoreboard (live slots plus the retired totals): no multiprocess directory.

use std::fmt::Write;

use super::snapshot::{restarts, Snapshot};
use crate::scoreboard::metrics::{
    MetricsReading, BUCKETS, DURATION_BOUNDS_US, METHODS, STATUS_CLASSES, WAIT_BOUNDS_US,
};
use crate::scoreboard::{Compression, WorkerState};

/// The content type of the classic text format.
pub const TEXT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// The content type of OpenMetrics.
pub const OPENMETRICS_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Whether an `Accept` header value asks for OpenMetrics.
pub fn wants_openmetrics(accept: &[u8]) -> bool {
    accept.split(|&b| b == b',').any(|range| {
        let media = range.split(|&b| b == b';').next().unwrap_or(b"");
        media
            .trim_ascii()
            .eq_ignore_ascii_case(b"application/openmetrics-text")
    })
}

struct Exposition {
    out: String,
    openmetrics: bool,
}

impl Exposition {
    /// The `# HELP` and `# TYPE` lines of a family. `name` is the sample name; an
    /// OpenMetrics counter family is named without its `_total`.
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let family = if self.openmetrics && kind == "counter" {
            name.strip_suffix("_total").unwrap_or(name)
        } else {
            name
        };
        let _ = writeln!(self.out, "# HELP {family} {help}");
        let _ = writeln!(self.out, "# TYPE {family} {kind}");
    }

    /// A family of one sample without labels.
    fn single(&mut self, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
        self.family(name, kind, help);
        self.sample(name, "", value);
    }

    fn sample(&mut self, name: &str, labels: &str, value: impl std::fmt::Display) {
        if labels.is_empty() {
            let _ = writeln!(self.out, "{name} {value}");
        } else {
            let _ = writeln!(self.out, "{name}{{{labels}}} {value}");
        }
    }

    fn histogram(
        &mut self,
        name: &str,
        help: &str,
        bounds: &[u64; 16],
        buckets: &[u64; BUCKETS],
        sum_us: u64,
    ) {
        self.family(name, "histogram", help);
        let mut cumulative = 0;
        for (index, count) in buckets.iter().enumerate() {
            cumulative += count;
            let le = match bounds.get(index) {
                Some(&bound) => seconds(bound),
                None => "+Inf".to_owned(),
            };
            self.sample(
                &format!("{name}_bucket"),
                &format!("le=\"{le}\""),
                cumulative,
            );
        }
        self.sample(&format!("{name}_sum"), "", seconds(sum_us));
        self.sample(&format!("{name}_count"), "", cumulative);
    }
}

/// Microseconds as seconds, exactly (no float rounding: `250` is `0.00025`).
fn seconds(us: u64) -> String {
    let whole = us / 1_000_000;
    let fraction = us % 1_000_000;
    if fraction == 0 {
        format!("{whole}.0")
    } else {
        let digits = format!("{fraction:06}");
        format!("{whole}.{}", digits.trim_end_matches('0'))
    }
}

fn requests(exposition: &mut Exposition, metrics: &MetricsReading) {
    exposition.family(
        "tines_requests_total",
        "counter",
        "Requests answered, by method (RFC 9110's registered set, else OTHER) and status class; the responses the server writes itself (400, 408, 413, 414, 431, 503) included.",
    );
    for (method, name) in METHODS.iter().enumerate() {
        for (class, status) in STATUS_CLASSES.iter().enumerate() {
            exposition.sample(
                "tines_requests_total",
                &format!("method=\"{name}\",status=\"{status}\""),
                metrics.requests[method][class],
            );
        }
    }
}

/// The compression counters (ADR 0037): every coding's and reason's sample is present, 0 or
/// not (with compression off, all are 0).
fn compression(e: &mut Exposition, counts: &Compression) {
    e.family(
        "tines_compressed_responses_total",
        "counter",
        "App responses whose compressed body was finished, by content coding.",
    );
    for (coding, count) in ["gzip", "br", "zstd"].into_iter().zip(counts.responses) {
        e.sample(
            "tines_compressed_responses_total",
            &format!("coding=\"{coding}\""),
            count,
        );
    }
    e.single(
        "tines_compression_in_bytes_total",
        "counter",
        "Body bytes of the compressed responses before compression (the app's).",
        counts.bytes_in,
    );
    e.single(
        "tines_compression_out_bytes_total",
        "counter",
        "Body bytes of the compressed responses after compression (sent, without chunked framing).",
        counts.bytes_out,
    );
    e.family(
        "tines_compression_skipped_total",
        "counter",
        "App responses sent uncompressed with compression on: by a rule (type, size, status, Content-Encoding, no-transform, excluded path), or because the client accepted no coding offered.",
    );
    for (reason, count) in [
        ("rule", counts.skipped),
        ("not_accepted", counts.not_accepted),
    ] {
        e.sample(
            "tines_compression_skipped_total",
            &format!("reason=\"{reason}\""),
            count,
        );
    }
}

/// The exposition of `snap`.
pub fn render(snap: &Snapshot, openmetrics: bool) -> String {
    let mut exposition = Exposition {
        out: String::with_capacity(16 * 1024),
        openmetrics,
    };
    let totals = &snap.totals;
    let metrics = &totals.metrics;
    requests(&mut exposition, metrics);
    exposition.histogram(
        "tines_request_duration_seconds",
        "Time from the request's dispatch (or its head, for the server's own responses) to its last byte handed to the socket.",
        &DURATION_BOUNDS_US,
        &metrics.duration,
        metrics.duration_sum_us,
    );
    exposition.histogram(
        "tines_request_queue_wait_seconds",
        "Time from the request read to an app thread taking it (0 where the thread that read it serves it).",
        &WAIT_BOUNDS_US,
        &metrics.wait,
        metrics.wait_sum_us,
    );
    let e = &mut exposition;
    e.single(
        "tines_requests_in_flight",
        "gauge",
        "Requests being served now.",
        totals.in_flight,
    );
    e.single(
        "tines_requests_queued",
        "gauge",
        "Requests read and waiting for an app thread now (not in flight, not idle connections).",
        totals.queued,
    );
    e.single(
        "tines_requests_queued_oldest_wait_seconds",
        "gauge",
        "How long the longest-waiting queued request has waited for an app thread (0: none waits).",
        snap.queued_wait_ms(totals.queued_since_ns) / 1000.0,
    );
    e.single(
        "tines_connections_open",
        "gauge",
        "Client connections open now.",
        totals.connections,
    );
    e.single(
        "tines_connections_idle",
        "gauge",
        "Open connections with no request in the app nor queued for it (idle keep-alive, or a request being read).",
        snap.idle_connections(),
    );
    e.single(
        "tines_http2_connections_open",
        "gauge",
        "HTTP/2 connections open now (among tines_connections_open).",
        totals.h2_connections,
    );
    e.single(
        "tines_http2_streams_open",
        "gauge",
        "HTTP/2 streams open now (their request head read, their response not over).",
        totals.h2_streams,
    );
    e.family(
        "tines_worker_http2_open",
        "gauge",
        "Each worker's open HTTP/2 connections and streams.",
    );
    for worker in &snap.workers {
        let slot = &worker.slot;
        for (kind, value) in [
            ("connections", slot.h2_connections),
            ("streams", slot.h2_streams),
        ] {
            e.sample(
                "tines_worker_http2_open",
                &format!(
                    "slot=\"{}\",pid=\"{}\",kind=\"{kind}\"",
                    worker.index, slot.pid
                ),
                value,
            );
        }
    }
    e.single(
        "tines_rate_limited_total",
        "counter",
        "Requests answered 429 by the per-client rate limits.",
        totals.rate_limited,
    );
    e.single(
        "tines_rate_limit_evictions_total",
        "counter",
        "Rate-limit table entries taken from another client's bucket (the table was full).",
        totals.rate_evictions,
    );
    e.single(
        "tines_rate_limit_table_entries",
        "gauge",
        "Rate-limit table entries in use (0 without a table).",
        totals.rate_entries,
    );
    e.single(
        "tines_rate_limit_table_size",
        "gauge",
        "Rate-limit table entries in all, fixed at start (0 without a table).",
        totals.rate_capacity,
    );
    e.single(
        "tines_connections_refused_per_client_total",
        "counter",
        "Connections closed at accept by max_connections_per_client.",
        totals.refused_connections,
    );
    compression(e, &totals.compression);
    e.single(
        "tines_connections_accepted_total",
        "counter",
        "Client connections accepted.",
        totals.accepted,
    );
    e.single(
        "tines_received_bytes_total",
        "counter",
        "Bytes read from client sockets for the requests answered.",
        totals.bytes_in,
    );
    e.single(
        "tines_sent_bytes_total",
        "counter",
        "Response bytes handed to client sockets (heads and framing included).",
        totals.bytes_out,
    );
    e.family(
        "tines_worker_restarts_total",
        "counter",
        "Workers that exited and were reaped, by reason (a signal the master did not send counts as crash).",
    );
    for (reason, count) in restarts(totals) {
        e.sample(
            "tines_worker_restarts_total",
            &format!("reason=\"{reason}\""),
            count,
        );
    }
    e.family("tines_workers", "gauge", "Worker slots by state.");
    for state in WorkerState::ALL {
        let count = snap.states.iter().filter(|&&seen| seen == *state).count();
        e.sample(
            "tines_workers",
            &format!("state=\"{}\"", state.name()),
            count,
        );
    }
    e.family(
        "tines_worker_memory_bytes",
        "gauge",
        "Each worker's memory at the master's last sample: rss, pss (its share of pages shared with others), uss (its own pages) and swap.",
    );
    for worker in &snap.workers {
        let slot = &worker.slot;
        for (kind, value) in [
            ("rss", slot.rss),
            ("pss", slot.pss),
            ("uss", slot.uss),
            ("swap", slot.swap),
        ] {
            if value == crate::scoreboard::MEMORY_UNKNOWN {
                continue; // not read (only RSS under `user`): no sample rather than a false one
            }
            e.sample(
                "tines_worker_memory_bytes",
                &format!(
                    "slot=\"{}\",pid=\"{}\",kind=\"{kind}\"",
                    worker.index, slot.pid
                ),
                value,
            );
        }
    }
    e.single(
        "tines_generation",
        "gauge",
        "The generation serving (reloads add one).",
        snap.generation,
    );
    e.single(
        "tines_uptime_seconds",
        "gauge",
        "Seconds since the master started.",
        format!("{:.3}", snap.uptime_s),
    );
    e.single(
        "tines_stopping",
        "gauge",
        "1 once the server began to stop.",
        u8::from(snap.stopping),
    );
    if openmetrics {
        e.out.push_str("# EOF\n");
    }
    exposition.out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_are_written_exactly() {
        assert_eq!(seconds(250), "0.00025");
        assert_eq!(seconds(1_000_000), "1.0");
        assert_eq!(seconds(2_500_000), "2.5");
        assert_eq!(seconds(0), "0.0");
        assert_eq!(seconds(10), "0.00001");
    }

    #[test]
    fn openmetrics_is_chosen_by_accept() {
        assert!(wants_openmetrics(
            b"application/openmetrics-text; version=1.0.0"
        ));
        assert!(wants_openmetrics(
            b"text/plain;q=0.5, Application/OpenMetrics-Text;q=1"
        ));
        assert!(!wants_openmetrics(b"text/plain"));
        assert!(!wants_openmetrics(b""));
    }
}
