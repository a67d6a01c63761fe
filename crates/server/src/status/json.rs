//! `/status.json`: schema `tines-status/1` (docs/status.md). Fields are only ever added within
//! a schema version.

use std::io::Write;

use crate::access_log::push_json_string;

use super::snapshot::{restarts, wait_status_parts, Snapshot, RATE_WINDOWS_S};
use crate::scoreboard::metrics::{METHODS, STATUS_CLASSES};
use crate::scoreboard::{ExitReading, ThreadState};

fn push_exit(out: &mut Vec<u8>, exit: &ExitReading) {
    let (how, value) = wait_status_parts(exit.wait_status);
    let _ = write!(
        out,
        "{{\"pid\":{},\"slot\":{},\"reason\":\"{}\",\"{how}\":{value},\"time_ms\":{},\
         \"requests\":{}}}",
        exit.pid,
        exit.slot,
        exit.reason.name(),
        exit.at_ms,
        exit.requests
    );
}

/// The document.
pub fn render(snap: &Snapshot) -> Vec<u8> {
    let totals = &snap.totals;
    let metrics = &totals.metrics;
    let mut out = Vec::with_capacity(4096);
    let _ = write!(
        out,
        "{{\"schema\":\"tines-status/1\",\"master_pid\":{},\"generation\":{},\"mpm\":",
        snap.master_pid, snap.generation
    );
    push_json_string(&mut out, snap.mpm.as_bytes());
    let _ = write!(
        out,
        ",\"stopping\":{},\"uptime_s\":{:.3},\"time_ms\":{},\"requests\":{}",
        snap.stopping,
        snap.uptime_s,
        snap.now_ms,
        metrics.total()
    );
    out.extend_from_slice(b",\"totals\":{\"by_status\":{");
    for (class, name) in STATUS_CLASSES.iter().enumerate() {
        let comma = if class > 0 { "," } else { "" };
        let _ = write!(out, "{comma}\"{name}\":{}", metrics.by_class(class));
    }
    out.extend_from_slice(b"},\"by_method\":{");
    let mut first = true;
    for (method, name) in METHODS.iter().enumerate() {
        let count: u64 = metrics.requests[method].iter().sum();
        if count > 0 {
            let comma = if first { "" } else { "," };
            first = false;
            let _ = write!(out, "{comma}\"{name}\":{count}");
        }
    }
    let _ = write!(
        out,
        "}},\"accepted\":{},\"bytes_in\":{},\"bytes_out\":{},\"in_flight\":{},\
         \"connections\":{},\"connections_idle\":{},\"h2_connections\":{},\
         \"h2_streams\":{},\"rate_limited\":{},\"rate_limit_evictions\":{},\
         \"rate_limit_table_entries\":{},\"rate_limit_table_size\":{},\
         \"refused_connections_per_client\":{},\
         \"compression\":{{\"responses\":{{\"gzip\":{},\"br\":{},\"zstd\":{}}},\
         \"bytes_in\":{},\"bytes_out\":{},\"skipped\":{},\"not_accepted\":{}}},\"duration_sum_s\":{:.6},\"queue_wait_sum_s\":{:.6},\
         \"queued\":{},\"queued_wait_ms\":{:.3},\"mean_response_ms\":{:.3}}}",
        totals.accepted,
        totals.bytes_in,
        totals.bytes_out,
        totals.in_flight,
        totals.connections,
        snap.idle_connections(),
        totals.h2_connections,
        totals.h2_streams,
        totals.rate_limited,
        totals.rate_evictions,
        totals.rate_entries,
        totals.rate_capacity,
        totals.refused_connections,
        totals.compression.responses[0],
        totals.compression.responses[1],
        totals.compression.responses[2],
        totals.compression.bytes_in,
        totals.compression.bytes_out,
        totals.compression.skipped,
        totals.compression.not_accepted,
        metrics.duration_sum_us as f64 / 1e6,
        metrics.wait_sum_us as f64 / 1e6,
        totals.queued,
        snap.queued_wait_ms(totals.queued_since_ns),
        snap.mean_response_ms(),
    );
    out.extend_from_slice(b",\"rates\":{");
    for (index, (window, rate)) in RATE_WINDOWS_S.iter().zip(snap.rates).enumerate() {
        let comma = if index > 0 { "," } else { "" };
        let _ = write!(out, "{comma}\"{}m\":{rate:.3}", window / 60);
    }
    out.extend_from_slice(b"},\"restarts\":{");
    for (index, (reason, count)) in restarts(totals).into_iter().enumerate() {
        let comma = if index > 0 { "," } else { "" };
        let _ = write!(out, "{comma}\"{reason}\":{count}");
    }
    out.extend_from_slice(b"},\"scoreboard\":\"");
    out.extend(
        snap.states
            .iter()
            .map(|&state| super::snapshot::state_char(state) as u8),
    );
    out.extend_from_slice(b"\",\"workers\":[");
    for (index, worker) in snap.workers.iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        let slot = &worker.slot;
        let _ = write!(
            out,
            "{{\"slot\":{},\"pid\":{},\"generation\":{},\"state\":\"{}\",\
             \"requests\":{},\"active\":{},\"connections\":{},\"h2_connections\":{},\
             \"h2_streams\":{},\"accepted\":{},\"bytes_in\":{},\"bytes_out\":{},\"heartbeat_age_ms\":{},\
             \"queued\":{},\"queued_wait_ms\":{:.3},\
             \"memory\":{{\"rss\":{},\"pss\":{},\"uss\":{},\"swap\":{}}},\"last_exit\":",
            worker.index,
            slot.pid,
            slot.generation,
            slot.state.name(),
            slot.requests,
            slot.active,
            slot.connections,
            slot.h2_connections,
            slot.h2_streams,
            slot.accepted,
            slot.bytes_in,
            slot.bytes_out,
            snap.now_ms.saturating_sub(slot.heartbeat_ms),
            slot.queued,
            snap.queued_wait_ms(slot.queued_since_ns),
            slot.rss,
            Figure(slot.pss),
            Figure(slot.uss),
            slot.swap,
        );
        match &worker.last_exit {
            Some(exit) => push_exit(&mut out, exit),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"threads\":[");
        for (number, thread) in worker.threads.iter().enumerate() {
            if number > 0 {
                out.push(b',');
            }
            let _ = write!(
                out,
                "{{\"thread\":{number},\"state\":\"{}\",\"requests\":{}",
                thread.state.name(),
                thread.requests
            );
            if thread.state != ThreadState::Idle {
                out.extend_from_slice(b",\"method\":");
                push_json_string(&mut out, &thread.method);
                out.extend_from_slice(b",\"target\":");
                push_json_string(&mut out, &snap.shown_target(&thread.target));
                let _ = write!(out, ",\"elapsed_ms\":{:.3}", snap.elapsed_ms(thread));
            }
            out.push(b'}');
        }
        out.extend_from_slice(b"]}");
    }
    out.extend_from_slice(b"],\"recent_exits\":[");
    for (index, exit) in snap.exits.iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        push_exit(&mut out, exit);
    }
    out.extend_from_slice(b"]}\n");
    out
}

/// A memory figure in JSON: `null` where the master could read only RSS.
struct Figure(u64);

impl std::fmt::Display for Figure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0 == crate::scoreboard::MEMORY_UNKNOWN {
            f.write_str("null")
        } else {
            write!(f, "{}", self.0)
        }
    }
}
