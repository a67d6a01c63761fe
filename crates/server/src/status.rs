//! The status process's server: `/healthz`, `/readyz` and `/status.json`, read from the
//! scoreboard, on the status listener (`status_bind`), off the public port. The master forks
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
//! It owns the routes and the JSON layout (`docs/status.md`, schema `tines-status/1`); it
//! must not write to the scoreboard.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tines_proto::{parse_request_head, HeadStatus, Limits, RequestHead};

use crate::scoreboard::{monotonic_ns, now_ms, ThreadState, WorkerState};
use crate::Scoreboard;

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
    loop {
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
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
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
            serve_one(TcpStream::from(owned), spec);
        }
    }
}

/// Reads one request head, answers it and closes (any failure just drops the client).
fn serve_one(mut stream: TcpStream, spec: &StatusSpec) {
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
                let method = head.method.of(&buf);
                let target = head.target.of(&buf);
                break answer(method, target, spec);
            }
            Ok(HeadStatus::Partial) if filled < buf.len() => continue,
            Ok(HeadStatus::Partial) => break plain(431, "request head too large\n"),
            Err(err) => break plain(err.status(), &format!("{}\n", err.reason())),
        }
    };
    let _ = stream.write_all(&response);
}

/// The whole response for `method` `target`.
fn answer(method: &[u8], target: &[u8], spec: &StatusSpec) -> Vec<u8> {
    let head_only = method == b"HEAD";
    if method != b"GET" && !head_only {
        return plain(405, "only GET and HEAD\n");
    }
    let path = target.split(|&b| b == b'?').next().unwrap_or(b"");
    let mut response = match path {
        b"/healthz" => plain(200, "ok\n"),
        b"/readyz" => match readiness(&spec.scoreboard) {
            Ok(()) => plain(200, "ready\n"),
            Err(why) => plain(503, &format!("not ready: {why}\n")),
        },
        b"/status.json" => respond(200, "application/json", status_json(spec).as_bytes()),
        _ => plain(404, "not found: /healthz, /readyz, /status.json\n"),
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
    let accepting = (0..board.len()).filter_map(|index| board.read(index)).any(|slot| {
        slot.pid != 0
            && !matches!(
                slot.state,
                WorkerState::Free | WorkerState::Booting | WorkerState::Stopping
            )
    });
    if accepting {
        Ok(())
    } else {
        Err("no worker is accepting")
    }
}

/// Appends `bytes` as a JSON string (each byte one character, as latin-1; ASCII out).
fn push_json_string(out: &mut String, bytes: &[u8]) {
    out.push('"');
    for &b in bytes {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(char::from(b)),
            _ => out.push_str(&format!("\\u{b:04x}")),
        }
    }
    out.push('"');
}

/// A request target as shown: its query replaced by `?...` unless `show_query`.
fn shown_target(target: &[u8], show_query: bool) -> Vec<u8> {
    match target.iter().position(|&b| b == b'?') {
        Some(at) if !show_query => {
            let mut shown = target[..at].to_vec();
            shown.extend_from_slice(b"?...");
            shown
        }
        _ => target.to_vec(),
    }
}

/// `/status.json`: schema `tines-status/1` (docs/status.md).
fn status_json(spec: &StatusSpec) -> String {
    let board = &spec.scoreboard;
    let header = board.header();
    let now = now_ms();
    let now_mono = monotonic_ns();
    let started = header.started_ms.load(Ordering::Relaxed);
    let mut out = String::with_capacity(4096);
    out.push_str("{\"schema\":\"tines-status/1\"");
    out.push_str(&format!(
        ",\"master_pid\":{},\"generation\":{},\"mpm\":",
        header.master_pid.load(Ordering::Acquire),
        header.generation.load(Ordering::Relaxed)
    ));
    push_json_string(&mut out, spec.mpm.as_bytes());
    out.push_str(&format!(
        ",\"stopping\":{},\"uptime_s\":{:.3},\"time_ms\":{now}",
        header.stopping.load(Ordering::Acquire) != 0,
        now.saturating_sub(started) as f64 / 1000.0,
    ));
    let mut requests = 0u64;
    let mut workers = String::new();
    for index in 0..board.len() {
        let Some(slot) = board.read(index) else {
            continue;
        };
        if slot.pid == 0 {
            continue;
        }
        requests += slot.requests;
        if !workers.is_empty() {
            workers.push(',');
        }
        workers.push_str(&format!(
            "{{\"slot\":{index},\"pid\":{},\"generation\":{},\"state\":\"{}\",\
             \"requests\":{},\"active\":{},\"connections\":{},\"accepted\":{},\
             \"bytes_out\":{},\"heartbeat_age_ms\":{},\"memory\":{{\"rss\":{},\"pss\":{},\
             \"uss\":{},\"swap\":{}}},\"threads\":[",
            slot.pid,
            slot.generation,
            slot.state.name(),
            slot.requests,
            slot.active,
            slot.connections,
            slot.accepted,
            slot.bytes_out,
            now.saturating_sub(slot.heartbeat_ms),
            slot.rss,
            slot.pss,
            slot.uss,
            slot.swap,
        ));
        for (thread, reading) in board.read_threads(index).into_iter().enumerate() {
            if thread > 0 {
                workers.push(',');
            }
            let busy = reading.state != ThreadState::Idle;
            workers.push_str(&format!(
                "{{\"thread\":{thread},\"state\":\"{}\",\"requests\":{}",
                reading.state.name(),
                reading.requests
            ));
            if busy {
                workers.push_str(",\"method\":");
                push_json_string(&mut workers, &reading.method);
                workers.push_str(",\"target\":");
                push_json_string(&mut workers, &shown_target(&reading.target, spec.show_query));
                workers.push_str(&format!(
                    ",\"elapsed_ms\":{:.3}",
                    now_mono.saturating_sub(reading.dispatch_ns) as f64 / 1e6
                ));
            }
            workers.push('}');
        }
        workers.push_str("]}");
    }
    out.push_str(&format!(",\"requests\":{requests},\"workers\":["));
    out.push_str(&workers);
    out.push_str("]}\n");
    out
}
