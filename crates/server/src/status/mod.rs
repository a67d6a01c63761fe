//! The status process's server: `/` (an HTML page), `/status.json`, `/metrics`
//! (Prometheus), `/healthz` and `/readyz`, read from the scoreboard, on the status listener (`status_bind`), off the public port. The master forks
//! it and supervises it like a worker; it runs no app, so it answers while every worker is
//! busy or stuck.
//!
//! Many connections at once from one poll loop, each closed after its response
//! (`Connection: close`), within one deadline from its accept (`serve`: [`SLOTS`] slots, the
//! oldest dropped when they are full). `/healthz` and `/readyz` answer any peer (a kubelet's
//! probe comes from the node's address); the rest answers only peers in `status_allow`
//! (403 otherwise), as it shows what the server is doing. It exits when the master's life
//! pipe closes (the master is gone) or on `SIGTERM` (the default action: it holds nothing to
//! clean up).
//!
//! It owns the routes and who may see them; `serve` owns the connections; `snapshot` reads
//! the scoreboard once per request (and keeps the request totals' history for the rates),
//! `json`, `prometheus` and `html` render it (`docs/status.md`, schema `tines-status/1`). It
//! must not write to the scoreboard.

use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::scoreboard::WorkerState;
use crate::trusted_proxies::TrustedProxies;
use crate::Scoreboard;

mod html;
mod json;
mod prometheus;
mod serve;
mod snapshot;

pub use serve::{run_status, SLOTS};
use snapshot::{History, Shown, Snapshot};

/// What the status server is told by the master.
pub struct StatusSpec {
    /// The listening socket (made non-blocking: the loop accepts until `EAGAIN`).
    pub listener: RawFd,
    /// The read end of the master's life pipe: EOF when the master is gone.
    pub life_fd: RawFd,
    /// The scoreboard the workers write.
    pub scoreboard: Arc<Scoreboard>,
    /// The MPM the workers run (shown as is).
    pub mpm: String,
    /// Show request targets' query strings (`status_show_query`); redacted otherwise.
    pub show_query: bool,
    /// Show no request target at all, only the method (`status_redact_paths`).
    pub redact_paths: bool,
    /// The peers shown `/`, `/status.json` and `/metrics` (`status_allow`; the parser and
    /// matcher `forwarded_allow_ips` uses). A Unix-socket peer always is.
    pub allow: TrustedProxies,
    /// How long a connection may take from its accept to its response's last byte
    /// (`status_timeout`).
    pub timeout: Duration,
}

impl StatusSpec {
    /// How much of a request target the output shows (redaction wins over `show_query`).
    fn shown(&self) -> Shown {
        if self.redact_paths {
            Shown::Nothing
        } else if self.show_query {
            Shown::Whole
        } else {
            Shown::WithoutQuery
        }
    }
}

/// What a status request asks.
struct Request<'a> {
    method: &'a [u8],
    target: &'a [u8],
    accept: &'a [u8],
    /// The peer is in `status_allow`.
    allowed: bool,
}

/// The paths served, for the 404's body.
const PATHS: &str = "/, /status.json, /metrics, /healthz, /readyz";

/// The whole response to `request`.
fn answer(request: &Request<'_>, spec: &StatusSpec, history: &mut History) -> Vec<u8> {
    let head_only = request.method == b"HEAD";
    if request.method != b"GET" && !head_only {
        return plain(405, "only GET and HEAD\n");
    }
    let mut parts = request.target.splitn(2, |&b| b == b'?');
    let path = parts.next().unwrap_or(b"");
    let query = parts.next().unwrap_or(b"");
    let snapshot =
        |history: &mut History| Snapshot::take(&spec.scoreboard, &spec.mpm, spec.shown(), history);
    let mut response = match path {
        b"/healthz" => plain(200, "ok\n"),
        b"/readyz" => match readiness(&spec.scoreboard) {
            Ok(()) => plain(200, "ready\n"),
            Err(why) => plain(503, &format!("not ready: {why}\n")),
        },
        _ if !request.allowed => plain(403, "forbidden: this peer is not in status_allow\n"),
        b"/status.json" => respond(200, "application/json", &json::render(&snapshot(history))),
        b"/metrics" => {
            let openmetrics = prometheus::wants_openmetrics(request.accept);
            let content_type = if openmetrics {
                prometheus::OPENMETRICS_TYPE
            } else {
                prometheus::TEXT_TYPE
            };
            let body = prometheus::render(&snapshot(history), openmetrics);
            respond(200, content_type, body.as_bytes())
        }
        b"/" => {
            let page = html::render(&snapshot(history), html::refresh_from_query(query));
            respond(200, "text/html; charset=utf-8", page.as_bytes())
        }
        _ => plain(404, &format!("not found: {PATHS}\n")),
    };
    if head_only {
        if let Some(end) = response.windows(4).position(|w| w == b"\r\n\r\n") {
            response.truncate(end + 4);
        }
    }
    response
}

fn plain(status: u16, body: &str) -> Vec<u8> {
    respond(status, "text/plain; charset=utf-8", body.as_bytes())
}

fn respond(status: u16, content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\nConnection: close\r\n\r\n",
        tines_proto::status::reason_phrase(status),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// Ready when the master is not stopping and a worker is up and not draining.
fn readiness(board: &Scoreboard) -> Result<(), &'static str> {
    if board.header().stopping.load(Ordering::Acquire) != 0 {
        return Err("the server is stopping");
    }
    let accepting = (0..board.len())
        .filter_map(|index| board.read(index))
        .any(|slot| {
            slot.pid != 0
                && !matches!(
                    slot.state,
                    WorkerState::Free
                        | WorkerState::Booting
                        | WorkerState::Standby
                        | WorkerState::Stopping
                )
        });
    if accepting {
        Ok(())
    } else {
        Err("no worker is accepting")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set_state(board: &Scoreboard, slot: usize, state: WorkerState) {
        board
            .slot(slot)
            .unwrap()
            .state
            .store(state as u32, Ordering::Relaxed);
    }

    #[test]
    fn a_standby_or_a_booting_worker_does_not_make_the_server_ready() {
        let board = Scoreboard::new(2, 1).unwrap();
        board.claim(0, 41, 1);
        for state in [
            WorkerState::Booting,
            WorkerState::Standby,
            WorkerState::Stopping,
        ] {
            set_state(&board, 0, state);
            assert_eq!(
                readiness(&board),
                Err("no worker is accepting"),
                "{state:?}"
            );
        }
        board.claim(1, 42, 1);
        set_state(&board, 1, WorkerState::Idle);
        assert_eq!(readiness(&board), Ok(()));
    }

    #[test]
    fn every_page_counts_h2_connections_and_streams_per_worker() {
        let board = Scoreboard::new(2, 1).unwrap();
        board.claim(0, 41, 1);
        board.claim(1, 42, 1);
        let slot = board.slot(1).unwrap();
        // Worker 42: 3 HTTP/1.1 connections (one with a request in the app) and one HTTP/2
        // connection with 2 streams, both in the app.
        slot.connections.store(4, Ordering::Relaxed);
        slot.active.store(3, Ordering::Relaxed);
        slot.h2_connection_opened();
        slot.h2_stream_opened();
        slot.h2_stream_opened();
        let snap = Snapshot::take(&board, "thread", Shown::Whole, &mut History::default());
        assert_eq!(snap.idle_connections(), 2);

        let json = String::from_utf8(json::render(&snap)).unwrap();
        assert!(
            json.contains(
                "\"connections\":4,\"connections_idle\":2,\"h2_connections\":1,\"h2_streams\":2,"
            ),
            "{json}"
        );
        assert!(
            json.contains("\"pid\":41,\"generation\":1,\"state\":\"booting\",\"requests\":0,\"active\":0,\"connections\":0,\"h2_connections\":0,\"h2_streams\":0,"),
            "{json}"
        );
        assert!(
            json.contains(
                "\"connections\":4,\"h2_connections\":1,\"h2_streams\":2,\"accepted\":0,"
            ),
            "{json}"
        );

        let text = prometheus::render(&snap, false);
        for line in [
            "tines_http2_connections_open 1\n",
            "tines_http2_streams_open 2\n",
            "tines_worker_http2_open{slot=\"0\",pid=\"41\",kind=\"streams\"} 0\n",
            "tines_worker_http2_open{slot=\"1\",pid=\"42\",kind=\"connections\"} 1\n",
            "tines_worker_http2_open{slot=\"1\",pid=\"42\",kind=\"streams\"} 2\n",
        ] {
            assert!(text.contains(line), "{line}{text}");
        }

        let page = html::render(&snap, 0);
        assert!(
            page.contains("<b>1 / 2</b><span>HTTP/2 connections / streams</span>"),
            "{page}"
        );
        assert!(
            page.contains("<td class=\"n\">4</td><td class=\"n\">1 / 2</td>"),
            "{page}"
        );
    }

    #[test]
    fn every_page_sums_the_compression_counters() {
        let board = Scoreboard::new(2, 1).unwrap();
        board.claim(0, 41, 1);
        board.claim(1, 42, 1);
        let snap = Snapshot::take(&board, "thread", Shown::Whole, &mut History::default());
        // Off (nothing counted): every sample present at 0, no cards on the page.
        let text = prometheus::render(&snap, false);
        assert!(text.contains("tines_compressed_responses_total{coding=\"zstd\"} 0\n"));
        assert!(!html::render(&snap, 0).contains("compressed responses"));
        for (slot, counts) in [
            (0, [2, 1, 0, 900, 300, 4, 1]),
            (1, [1, 0, 3, 100, 60, 0, 2]),
        ] {
            for (counter, count) in board.slot(slot).unwrap().compression.iter().zip(counts) {
                counter.store(count, Ordering::Relaxed);
            }
        }
        let snap = Snapshot::take(&board, "thread", Shown::Whole, &mut History::default());
        let json = String::from_utf8(json::render(&snap)).unwrap();
        assert!(
            json.contains(
                "\"compression\":{\"responses\":{\"gzip\":3,\"br\":1,\"zstd\":3},\
                 \"bytes_in\":1000,\"bytes_out\":360,\"skipped\":4,\"not_accepted\":3},"
            ),
            "{json}"
        );
        let text = prometheus::render(&snap, false);
        for line in [
            "tines_compressed_responses_total{coding=\"gzip\"} 3\n",
            "tines_compressed_responses_total{coding=\"br\"} 1\n",
            "tines_compressed_responses_total{coding=\"zstd\"} 3\n",
            "tines_compression_in_bytes_total 1000\n",
            "tines_compression_out_bytes_total 360\n",
            "tines_compression_skipped_total{reason=\"rule\"} 4\n",
            "tines_compression_skipped_total{reason=\"not_accepted\"} 3\n",
        ] {
            assert!(text.contains(line), "{line}{text}");
        }
        let page = html::render(&snap, 0);
        assert!(
            page.contains("<b>3 / 1 / 3</b><span>compressed responses: gzip / br / zstd</span>"),
            "{page}"
        );
        assert!(page.contains("<b>1000 B \u{2192} 360 B</b>"), "{page}");
    }

    #[test]
    fn requests_waiting_for_an_app_thread_are_not_idle_connections() {
        let board = Scoreboard::new(2, 1).unwrap();
        board.claim(0, 41, 1);
        board.claim(1, 42, 1);
        // Worker 42: 5 connections, one request in the app, three waiting for its app thread
        // since 2 ms before the reading; worker 41: one waiting since 1 ms before.
        let slot = board.slot(1).unwrap();
        slot.connections.store(5, Ordering::Relaxed);
        slot.active.store(1, Ordering::Relaxed);
        slot.queued.store(3, Ordering::Relaxed);
        let now = crate::scoreboard::monotonic_ns();
        slot.queued_since_ns
            .store(now - 2_000_000, Ordering::Relaxed);
        let other = board.slot(0).unwrap();
        other.connections.store(1, Ordering::Relaxed);
        other.queued.store(1, Ordering::Relaxed);
        other
            .queued_since_ns
            .store(now - 1_000_000, Ordering::Relaxed);
        // Two requests counted: 1 ms and 3 ms in the app, after 0 and 4 ms in the queue.
        let metrics = board.thread_metrics(1, 0).unwrap();
        metrics.record_owned(crate::scoreboard::Counted::new(b"GET", 200, 0));
        metrics.observe_duration_owned(1_000);
        metrics.record_owned(crate::scoreboard::Counted::new(b"GET", 200, 4_000));
        metrics.observe_duration_owned(3_000);
        let snap = Snapshot::take(&board, "thread", Shown::Whole, &mut History::default());
        assert_eq!((snap.totals.queued, snap.idle_connections()), (4, 1));
        assert_eq!(snap.totals.queued_since_ns, now - 2_000_000);
        let waited = snap.queued_wait_ms(snap.totals.queued_since_ns);
        assert!(waited >= 2.0, "{waited}");
        assert_eq!(snap.queued_wait_ms(0), 0.0);
        // The mean a client saw: (1 + 3 + 0 + 4) ms over 2 requests, not the 2 ms of the
        // durations alone.
        assert_eq!(snap.mean_response_ms(), 4.0);

        let json = String::from_utf8(json::render(&snap)).unwrap();
        assert!(
            json.contains("\"connections\":6,\"connections_idle\":1,"),
            "{json}"
        );
        assert!(json.contains(",\"queued\":4,\"queued_wait_ms\":"), "{json}");
        assert!(json.contains(",\"mean_response_ms\":4.000}"), "{json}");
        assert!(json.contains(",\"queued\":3,\"queued_wait_ms\":"), "{json}");
        let text = prometheus::render(&snap, false);
        assert!(text.contains("\ntines_requests_queued 4\n"), "{text}");
        assert!(text.contains("\ntines_connections_idle 1\n"), "{text}");
        assert!(
            text.contains("\ntines_requests_queued_oldest_wait_seconds 0.00"),
            "{text}"
        );
        let page = html::render(&snap, 0);
        assert!(
            page.contains("<b>6 / 1</b><span>connections open / idle</span>"),
            "{page}"
        );
        assert!(page.contains("<b>4 / "), "{page}");
        assert!(page.contains("<td class=\"n\">4.00 ms</td>"), "{page}");

        // Drained by the app threads' pops before the loop's next turn updated the time (it
        // alone does: review of issue 40, item 10): the stale time shows no wait.
        slot.queued.store(0, Ordering::Relaxed);
        other.queued.store(0, Ordering::Relaxed);
        assert_eq!(board.read(1).unwrap().queued_since_ns, 0);
        let snap = Snapshot::take(&board, "thread", Shown::Whole, &mut History::default());
        assert_eq!((snap.totals.queued, snap.totals.queued_since_ns), (0, 0));
        let json = String::from_utf8(json::render(&snap)).unwrap();
        assert!(
            json.contains(",\"queued\":0,\"queued_wait_ms\":0.000,"),
            "{json}"
        );

        // Freed, the slot forgets its queue.
        board.clear(1);
        assert_eq!(board.read(1).unwrap().queued, 0);
        assert_eq!(board.read(1).unwrap().queued_since_ns, 0);
    }
}
