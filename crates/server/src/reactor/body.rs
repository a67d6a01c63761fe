//! Reading a request body before dispatch, on every MPM: once a head is complete the loop
//! reads the whole body (Content-Length or chunked, decoded as it arrives) into the
//! connection's [`ParkedBody`] (memory, or an unlinked temporary file beyond
//! `request_buffer_memory` / `request_buffer_total`), so that an app slot only ever meets a
//! request that has fully arrived and a slow uploader costs no slot.
//!
//! It owns the loop's side of that: which requests are read first (all with a body but those
//! on `stream_body_paths`, matched here in Rust), 413 for a Content-Length over
//! `max_body_size` before anything is read (no `100 Continue`), the `100 Continue` the server
//! sends itself for `Expect: 100-continue`, the reads (never past a Content-Length body's end;
//! through a per-loop scratch buffer), the answers to a body that fails (413, 400 bad
//! chunking, 507/500 when the temporary file cannot be written, with one error-log line, at
//! most one a second), and the bodies waiting unread for disk room when `buffer_disk_total`
//! is reached (each with the bytes it needs at once, retried when the free room covers them:
//! edge-triggered epoll will not announce them again). The body deadlines are the timers'
//! (`Entry::Body`).
//!
//! It must not serve a request nor decide how a body is stored (`parked_body` does).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tines_proto::BodyFraming;

use super::{Driver, Entry, Reactor};
use crate::config::WorkerConfig;
use crate::connection::Connection;
use crate::parked_body::{Area, BodyFault, ParkedBody, Room};
use crate::shared::{max_body_size_line, Oversize, WorkerShared};

/// The most one read takes off a socket while a body is read before dispatch (one buffer per
/// loop, so 1 MiB per worker). Each read is followed by one write to the body's temporary
/// file, and a write to a file costs a fixed price per call (ext4 starts and ends a journal
/// handle): with 64 KiB, a 20 MB Flask upload cost about a third more server CPU than when it
/// streamed through the app; with 1 MiB it costs about the same (benches/results/
/// ab-2026-11-24-0558.md).
const READ_CHUNK: usize = 1024 * 1024;

/// The interim response to `Expect: 100-continue` (25 bytes: always fits an empty socket
/// buffer, so the loop writes it without waiting).
const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// The loop's state for reading bodies: its scratch buffer and the bodies waiting for disk.
pub(super) struct BodyReading {
    scratch: Vec<u8>,
    /// Connections whose body needs disk room that `buffer_disk_total` does not have now,
    /// in the order they began to wait, with the bytes each must take at once: retried when
    /// the disk account has that much free. A connection is on it at most once (its
    /// `ParkedBody::waiting_for_disk`).
    disk_waiters: Vec<(usize, u64)>,
    /// The least free disk room any waiter was measured against since the last retry: a
    /// retry is only worth a pass over the waiters once the free room is larger.
    free_seen: u64,
    /// The temporary-file error line's rate.
    storage_log: LogLimit,
}

impl BodyReading {
    pub(super) fn new() -> BodyReading {
        BodyReading {
            scratch: Vec::new(),
            disk_waiters: Vec::new(),
            free_seen: u64::MAX,
            storage_log: LogLimit::default(),
        }
    }
}

/// What the loop does next with a connection whose head is complete.
pub(super) enum BodyStep {
    /// The body is complete (or there is none, or it streams): hand it to a slot.
    Dispatch,
    /// More bytes are needed; the socket was drained.
    Park,
    /// The body needs this many bytes of disk room at once, which `buffer_disk_total` does
    /// not have now: park, unread.
    WaitDisk(u64),
    /// The peer closed or the socket failed.
    Close,
    /// Answer with this status and close (lingering: the client may still be sending).
    Refuse(u16),
}

/// The path of a request target as `stream_body_paths` compares it: its normal form
/// (`tines_proto::NormalPath`, the reading every path rule shares: origin-form, or the path
/// of an `http(s)` absolute-form one, cut at `?` or `#`, percent-decoded once, repeated `/`
/// collapsed), so that `/%75pload` and `//upload` are `/upload`. `None` when it has no single
/// reading (a bad escape, an encoded `/` or NUL, a dot segment, no path at all: `*`, another
/// scheme's absolute form): such a body is read before dispatch, never streamed.
pub(crate) fn stream_path(target: &[u8]) -> Option<tines_proto::NormalPath<'_>> {
    tines_proto::NormalPath::of(target).ok()
}

/// True when `target` is on one of `stream_body_paths`: its path's normal form
/// ([`stream_path`]) starts with one of them (a byte prefix, as the setting always matched:
/// `/up` holds `/upload`). Decodes as it compares: no allocation; nothing at all when the
/// setting is empty.
pub(crate) fn streams_body(target: &[u8], config: &WorkerConfig) -> bool {
    if config.stream_body_paths.is_empty() {
        return false;
    }
    let Some(path) = stream_path(target) else {
        return false;
    };
    config.stream_body_paths.iter().any(|prefix| {
        let mut bytes = path.bytes();
        prefix.iter().all(|&want| bytes.next() == Some(want))
    })
}

/// True when the request whose head `conn` holds has a body the loop must read before it is
/// dispatched: not all buffered yet, and not on `stream_body_paths`. A slot serving pipelined
/// requests gives such a connection back to the loop instead of serving it.
pub(crate) fn must_read_before_dispatch(conn: &Connection, config: &WorkerConfig) -> bool {
    let head = conn.head();
    let unread = match head.body {
        BodyFraming::None | BodyFraming::Length(0) => false,
        BodyFraming::Length(length) => ((conn.filled - head.head_len) as u64) < length,
        BodyFraming::Chunked => true,
    };
    unread && !streams_body(head.target.of(&conn.buf), config)
}

impl Reactor {
    /// Reads the body of the request whose head `conn` holds as far as the socket allows;
    /// says what to do next.
    pub(super) fn read_body_before_dispatch(&mut self, conn: &mut Connection) -> BodyStep {
        // First, so that a request without a body to read (nearly every one) costs nothing
        // more here.
        if conn.parked_body.is_none() && !must_read_before_dispatch(conn, &self.shared.config) {
            return BodyStep::Dispatch;
        }
        let shared = Arc::clone(&self.shared);
        let config = &shared.config;
        if conn.parked_body.is_none() {
            let head = conn.head();
            if let BodyFraming::Length(length) = head.body {
                if config.max_body_size > 0 && length > config.max_body_size {
                    // RFC 9110 15.5.14: refuse before reading (and without a 100 Continue).
                    shared.log_too_large(|| {
                        max_body_size_line(
                            head.method.of(&conn.buf),
                            head.target.of(&conn.buf),
                            Oversize::Announced(length),
                            config.max_body_size,
                        )
                    });
                    return BodyStep::Refuse(413);
                }
            }
            let head_len = head.head_len;
            let expect_continue = head.expect_continue;
            let mut body = ParkedBody::new(
                head.body,
                &shared.buffers,
                config.request_buffer_memory,
                config.max_body_size,
                config.limits.max_head_size,
            );
            // Body bytes that came with the head are stored like any read (as room allows).
            body.early = conn.buf[head_len..conn.filled].to_vec();
            conn.filled = head_len;
            if expect_continue && body.early.is_empty() {
                // The head's checks passed: the server asks for the body itself (a client
                // that sent some already needs no 100, RFC 9110 10.1.1). The exchange then
                // sends none.
                if conn
                    .link()
                    .write_all_from(&[CONTINUE], 0, Duration::ZERO)
                    .is_err()
                {
                    return BodyStep::Close;
                }
            }
            conn.park_body(Box::new(body));
        }
        if self.bodies.scratch.is_empty() {
            self.bodies.scratch = vec![0; READ_CHUNK];
        }
        let head_len = conn.head.head_len;
        let link = conn.link();
        loop {
            let (parked, parts) = conn.parked_and_parts();
            let Some(body) = parked else {
                return BodyStep::Dispatch;
            };
            if body.is_complete() {
                // Bytes after it (a pipelined request) may be waiting in the socket.
                parts.maybe_more = true;
                conn.body_read();
                return BodyStep::Dispatch;
            }
            let early = !body.early.is_empty();
            let want = if early {
                body.early.len()
            } else {
                body.wanted(READ_CHUNK)
            };
            let mut area = Area {
                buf: &mut parts.buf,
                filled: &mut parts.filled,
                head_len,
            };
            let room = match body.room(&mut area, &shared.buffers, want) {
                Ok(Room::Bytes(room)) => room,
                Ok(Room::DiskFull { needed }) => return BodyStep::WaitDisk(needed),
                Err(fault) => {
                    return body_failed(&fault, conn, &shared, &mut self.bodies.storage_log)
                }
            };
            let stored = if early {
                body.take_early(&mut area, room)
            } else {
                match link.read(&mut self.bodies.scratch[..room]) {
                    Ok(Some(0)) | Err(_) => return BodyStep::Close,
                    Ok(Some(n)) => {
                        parts.received += n as u64;
                        body.take(&mut area, &self.bodies.scratch[..n])
                    }
                    Ok(None) => {
                        body.release_reserved();
                        parts.maybe_more = false;
                        return BodyStep::Park;
                    }
                }
            };
            body.release_reserved();
            if let Err(fault) = stored {
                return body_failed(&fault, conn, &shared, &mut self.bodies.storage_log);
            }
        }
    }

    /// Remembers a connection whose body waits for `needed` bytes of disk room (once: a
    /// readable event while it waits finds it on the list already).
    pub(super) fn wait_for_disk(&mut self, token: usize, conn: &mut Connection, needed: u64) {
        let Some(body) = conn.parked_body.as_deref_mut() else {
            return;
        };
        let disk = &self.shared.buffers.disk;
        let free = disk.limit().saturating_sub(disk.used());
        self.bodies.free_seen = self.bodies.free_seen.min(free);
        if !body.waiting_for_disk {
            body.waiting_for_disk = true;
            self.bodies.disk_waiters.push((token, needed));
            crate::log::debug(&format!(
                "request body waits for room in buffer_disk_total ({needed} bytes needed, {free} free)"
            ));
        }
    }

    /// Once per loop turn: when bodies wait for disk and the disk account has more room than
    /// when they were last measured (a request completed and its file was closed, on this
    /// thread or an app thread: a returned connection wakes the loop, and it wakes at least
    /// once a second anyway), reads again those whose need the free room covers, in the order
    /// they began to wait; the others keep waiting, no file made. One pass over the waiters
    /// per such turn.
    pub(super) fn retry_disk_waiters(&mut self, driver: &mut dyn Driver) {
        if self.bodies.disk_waiters.is_empty() {
            self.bodies.free_seen = u64::MAX;
            return;
        }
        let disk = &self.shared.buffers.disk;
        let mut free = disk.limit().saturating_sub(disk.used());
        if free <= self.bodies.free_seen {
            return;
        }
        let waiters = std::mem::take(&mut self.bodies.disk_waiters);
        let mut still = Vec::with_capacity(waiters.len());
        for (token, needed) in waiters {
            let waiting = match self.entries.get(token) {
                Some(Entry::Body { conn, .. }) => conn
                    .parked_body
                    .as_ref()
                    .is_some_and(|body| body.waiting_for_disk),
                _ => false,
            };
            if !waiting {
                // Closed (its deadline passed, or the client left) since it began to wait.
                continue;
            }
            if needed > free {
                still.push((token, needed));
                continue;
            }
            free -= needed;
            if let Some(mut conn) = self.take_parked(token) {
                if let Some(body) = conn.parked_body.as_deref_mut() {
                    body.waiting_for_disk = false;
                }
                // Waits again (pushed anew) if another thread took the room meanwhile.
                self.advance(token, conn, driver);
            }
        }
        let disk = &self.shared.buffers.disk;
        self.bodies.free_seen = disk.limit().saturating_sub(disk.used());
        still.append(&mut self.bodies.disk_waiters);
        self.bodies.disk_waiters = still;
    }
}

/// The answer to a body that failed, logging a temporary-file failure and (rate-limited, as
/// [`WorkerShared::log_too_large`] says) a body over a limit, with `conn`'s request line.
fn body_failed(
    fault: &BodyFault,
    conn: &Connection,
    shared: &WorkerShared,
    log: &mut LogLimit,
) -> BodyStep {
    let config = &shared.config;
    let head = conn.head();
    match fault {
        BodyFault::Storage(_) => storage_failed(fault, config, log),
        BodyFault::TooLarge => {
            shared.log_too_large(|| {
                max_body_size_line(
                    head.method.of(&conn.buf),
                    head.target.of(&conn.buf),
                    Oversize::Chunked,
                    config.max_body_size,
                )
            });
            BodyStep::Refuse(413)
        }
        BodyFault::OverDiskBudget => {
            shared.log_too_large(|| {
                format!(
                    "413 for {} {}: its body would not fit in buffer_disk_total ({} bytes) \
                     even alone; raise buffer_disk_total (--buffer-disk-total) or lower \
                     max_body_size ({} bytes)",
                    String::from_utf8_lossy(head.method.of(&conn.buf)),
                    String::from_utf8_lossy(head.target.of(&conn.buf)).escape_debug(),
                    shared.buffers.disk.limit(),
                    config.max_body_size,
                )
            });
            BodyStep::Refuse(413)
        }
        BodyFault::BadChunk(err) => {
            crate::log::debug(&format!("bad chunked request body: {}", err.reason()));
            BodyStep::Refuse(fault.status())
        }
    }
}

/// One error-log line naming the directory and the error (at most one a second, counting
/// those left out: a full disk under a flood of uploads must not flood the log too); 507 for
/// a full disk, else 500. The worker lives on.
fn storage_failed(fault: &BodyFault, config: &WorkerConfig, log: &mut LogLimit) -> BodyStep {
    if let Some(suppressed) = log.admit(Instant::now()) {
        let detail = match fault {
            BodyFault::Storage(err) => err.to_string(),
            _ => String::new(),
        };
        let more = if suppressed > 0 {
            format!("; {suppressed} more such failures in the last second(s) not logged")
        } else {
            String::new()
        };
        crate::log::error(&format!(
            "request body: cannot write a temporary file in request_buffer_dir {}: {detail} (answered {}){more}",
            config.request_buffer_dir.display(),
            fault.status()
        ));
    }
    BodyStep::Refuse(fault.status())
}

/// How often a repeated error line may be written.
const LOG_INTERVAL: Duration = Duration::from_secs(1);

/// Lets a repeated log line through at most once per [`LOG_INTERVAL`], counting the ones held
/// back.
#[derive(Default)]
pub(super) struct LogLimit {
    last: Option<Instant>,
    suppressed: u64,
}

impl LogLimit {
    /// `Some(lines held back since the last one written)` when a line may be written at
    /// `now`; `None` (and one more held back) when not.
    fn admit(&mut self, now: Instant) -> Option<u64> {
        if self
            .last
            .is_some_and(|last| now.saturating_duration_since(last) < LOG_INTERVAL)
        {
            self.suppressed += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.suppressed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A target's path as each of its three readers decodes it: the rate limits' and
    /// compression's normal form, `stream_body_paths`' reading ([`stream_path`]), and the name
    /// static files open under a mount at `/` (hidden names allowed). `None`: refused.
    fn three_readings(target: &[u8]) -> [Option<Vec<u8>>; 3] {
        use crate::static_files::path::{name_under_mount, target_path as static_path, Named};
        let normal = |target: &[u8]| {
            tines_proto::NormalPath::of(target)
                .ok()
                .map(|path| path.bytes().collect::<Vec<u8>>())
        };
        let streamed = stream_path(target).map(|path| path.bytes().collect::<Vec<u8>>());
        let named = static_path(target).and_then(|raw| match name_under_mount(raw, true) {
            Named::Path { relative, slash } => {
                let mut name = b"/".to_vec();
                if !relative.is_empty() {
                    name.extend_from_slice(&relative);
                    if slash {
                        name.push(b'/');
                    }
                }
                Some(name)
            }
            Named::Refused => None,
        });
        [normal(target), streamed, named]
    }

    #[test]
    fn the_three_path_readers_agree_on_a_target_s_decoded_form() {
        let table: [(&str, Option<&str>); 20] = [
            ("/s/a.css", Some("/s/a.css")),
            ("/s/a.css?v=1", Some("/s/a.css")),
            ("/s/a%20b.css?x=%2F&y=%zz", Some("/s/a b.css")),
            ("/s/%61.css", Some("/s/a.css")),
            ("/s/caf%C3%A9", Some("/s/caf\u{e9}")),
            ("/s/%2561", Some("/s/%61")),
            ("/s/a%3Fb?c", Some("/s/a?b")),
            ("/s/dir/", Some("/s/dir/")),
            ("/s/a#frag", Some("/s/a")),
            ("/.well-known/x", Some("/.well-known/x")),
            ("http://example.com/s/a.css?v=1", Some("/s/a.css")),
            ("HTTPS://example.com:8443/s/%61", Some("/s/a")),
            ("http://example.com", Some("/")),
            ("http://example.com?x=/s/a", Some("/")),
            ("http://[::1]:80/s/a#x", Some("/s/a")),
            ("/s/a%2Fb", None),
            ("/s/a%00", None),
            ("/s/%zz", None),
            ("/s/../etc", None),
            ("/s/%2e%2e/etc", None),
        ];
        for (target, decoded) in table {
            let want = decoded.map(|decoded| decoded.as_bytes().to_vec());
            assert_eq!(
                three_readings(target.as_bytes()),
                [want.clone(), want.clone(), want],
                "{target}"
            );
        }
    }

    /// Static files refuse more than a prefix match does (a name must be plain): the same
    /// reading, refused.
    #[test]
    fn static_files_refuse_what_the_normal_form_reads() {
        for (target, normal) in [
            ("//s/a", "/s/a"),
            ("/s//a", "/s/a"),
            ("/s/a%01", "/s/a\u{1}"),
            ("/s/a%7F", "/s/a\u{7f}"),
            ("/s/a%5Cb", "/s/a\\b"),
        ] {
            let want = Some(normal.as_bytes().to_vec());
            assert_eq!(
                three_readings(target.as_bytes()),
                [want.clone(), want, None],
                "{target}"
            );
        }
        let [normal, streamed, named] = three_readings(b"/s/%C3");
        assert_eq!(
            (normal, streamed, named),
            (Some(b"/s/\xc3".to_vec()), Some(b"/s/\xc3".to_vec()), None)
        );
        assert_eq!(three_readings(b"*"), [None, None, None]);
    }

    #[test]
    fn a_repeated_error_line_is_written_at_most_once_a_second_with_the_count_left_out() {
        let mut limit = LogLimit::default();
        let start = Instant::now();
        assert_eq!(limit.admit(start), Some(0));
        assert_eq!(limit.admit(start + Duration::from_millis(10)), None);
        assert_eq!(limit.admit(start + Duration::from_millis(999)), None);
        assert_eq!(limit.admit(start + Duration::from_millis(1000)), Some(2));
        assert_eq!(limit.admit(start + Duration::from_millis(1500)), None);
        assert_eq!(limit.admit(start + Duration::from_millis(3000)), Some(1));
        assert_eq!(limit.admit(start + Duration::from_millis(5000)), Some(0));
    }

    #[test]
    fn only_targets_under_a_stream_body_path_stream() {
        let config = WorkerConfig {
            stream_body_paths: vec![b"/upload/".to_vec()],
            ..WorkerConfig::default()
        };
        assert!(streams_body(b"/upload/x?y", &config));
        assert!(!streams_body(b"/uploads", &config));
        assert!(!streams_body(b"/other?/upload/", &config));
        assert!(!streams_body(b"/upload/x", &WorkerConfig::default()));
    }

    /// `stream_body_paths` reads a target as the rate limits and compression's excluded paths
    /// do: every spelling of `/upload` streams; a target with no single reading is buffered.
    #[test]
    fn every_spelling_of_a_stream_body_path_streams() {
        let config = WorkerConfig {
            stream_body_paths: vec![b"/upload".to_vec()],
            ..WorkerConfig::default()
        };
        for target in [
            "/upload",
            "/uploads/x",
            "/%75pload",
            "//upload",
            "/upload#frag",
            "http://example.com/upload?x=1",
            "HTTPS://example.com:8443//%75pload/a",
        ] {
            assert!(streams_body(target.as_bytes(), &config), "{target}");
        }
        for target in [
            "/up",
            "/other/upload",
            "/x?/upload",
            "/up%6Coad%2Fx",
            "/upload/../x",
            "/%zz/upload",
            "*",
            "ftp://example.com/upload",
            "http://example.com?/upload",
        ] {
            assert!(!streams_body(target.as_bytes(), &config), "{target}");
        }
    }
}
