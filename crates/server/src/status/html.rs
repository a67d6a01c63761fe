//! `/`: the status page for people, in the spirit of Apache's server-status: one
//! self-contained document (inline CSS, no script, no external asset), readable on a phone,
//! refreshing itself every `refresh` seconds (`?refresh=N`; 0 stops it).

use std::fmt::Write;

use super::snapshot::{restarts, state_char, wait_status_parts, Snapshot, RATE_WINDOWS_S};
use crate::scoreboard::metrics::STATUS_CLASSES;
use crate::scoreboard::{ThreadState, WorkerState};

/// The page's refresh period when the query does not say, seconds.
pub const DEFAULT_REFRESH_S: u64 = 5;

/// The refresh period a query asks for (`refresh=N`, at most an hour), or the default.
pub fn refresh_from_query(query: &[u8]) -> u64 {
    query
        .split(|&b| b == b'&')
        .find_map(|pair| pair.strip_prefix(b"refresh="))
        .and_then(|value| std::str::from_utf8(value).ok()?.parse::<u64>().ok())
        .map_or(DEFAULT_REFRESH_S, |seconds| seconds.min(3600))
}

/// Appends `bytes` escaped for HTML text and attribute values (latin-1 as is).
fn escape(out: &mut String, bytes: &[u8]) {
    for &b in bytes {
        match b {
            b'<' => out.push_str("&lt;"),
            b'>' => out.push_str("&gt;"),
            b'&' => out.push_str("&amp;"),
            b'"' => out.push_str("&quot;"),
            b'\'' => out.push_str("&#39;"),
            0x20..=0x7e => out.push(char::from(b)),
            _ => {
                let _ = write!(out, "&#{b};");
            }
        }
    }
}

/// A memory figure for the table: `n/a` where the master could read only RSS.
fn memory_figure(bytes: u64) -> String {
    if bytes == crate::scoreboard::MEMORY_UNKNOWN {
        "n/a".to_string()
    } else {
        human_bytes(bytes)
    }
}

/// Bytes in the unit that keeps 1 to 4 digits.
fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Seconds as `3d 4h`, `2h 5m`, `4m 10s` or `12.3s`.
fn human_duration(seconds: f64) -> String {
    let whole = seconds as u64;
    let (days, hours, minutes) = (whole / 86_400, whole % 86_400 / 3600, whole % 3600 / 60);
    if days > 0 {
        format!("{days}d {hours}h")
    } else if hours > 0 {
        format!("{hours}h {minutes}m")
    } else if minutes > 0 {
        format!("{minutes}m {}s", whole % 60)
    } else {
        format!("{seconds:.1}s")
    }
}

const STYLE: &str = "\
body{font:14px/1.4 system-ui,-apple-system,sans-serif;margin:0;padding:12px;color:#1d2330;background:#f6f7f9}\
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:18px 0 6px}\
.sub{color:#5b6475;margin-bottom:10px}.stop{color:#b3261e;font-weight:600}\
.cards{display:flex;flex-wrap:wrap;gap:8px}\
.card{background:#fff;border:1px solid #dde1e8;border-radius:6px;padding:8px 12px;min-width:120px}\
.card b{display:block;font-size:18px}.card span{color:#5b6475;font-size:12px}\
.wrap{overflow-x:auto}table{border-collapse:collapse;background:#fff;width:100%}\
th,td{border:1px solid #dde1e8;padding:4px 6px;text-align:left;white-space:nowrap;font-variant-numeric:tabular-nums}\
th{background:#eef1f5;font-weight:600}td.n{text-align:right}\
code{font:13px/1.3 ui-monospace,monospace}.map{font:15px ui-monospace,monospace;letter-spacing:2px;word-break:break-all}\
.busy{color:#9a5b00;font-weight:600}.muted{color:#8a93a3}";

/// The page.
pub fn render(snap: &Snapshot, refresh: u64) -> String {
    let totals = &snap.totals;
    let metrics = &totals.metrics;
    let mut out = String::with_capacity(16 * 1024);
    out.push_str("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">");
    if refresh > 0 {
        let _ = write!(out, "<meta http-equiv=\"refresh\" content=\"{refresh}\">");
    }
    let _ = write!(
        out,
        "<title>Tines status</title><style>{STYLE}</style></head><body>\
         <h1>Tines status</h1><div class=\"sub\">master pid {} &middot; generation {} &middot; \
         MPM <b>",
        snap.master_pid, snap.generation
    );
    escape(&mut out, snap.mpm.as_bytes());
    let _ = write!(
        out,
        "</b> &middot; up {} &middot; ",
        human_duration(snap.uptime_s)
    );
    if snap.stopping {
        out.push_str("<span class=\"stop\">stopping</span>");
    } else {
        out.push_str("serving");
    }
    if refresh > 0 {
        let _ = write!(out, " &middot; refreshes every {refresh} s");
    }
    out.push_str("</div><div class=\"cards\">");
    let card = |out: &mut String, value: String, label: &str| {
        let _ = write!(
            out,
            "<div class=\"card\"><b>{value}</b><span>{label}</span></div>"
        );
    };
    card(&mut out, metrics.total().to_string(), "requests");
    for (window, rate) in RATE_WINDOWS_S.iter().zip(snap.rates) {
        card(
            &mut out,
            format!("{rate:.1}"),
            &format!("req/s, last {} min", window / 60),
        );
    }
    card(&mut out, totals.in_flight.to_string(), "in flight");
    card(
        &mut out,
        format!(
            "{} / {:.1} ms",
            totals.queued,
            snap.queued_wait_ms(totals.queued_since_ns)
        ),
        "waiting for an app thread / longest wait",
    );
    card(
        &mut out,
        format!("{} / {}", totals.connections, snap.idle_connections()),
        "connections open / idle",
    );
    card(
        &mut out,
        format!("{} / {}", totals.h2_connections, totals.h2_streams),
        "HTTP/2 connections / streams",
    );
    if totals.rate_capacity > 0 || totals.refused_connections > 0 {
        card(
            &mut out,
            format!("{} / {}", totals.rate_limited, totals.refused_connections),
            "rate-limited requests / refused connections",
        );
        card(
            &mut out,
            format!(
                "{} / {} ({} evicted)",
                totals.rate_entries, totals.rate_capacity, totals.rate_evictions
            ),
            "rate-limit table entries / size",
        );
    }
    let compression = &totals.compression;
    if compression.compressed() > 0 || compression.skipped > 0 || compression.not_accepted > 0 {
        let [gzip, br, zstd] = compression.responses;
        card(
            &mut out,
            format!("{gzip} / {br} / {zstd}"),
            "compressed responses: gzip / br / zstd",
        );
        card(
            &mut out,
            format!(
                "{} \u{2192} {}",
                human_bytes(compression.bytes_in),
                human_bytes(compression.bytes_out)
            ),
            "compressed bodies: before \u{2192} after",
        );
        card(
            &mut out,
            format!("{} / {}", compression.skipped, compression.not_accepted),
            "left uncompressed: by a rule / client accepted no coding",
        );
    }
    card(&mut out, totals.accepted.to_string(), "accepted");
    card(&mut out, human_bytes(totals.bytes_in), "received");
    card(&mut out, human_bytes(totals.bytes_out), "sent");
    out.push_str("</div><h2>Responses by status</h2><div class=\"wrap\"><table><tr>");
    for name in STATUS_CLASSES {
        let _ = write!(out, "<th>{name}</th>");
    }
    out.push_str("<th title=\"queue wait included: what a client sees\">mean time</th></tr><tr>");
    for class in 0..STATUS_CLASSES.len() {
        let _ = write!(out, "<td class=\"n\">{}</td>", metrics.by_class(class));
    }
    let mean_ms = snap.mean_response_ms();
    let _ = write!(
        out,
        "<td class=\"n\">{mean_ms:.2} ms</td></tr></table></div>"
    );

    out.push_str("<h2>Scoreboard</h2><div class=\"map\" title=\"one character per worker slot\">");
    out.extend(snap.states.iter().map(|&state| state_char(state)));
    out.push_str("</div><div class=\"muted\">");
    for (index, state) in WorkerState::ALL.iter().enumerate() {
        let sep = if index > 0 { " &middot; " } else { "" };
        let _ = write!(
            out,
            "{sep}<code>{}</code> {}",
            state_char(*state),
            state.name()
        );
    }
    out.push_str("</div>");

    out.push_str(
        "<h2>Workers</h2><div class=\"wrap\"><table><tr><th>slot</th><th>pid</th><th>gen</th>\
         <th>state</th><th>requests</th><th>conns</th><th>h2 conns / streams</th><th>PSS</th><th>USS</th>\
         <th>threads busy</th><th>current requests</th><th>last exit in slot</th></tr>",
    );
    for worker in &snap.workers {
        let slot = &worker.slot;
        let busy: Vec<_> = worker
            .threads
            .iter()
            .enumerate()
            .filter(|(_, thread)| thread.state != ThreadState::Idle)
            .collect();
        let state_class = if slot.state == WorkerState::Busy {
            " class=\"busy\""
        } else {
            ""
        };
        let _ = write!(
            out,
            "<tr><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td{state_class}>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{} / {}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{} / {}</td><td>",
            worker.index,
            slot.pid,
            slot.generation,
            slot.state.name(),
            slot.requests,
            slot.connections,
            slot.h2_connections,
            slot.h2_streams,
            memory_figure(slot.pss),
            memory_figure(slot.uss),
            busy.len(),
            worker.threads.len(),
        );
        for (index, (number, thread)) in busy.iter().enumerate() {
            if index > 0 {
                out.push_str("<br>");
            }
            let _ = write!(out, "<span class=\"muted\">#{number}</span> <code>");
            escape(&mut out, &thread.method);
            out.push(' ');
            escape(&mut out, &snap.shown_target(&thread.target));
            let waiting = if thread.state == ThreadState::Client {
                " (on the client)"
            } else {
                ""
            };
            let _ = write!(out, "</code> {:.1} ms{waiting}", snap.elapsed_ms(thread));
        }
        out.push_str("</td><td>");
        match &worker.last_exit {
            Some(exit) => {
                let (how, value) = wait_status_parts(exit.wait_status);
                let _ = write!(out, "{} ({how} {value})", exit.reason.name());
            }
            None => out.push_str("<span class=\"muted\">-</span>"),
        }
        out.push_str("</td></tr>");
    }
    out.push_str("</table></div>");

    out.push_str("<h2>Worker restarts</h2><div class=\"wrap\"><table><tr>");
    let counts = restarts(totals);
    for (reason, _) in &counts {
        let _ = write!(out, "<th>{reason}</th>");
    }
    out.push_str("</tr><tr>");
    for (_, count) in &counts {
        let _ = write!(out, "<td class=\"n\">{count}</td>");
    }
    out.push_str("</tr></table></div>");

    out.push_str(
        "<h2>Recent worker exits</h2><div class=\"wrap\"><table><tr><th>when</th><th>pid</th>\
         <th>slot</th><th>reason</th><th>status</th><th>requests</th></tr>",
    );
    if snap.exits.is_empty() {
        out.push_str("<tr><td colspan=\"6\" class=\"muted\">none yet</td></tr>");
    }
    for exit in &snap.exits {
        let (how, value) = wait_status_parts(exit.wait_status);
        let ago = snap.now_ms.saturating_sub(exit.at_ms) as f64 / 1000.0;
        let _ = write!(
            out,
            "<tr><td>{} ago</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td>\
             <td>{how} {value}</td><td class=\"n\">{}</td></tr>",
            human_duration(ago),
            exit.pid,
            exit.slot,
            exit.reason.name(),
            exit.requests
        );
    }
    out.push_str(
        "</table></div><p class=\"muted\">Also: <a href=\"/status.json\">/status.json</a> \
         &middot; <a href=\"/metrics\">/metrics</a> &middot; <a href=\"/healthz\">/healthz</a> \
         &middot; <a href=\"/readyz\">/readyz</a></p></body></html>\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refresh_comes_from_the_query_within_bounds() {
        assert_eq!(refresh_from_query(b""), DEFAULT_REFRESH_S);
        assert_eq!(refresh_from_query(b"refresh=2"), 2);
        assert_eq!(refresh_from_query(b"x=1&refresh=0"), 0);
        assert_eq!(refresh_from_query(b"refresh=99999"), 3600);
        assert_eq!(refresh_from_query(b"refresh=abc"), DEFAULT_REFRESH_S);
    }

    #[test]
    fn text_is_escaped() {
        let mut out = String::new();
        escape(&mut out, b"<a href=\"x\">&'\xe9");
        assert_eq!(out, "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&#233;");
    }

    #[test]
    fn sizes_and_durations_read_like_a_person_would_write_them() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(3 * 1024 * 1024 / 2), "1.5 MiB");
        assert_eq!(human_duration(12.34), "12.3s");
        assert_eq!(human_duration(250.0), "4m 10s");
        assert_eq!(human_duration(7_500.0), "2h 5m");
        assert_eq!(human_duration(90_000.0), "1d 1h");
    }
}
