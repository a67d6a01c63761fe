//! How response bytes reach the socket, on every MPM (ADR 0009): the slot writes what the
//! socket takes without waiting and hands the rest to the poller through the connection's
//! pending output ([`crate::pending`]). A complete body (a WSGI list) goes to the worker's
//! response store: memory up to `response_buffer_total`, then a spill file up to
//! `buffer_disk_total`. A WSGI body the app is still producing may leave up to
//! `max_response_buffer` in memory and, once its client proved slow ([`stream_grace`]), the
//! rest of `max_stream_buffer` in a spill file (ADR 0024); an ASGI one, `max_response_buffer`
//! in memory. A file body is queued as a range of a duplicate of its fd. Only when that does
//! not fit does the slot wait for the client (`send_timeout` per wait).
//!
//! It writes what it is given, framed already; it must not decide the framing or the status.

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tines_proto::response::{encode_chunk_size, ResponseFraming, CHUNK_END};

use super::{Exchange, Phase};
use crate::pending::{writable_by, HandOver, Output, Store};
use crate::transport::Link;

impl Exchange {
    /// Sends `parts` in order: what the socket takes now, and the rest is handed to the
    /// poller when the response store has room for it; else the slot waits for the client
    /// (backpressure, `send_timeout` per wait).
    ///
    /// The time it takes is the client's, not the app's (`request_timeout`); its return is
    /// a progress point, and its end time after the last write is the request's "last byte
    /// handed to the socket" (or to the poller). `last`: nothing of the response follows
    /// these bytes (`finish`).
    pub(super) fn emit(&mut self, parts: &[&[u8]], last: bool) -> io::Result<()> {
        self.claim_response()?;
        if last {
            self.count_request();
        }
        self.begin_client_wait();
        let result = self.emit_parts(parts, last);
        let total = parts.iter().map(|part| part.len() as u64).sum();
        let chunked = self.framing == ResponseFraming::Chunked;
        self.wire.emitted(parts, total, chunked, self.handed_over);
        self.end_client_wait(if result.is_ok() { total } else { 0 });
        result
    }

    fn emit_parts(&mut self, parts: &[&[u8]], last: bool) -> io::Result<()> {
        let link = self.parts.link;
        let total: usize = parts.iter().map(|part| part.len()).sum();
        let mut written = 0;
        // A slot that writes in batches leaves the end of a response (at most the output
        // buffer: the whole of a small one) queued for the end of its batch (ADR 0011);
        // not while body bytes are still to come from the client, which may wait for this
        // response before it sends them (a `stream_body_paths` route).
        let batched = self.ctx.batch_responses && last && !self.body_in_socket();
        // The common case: nothing is pending (no lock taken), and the socket takes it all in
        // one `sendmsg`, straight from the caller's memory (on TLS: sealed into records and
        // sent in one write, under the session's lock).
        if !batched && self.parts.output().is_empty() {
            while written < total {
                match link.write_vectored(parts, written) {
                    Ok(Some(n)) => written += n,
                    Ok(None) => break,
                    Err(err) => return Err(err),
                }
            }
            if written == total && !link.wants_write() {
                return Ok(());
            }
        }
        // What is queued here is written after the exchange unless the slot's batch writes it.
        self.handed_over |= !batched;
        if !batched {
            // Left for the poller to write: it must watch the socket (a batch's leftovers
            // are watched when the batch is written).
            self.parts.watch()?;
        }
        let result = self.hand_over(link, parts, written);
        if result.is_err() {
            // The client is gone or stopped reading past the send timeout: nothing queued
            // will be sent (the connection closes); its memory and files are given back.
            self.parts.output().discard();
        }
        result
    }

    /// Where bytes the socket does not take may wait.
    fn store(&self) -> Store {
        let config = &self.shared.config;
        if self.complete_body {
            Store::Complete
        } else if self.ctx.never_wait {
            // An ASGI body: at most `max_response_buffer` waits in memory, then the app's
            // `send` waits on its own loop (ADR 0014).
            Store::Streamed(config.max_response_buffer)
        } else {
            // A WSGI stream: pulled from the app into memory and a spill file up to
            // `max_stream_buffer` while its client reads slower, so that a slow reader of a
            // finite stream holds no slot (ADR 0024).
            Store::Spooled {
                memory: config.max_response_buffer,
                cap: config.max_stream_buffer,
                spill: false,
            }
        }
    }

    /// Finishes the response when that only queues its last bytes for the slot's batch
    /// (ADR 0011), with no write and no wait, so that the caller may keep the GIL (releasing
    /// and taking it back cost about 1,000 of a hello-world request's 17,600 instructions).
    /// `false`, with nothing done that [`Exchange::finish`] would not do again, otherwise: a
    /// chunked body, a slot that does not batch, a request body still in the socket,
    /// output already pending, or no room in the store.
    pub fn try_finish_queued(&mut self) -> bool {
        if !self.ctx.batch_responses
            || self.framing == ResponseFraming::Chunked
            || self.compressing.is_some()
            || !matches!(self.phase, Phase::Buffered | Phase::Committed)
            || self.body_in_socket()
            || self.claim_response().is_err()
        {
            return false;
        }
        let store = self.store();
        let output = self.parts.output();
        if !output.try_queue(&self.shared.buffers, &[&self.ctx.out], store) {
            return false;
        }
        // Queued: the slot's batch writes it later.
        self.count_request();
        // What `finish` decides for a body that is not chunked.
        if let Some(declared) = self.declared {
            if self.body_sent < declared && !self.discards_body() {
                self.keep_alive = false;
            }
        }
        if self.framing == ResponseFraming::CloseDelimited {
            self.keep_alive = false;
        }
        let total = self.ctx.out.len() as u64;
        // Handed to the poller without a wait: a progress point dated by the thread's last
        // clock reading (the app's return, microseconds ago), not a reading of its own.
        self.queued_for_poller(total);
        self.ctx.out.clear();
        self.phase = Phase::Finished;
        true
    }

    /// Queues `parts` from byte `written` on after what is pending, in the response store
    /// when it has room; else waits for the client.
    fn hand_over(&mut self, link: Link, parts: &[&[u8]], written: usize) -> io::Result<()> {
        let timeout = self.shared.config.send_timeout;
        let mut store = self.store();
        let output = Arc::clone(self.parts.output());
        let mut handed = output.hand_over(&self.shared.buffers, parts, written, store)?;
        if let (
            HandOver::Full(written),
            Store::Spooled {
                memory,
                cap,
                spill: false,
            },
        ) = (&handed, store)
        {
            // A stream whose share of memory is full (ADR 0024): a client that keeps pace is
            // written to straight from the app's bytes, as before; one that does not is slow,
            // and the rest of the stream may go on into a spill file.
            let Some(written) = keep_pace(&output, link, parts, *written, timeout)? else {
                return Ok(());
            };
            store = Store::Spooled {
                memory,
                cap,
                spill: true,
            };
            handed = output.hand_over(&self.shared.buffers, parts, written, store)?;
        }
        if let HandOver::Full(written) = handed {
            if self.ctx.never_wait {
                // Over the budget, uncharged: the app's `send` waits for it on its own loop
                // (ADR 0014), so at most one message per connection is queued this way.
                output.with(|pending| pending.push(parts, written));
                return Ok(());
            }
            // The store is full: the slot waits for the client, first for what is queued,
            // then for these bytes, written straight from the caller's memory.
            output.write_all(timeout)?;
            link.write_all_from(parts, written, timeout)?;
        }
        Ok(())
    }

    /// Response bytes queued for the poller and not yet written.
    pub fn unsent(&mut self) -> u64 {
        if self.parts.output().is_empty() {
            return 0;
        }
        self.parts.output().with(|pending| pending.unsent())
    }

    /// Bytes of this connection's output written to the socket so far: a `send` that waits
    /// for the client made progress when this grew.
    pub fn written_out(&mut self) -> u64 {
        self.parts.output().written()
    }

    /// Writes what the socket takes now of the output queued for the poller (a deadline's
    /// last look: the client may have read while the loop was not looking, ADR 0022). An
    /// error is left for the poller's event to report.
    pub fn write_pending(&mut self) {
        let _ = self.parts.output().write_some();
    }

    /// The client read nothing for `send_timeout` while the app waited (ASGI): the response is
    /// cut, what is queued for it dropped (its memory and disk given back), and the connection
    /// closes when the exchange ends.
    pub fn abandon(&mut self) {
        self.abort();
        self.parts.output().discard();
    }

    /// Runs `action` once the output queued now is written (with 0) or dropped (with the
    /// bytes never written); at once when nothing is queued. It runs on whichever thread
    /// writes the last byte (the loop's, usually), under the output's lock: it must only
    /// note the fact.
    pub fn when_written(&mut self, action: crate::pending::WhenWritten) {
        self.parts
            .output()
            .with(|pending| pending.when_written(action));
    }

    /// Sends `count` bytes of an open file from `offset` with sendfile (the body must have
    /// been announced with a length): the head and what the socket takes now; the rest is
    /// queued for the poller from a duplicate of the fd, so the app's file object can be
    /// closed at once. Reports the whole range as sent (a file found shorter later closes the
    /// connection).
    pub fn send_file(&mut self, file_fd: RawFd, offset: u64, count: u64) -> io::Result<u64> {
        if self.phase == Phase::NotStarted || self.phase == Phase::Finished {
            return Err(io::Error::other(
                "send_file before begin_response or after finish",
            ));
        }
        if self.discards_body() {
            return Ok(0);
        }
        if self.compressing.is_some() {
            return self.send_file_compressed(file_fd, offset, count);
        }
        let count = match self.declared {
            Some(declared) => count.min(declared.saturating_sub(self.body_sent)),
            None => count,
        };
        let chunked = self.framing == ResponseFraming::Chunked;
        if chunked && count > 0 {
            encode_chunk_size(&mut self.ctx.out, count as usize);
        }
        // The head goes through `emit`, which counts it.
        let out = std::mem::take(&mut self.ctx.out);
        let emitted = self.emit(&[&out], false);
        self.ctx.out = out;
        self.ctx.out.clear();
        self.begin_client_wait();
        let (sent, result) = match emitted {
            Ok(()) => self.send_file_range(file_fd, offset, count),
            Err(err) => (0, Err(err)),
        };
        // The rest of the range, if any, is queued for the poller.
        self.handed_over |= !self.parts.output().is_empty();
        self.wire.file_bytes(sent, chunked, self.handed_over);
        if result.is_err() {
            self.parts.output().discard();
        }
        self.end_client_wait(sent);
        self.phase = Phase::Committed;
        // What reached the socket counts, whether or not the client took the rest.
        self.body_sent += sent;
        result.inspect_err(|_| self.keep_alive = false)?;
        if chunked && count > 0 {
            if sent < count {
                self.keep_alive = false;
            } else {
                self.ctx.out.extend_from_slice(CHUNK_END);
            }
        }
        Ok(sent)
    }

    /// The bytes of the range sent or queued, and whether it all went (an error after some
    /// bytes were written still reports them).
    fn send_file_range(
        &mut self,
        file_fd: RawFd,
        offset: u64,
        count: u64,
    ) -> (u64, io::Result<()>) {
        let link = self.parts.link;
        let output = Arc::clone(self.parts.output());
        let mut sent = 0u64;
        // Nothing pending (no lock taken): what the socket takes now (on TLS: read, sealed
        // and sent in blocks of 64 KiB, as long as the socket takes them).
        if output.is_empty() {
            while sent < count {
                match link.send_file(file_fd, offset + sent, count - sent) {
                    Err(err) => return (sent, Err(err)),
                    Ok(Some(0)) => return (sent, Ok(())),
                    Ok(Some(n)) => sent += n,
                    Ok(None) => break,
                }
            }
            if sent == count && !link.wants_write() {
                return (count, Ok(()));
            }
        }
        if sent < count || link.wants_write() {
            // The rest is left for the poller to write: it must watch the socket.
            if let Err(err) = self.parts.watch() {
                return (sent, Err(err));
            }
        }
        let queued = output.with(|pending| -> io::Result<u64> {
            if sent < count {
                // SAFETY: file_fd is a valid open fd for the duration of this call (the app's
                // file object holds it); F_DUPFD_CLOEXEC makes a new fd we own.
                let dup = unsafe { libc::fcntl(file_fd, libc::F_DUPFD_CLOEXEC, 0) };
                if dup < 0 {
                    return Err(io::Error::last_os_error());
                }
                // SAFETY: fcntl returned a fresh fd that nobody else owns.
                let owned =
                    unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(dup) };
                pending.push_file(owned, offset + sent, count - sent);
            }
            Ok(count)
        });
        match queued {
            Ok(count) => (count, Ok(())),
            Err(err) => (sent, Err(err)),
        }
    }
}

/// The least time a stream's slot waits for its client, once the stream's share of memory is
/// full, before it calls the client slow and spills (ADR 0024): what a small block needs.
const STREAM_GRACE: Duration = Duration::from_millis(50);

/// The rate (bytes per second) a client must keep up within the grace not to be called slow.
/// Below it, its bytes go through a spill file; above it, they go out straight from the app's
/// memory, at no cost of a copy.
const KEEP_PACE_RATE: u64 = 20 << 20;

/// The longest a slot waits for a client before it calls it slow, whatever the block: the
/// wait holds the slot, and a slow reader costs it once per stream.
const STREAM_GRACE_MAX: Duration = Duration::from_secs(1);

/// How long a stream's slot waits for its client to take `at_stake` bytes (what is queued, up
/// to `max_response_buffer`, and the new block) before it calls it slow (ADR 0024): the least
/// grace plus the time those bytes take at [`KEEP_PACE_RATE`], so that the rate a client must
/// keep does not grow with the block (a fixed 50 ms asked 190 MB/s of the reader of an 8 MiB
/// block); at most [`STREAM_GRACE_MAX`] and never beyond `send_timeout`. A reader that keeps
/// pace is written to straight from the app's bytes, with no copy into a file; a trickle of
/// reads does not keep the slot, since the grace is not renewed by progress.
fn stream_grace(at_stake: u64, send_timeout: Duration) -> Duration {
    let micros = at_stake.saturating_mul(1_000_000) / KEEP_PACE_RATE;
    (STREAM_GRACE + Duration::from_micros(micros))
        .min(STREAM_GRACE_MAX)
        .min(send_timeout)
}

/// Waits up to [`stream_grace`] for the client to take what `output` holds and then `parts`
/// from byte `written` on, straight from the caller's memory. `None` when all was written;
/// else where the client stopped keeping pace (the rest is the store's).
fn keep_pace(
    output: &Output,
    link: Link,
    parts: &[&[u8]],
    mut written: usize,
    send_timeout: Duration,
) -> io::Result<Option<usize>> {
    let total: usize = parts.iter().map(|part| part.len()).sum();
    let at_stake = output.with(|pending| pending.unsent()) + (total - written) as u64;
    let deadline = Instant::now() + stream_grace(at_stake, send_timeout);
    if !output.write_all_until(deadline)? {
        return Ok(Some(written));
    }
    loop {
        while written < total {
            match link.write_vectored(parts, written)? {
                Some(n) => written += n,
                None => break,
            }
        }
        if written == total {
            // All sealed: records the socket did not take are the loop's to finish.
            if link.wants_write() {
                output.note_backlog();
            }
            return Ok(None);
        }
        if !writable_by(link, deadline)? {
            return Ok(Some(written));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::{Connection, Readiness};
    use crate::listener::{Local, Peer};
    use crate::pending::Progress;
    use crate::scoreboard::Scoreboard;
    use crate::shared::WorkerShared;
    use crate::tls::conn::tests::{connected, set_buffer, Client};
    use crate::transport::Transport;
    use crate::{App, WorkerConfig};
    use std::os::fd::AsRawFd;

    /// Answers `GET /file` with a file's bytes (`send_file`), anything else with `body`.
    struct Answer {
        body: Vec<u8>,
        file: std::fs::File,
        file_len: u64,
    }

    impl App for Answer {
        fn serve(&self, mut exchange: Box<Exchange>) -> Box<Exchange> {
            let file = exchange.target() == b"/file";
            let length = if file {
                self.file_len
            } else {
                self.body.len() as u64
            };
            exchange
                .begin_response(b"200 OK", [(&b"X-A"[..], &b"b"[..])], Some(length))
                .unwrap();
            if file {
                let sent = exchange
                    .send_file(self.file.as_raw_fd(), 0, self.file_len)
                    .unwrap();
                assert_eq!(sent, self.file_len);
            } else {
                exchange.write_body(&self.body).unwrap();
            }
            exchange.finish().unwrap();
            exchange
        }
    }

    /// A TLS connection served by `app` for the request `target`, as a slot serves it: the
    /// connection as the slot hands it back, and the client.
    fn serve_over_tls(app: &Answer, target: &str, small_socket: bool) -> (Box<Connection>, Client) {
        let (tls, mut client) = connected();
        if small_socket {
            set_buffer(tls.fd(), libc::SO_SNDBUF, 4096);
        }
        let shared = Arc::new(WorkerShared::new(
            WorkerConfig::default(),
            vec![Local::Unix(String::new())],
            None,
            Arc::new(Scoreboard::new(1, 1).unwrap()),
            0,
            u64::MAX,
            None,
        ));
        let limits = shared.config.limits;
        let mut conn = Connection::new(Transport::Tls(tls), Peer::Unix, 0);
        client.send(format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        assert!(matches!(conn.on_readable(&limits), Readiness::HeadComplete));
        let ctx = Box::new(crate::exchange::SlotContext::new());
        let (kept, _) = crate::slot::serve_connection(conn, ctx, app, &shared, None);
        (kept.expect("kept alive"), client)
    }

    fn answer(body_len: usize, file_len: usize) -> Answer {
        let path = std::env::temp_dir().join(format!(
            "tines-send-tls-{}-{body_len}-{file_len}",
            std::process::id()
        ));
        let data: Vec<u8> = (0..file_len).map(|i| (i % 239) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        Answer {
            body: (0..body_len).map(|i| (i % 233) as u8).collect(),
            file,
            file_len: file_len as u64,
        }
    }

    /// The loop's part: writes the connection's output as the client reads.
    fn finish_output(conn: &mut Connection, client: &mut Client) {
        while conn.output().write_some().unwrap() == Progress::Blocked {
            assert!(conn.has_pending_output());
            assert!(client.pull());
        }
        assert!(!conn.has_pending_output());
        assert!(!conn.link().wants_write());
    }

    fn body_of(got: &[u8]) -> &[u8] {
        let end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        &got[end..]
    }

    #[test]
    fn over_tls_a_small_response_is_written_whole_by_the_slot() {
        let app = answer(13, 0);
        let (conn, mut client) = serve_over_tls(&app, "/", false);
        assert!(!conn.has_pending_output(), "nothing left for the loop");
        client.pull();
        assert!(client.got.starts_with(b"HTTP/1.1 200 OK\r\n"));
        assert_eq!(body_of(&client.got), &app.body[..]);
    }

    #[test]
    fn over_tls_what_the_socket_did_not_take_is_the_loops_until_the_backlog_is_out() {
        let app = answer(1_000_000, 0);
        let (mut conn, mut client) = serve_over_tls(&app, "/", true);
        assert!(conn.has_pending_output(), "handed to the loop");
        finish_output(&mut conn, &mut client);
        while client.pull() {}
        assert!(body_of(&client.got) == &app.body[..], "whole, in order");
    }

    #[test]
    fn over_tls_a_response_sealed_whole_but_not_sent_whole_is_still_the_loops() {
        // One write seals it all (under 64 KiB); the small socket takes a part.
        let app = answer(60_000, 0);
        let (mut conn, mut client) = serve_over_tls(&app, "/", true);
        assert!(conn.link().wants_write());
        assert!(conn.has_pending_output(), "its records wait in the session");
        finish_output(&mut conn, &mut client);
        while client.pull() {}
        assert!(body_of(&client.got) == &app.body[..]);
    }

    #[test]
    fn over_tls_a_file_is_read_and_sealed_by_the_slot_then_by_the_loop() {
        // Sealed whole by the slot (one block) but not sent whole; and a range queued.
        for size in [60_000, 700_000] {
            let app = answer(0, size);
            let (mut conn, mut client) = serve_over_tls(&app, "/file", true);
            assert!(conn.has_pending_output(), "{size}: the loop's to finish");
            finish_output(&mut conn, &mut client);
            while client.pull() {}
            let expected: Vec<u8> = (0..size).map(|i| (i % 239) as u8).collect();
            assert!(body_of(&client.got) == &expected[..], "{size}");
        }
    }

    #[test]
    fn a_streams_grace_asks_the_same_rate_of_its_reader_whatever_the_block_up_to_a_second() {
        let long = Duration::from_secs(60);
        assert_eq!(stream_grace(0, long), STREAM_GRACE);
        // The default share of memory and a 64 KiB block: about 103 ms.
        let small = stream_grace((1 << 20) + (64 << 10), long);
        assert_eq!(small, Duration::from_micros(50_000 + 53_125));
        // The share and an 8 MiB block: 450 ms more, so a 1 GbE reader keeps pace.
        let large = stream_grace(9 << 20, long);
        assert_eq!(large, Duration::from_millis(500));
        // The rate asked of the reader (bytes over the grace beyond the least) is the same.
        for at_stake in [1u64 << 20, (1 << 20) + (64 << 10), 9 << 20, 18 << 20] {
            let beyond = stream_grace(at_stake, long) - STREAM_GRACE;
            assert_eq!(
                at_stake * 1_000_000 / beyond.as_micros() as u64,
                KEEP_PACE_RATE
            );
        }
        // Capped, and never beyond the send timeout, however many bytes.
        assert_eq!(stream_grace(64 << 20, long), STREAM_GRACE_MAX);
        assert_eq!(stream_grace(u64::MAX, long), STREAM_GRACE_MAX);
        let short = Duration::from_millis(30);
        assert_eq!(stream_grace(9 << 20, short), short);
        assert_eq!(stream_grace(0, short), short);
    }
}
