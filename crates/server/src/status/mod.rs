//! The status process's server: `/` (an HTML page), `/status.json`, `/metrics`
//! (Prometheus), `/healthz` and `/readyz`, read from the scoreboard, on the status listener (`status_bind`), off the public port. The master forks
//! it and supervises it like a worker; it runs no app, so it answers while every worker is
//! busy or stuck.
//!
//! One connection at a time, each closed after its response (`Connection: close`), with short
//! timeouts on its reads and writes: the listener is an operator's port (a probe, a
//! dashboard, `curl`), where one client rarely waits for another, and a client that holds
//! a connection without sending holds the server at most [`CLIENT_TIMEOUT`]. It exits when
//! the master's life pipe closes (the master is gone) or on `SIGTERM` (the default action:
//! it holds nothing to clean up).
//!
//! It owns the routes; `snapshot` reads the scoreboard once per request (and keeps the
//! request totals' history for the rates), `json`, `prometheus` and `html` render it
//! (`docs/status.md`, schema `tines-status/1`). It must not write to the scoreboard.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tines_proto::{parse_request_head, HeadStatus, Limits, RequestHead};

use crate::scoreboard::{monotonic_ns, WorkerState};
use crate::Scoreboard;

mod html;
mod json;
mod prometheus;
mod snapshot;

use snapshot::{History, Snapshot, SAMPLE_EVERY_MS};

/// How long one client may take to send its request, or to take the response.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);

/// The largest request head read (a status request has no need of more).
const MAX_HEAD: usize = 8192;

/// What the status server is told by the master.
pub struct StatusSpec {
    /// The listening socket (non-blocking or not: it is polled).
    pub listener: RawFd,
    /// The read end of the master's life pipe: EOF when the master is gone.
    pub life_fd: RawFd,
    /// The scoreboard the workers write.
    pub scoreboard: Arc<Scoreboard>,
    /// The MPM the workers run (shown as is).
    pub mpm: String,
    /// Show request targets' query strings (`status_show_query`); redacted otherwise.
    pub show_query: bool,
}

/// Serves until the master is gone. Errors other than a client's are returned.
pub fn run_status(spec: &StatusSpec) -> io::Result<()> {
    let mut history = History::default();
    loop {
        // The request total is sampled every few seconds for the rates, whether or not anyone
        // asks (summing the scoreboard only when a sample is due).
        let now_ms = monotonic_ns() / 1_000_000;
        if history.due(now_ms) {
            history.sample(now_ms, spec.scoreboard.totals().metrics.total());
        }
        let mut fds = [
            libc::pollfd {
                fd: spec.listener,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: spec.life_fd,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfd structs; the kernel writes only their revents.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, SAMPLE_EVERY_MS as i32) };
        if ready < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        if fds[1].revents != 0 {
            return Ok(()); // the life pipe: EOF (or an error) means the master is gone
        }
        if fds[0].revents & libc::POLLIN != 0 {
            // SAFETY: accept4 on the listener the master gave us; the result is checked.
            let fd = unsafe {
                libc::accept4(
                    spec.listener,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC,
                )
            };
            if fd < 0 {
                continue; // EAGAIN (another accept took it), ECONNABORTED, EMFILE: go on
            }
            // SAFETY: a new descriptor that nothing else owns.
            let owned = unsafe { OwnedFd::from_raw_fd(fd) };
            serve_one(TcpStream::from(owned), spec, &mut history);
        }
    }
}

/// Reads one request head, answers it and closes (any failure just drops the client).
fn serve_one(mut stream: TcpStream, spec: &StatusSpec, history: &mut History) {
    // A Unix-socket peer works through the same calls (a `TcpStream` over its fd only reads,
    // writes and sets the socket timeouts).
    let _ = stream.set_read_timeout(Some(CLIENT_TIMEOUT));
    let _ = stream.set_write_timeout(Some(CLIENT_TIMEOUT));
    let mut buf = vec![0u8; MAX_HEAD];
    let mut filled = 0;
    let mut head = RequestHead::default();
    let limits = Limits {
        max_head_size: MAX_HEAD,
        ..Limits::default()
    };
    let response = loop {
        match stream.read(&mut buf[filled..]) {
            Ok(0) | Err(_) => return,
            Ok(n) => filled += n,
        }
        match parse_request_head(&buf[..filled], &limits, &mut head) {
            Ok(HeadStatus::Complete) => {
                let accept = head
                    .headers
                    .iter()
                    .find(|(name, _)| name.of(&buf).eq_ignore_ascii_case(b"accept"))
                    .map_or(&b""[..], |(_, value)| value.of(&buf));
                let request = Request {
                    method: head.method.of(&buf),
                    target: head.target.of(&buf),
                    accept,
                };
                break answer(&request, spec, history);
            }
            Ok(HeadStatus::Partial) if filled < buf.len() => continue,
            Ok(HeadStatus::Partial) => break plain(431, "request head too large\n"),
            Err(err) => break plain(err.status(), &format!("{}\n", err.reason())),
        }
    };
    let _ = stream.write_all(&response);
}

/// What a status request asks.
struct Request<'a> {
    method: &'a [u8],
    target: &'a [u8],
    accept: &'a [u8],
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
    let snapshot = |history: &mut History| {
        Snapshot::take(&spec.scoreboard, &spec.mpm, spec.show_query, history)
    };
    let mut response = match path {
        b"/healthz" => plain(200, "ok\n"),
        b"/readyz" => match readiness(&spec.scoreboard) {
            Ok(()) => plain(200, "ready\n"),
            Err(why) => plain(503, &format!("not ready: {why}\n")),
        },
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
}
