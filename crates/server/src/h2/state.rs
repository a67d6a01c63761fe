//! One connection's state behind its lock (BRIEF decision 4): the `h2` connection, the
//! streams it accepted as we see them (their request bytes, their response's transcoder and
//! the DATA waiting for window), and the drive that polls `h2` until nothing moves.
//!
//! Whoever holds the lock drives: the loop in `advance` (reading and writing the socket), a
//! slot's thread after its write or read (writing only: the loop reads), a blocking call
//! under `inline` (both). It must not block, nor wake anyone itself (the caller, in
//! `super::Shared`, notifies waiting threads and writes the loop's waker).
//!
//! Over 600 lines: the stream's state and the connection's drive share private fields the
//! drive's steps mutate together under the one lock; the per-stream step lives in `pump`,
//! the rest is to be split with the drive's rework (issue 38's review, role A2).

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use h2::server::{Connection, Handshake, SendResponse};
use h2::{Reason, RecvStream, SendStream};
use http::{Request, Response, StatusCode};

use super::io::{send_out, Flag, Io, Report};
use super::synth::{synthesize, Refused};
use super::transcode::{Out, Transcoder};
use super::wire::WireLink;
use super::Readiness;
use pump::{apply, pump_stream};

mod pump;

/// Rounds of one drive before it leaves the rest to the next (a peer that keeps `h2` busy
/// forever cannot hold the lock forever).
const MAX_ROUNDS: usize = 64;

/// Where the `h2` connection is.
enum Phase {
    /// The server's SETTINGS go out, the client's preface comes in.
    Handshaking(Pin<Box<Handshake<Io, Bytes>>>),
    /// Boxed as the handshake is: one allocation per connection, not 1.5 KiB moved.
    Open(Box<Connection<Io, Bytes>>),
    /// Over (closed, failed, or a bad preface answered).
    Closed,
}

/// Bytes of a stream's synthesized request; `flow`: DATA payload, whose window reopens as it
/// is read.
struct Segment {
    bytes: Bytes,
    flow: bool,
}

/// One stream as the server sees it.
pub(crate) struct StreamState {
    pub(crate) token: Option<u64>,
    recv: Option<RecvStream>,
    /// Every request byte is in `inbound` (END_STREAM came).
    recv_done: bool,
    chunked: bool,
    inbound: VecDeque<Segment>,
    /// The stream was reset (by the client, by us, or the connection ended).
    pub(crate) reset: bool,
    /// `shutdown`: the stuck thread's reads and writes fail.
    shut: bool,
    respond: Option<SendResponse<Bytes>>,
    send: Option<SendStream<Bytes>>,
    transcoder: Transcoder,
    /// Response DATA waiting for window.
    out: VecDeque<Bytes>,
    pub(crate) out_len: usize,
    trailers: Option<http::HeaderMap>,
    /// The response is complete as written: END_STREAM once `out` is sent.
    out_end: bool,
    /// END_STREAM (or the trailers) handed to `h2`.
    complete: bool,
    /// A write found no room (or a flush found bytes left): tell when room comes.
    want_writable: bool,
    /// The last flush found bytes left (and no write came since): a write wait is for all of
    /// them to be handed to `h2`, not for room (which a flush's caller does not want).
    pub(crate) flush_waiting: bool,
    pending: Readiness,
    /// A thread blocks on this stream (the condvar wakes it; the loop is not told).
    pub(crate) waiting: bool,
    budget: usize,
    /// The `H2Stream` is gone; what is left of a complete response still goes.
    detached: bool,
    /// A detached stream is reset when its bytes have not moved by then (`send_timeout`,
    /// renewed as they move: nobody else times a client that stopped reading them).
    pub(crate) detached_until: Option<Instant>,
    /// A byte of the request was read: a reset now ends its reads as an end would.
    started: bool,
}

impl StreamState {
    /// A read would not block.
    pub(crate) fn readable(&self) -> bool {
        !self.inbound.is_empty() || self.recv_done || self.reset || self.shut
    }

    /// Response bytes wait to be handed to `h2`.
    pub(crate) fn wants_write(&self) -> bool {
        self.out_len > 0 || (self.out_end && !self.complete)
    }

    /// A write would take bytes.
    pub(crate) fn has_room(&self) -> bool {
        self.out_len < self.budget
    }

    /// What a write wait waits for: every byte handed to `h2` after a flush that left some,
    /// else room for a write.
    pub(crate) fn write_ready(&self) -> bool {
        if self.flush_waiting {
            !self.wants_write()
        } else {
            self.has_room()
        }
    }

    /// A flush found bytes left: tell when they are all handed to `h2`.
    pub(crate) fn want_writable(&mut self) {
        self.want_writable = true;
        self.flush_waiting = true;
    }

    /// Broken: reads end and writes fail.
    pub(crate) fn broken(&self) -> bool {
        self.reset || self.shut
    }

    fn event(&mut self, readable: bool, writable: bool) {
        self.pending.readable |= readable;
        self.pending.writable |= writable;
    }

    /// Resets the stream (`reason`) unless its response went out complete.
    fn reset_with(&mut self, reason: Reason) {
        if !self.complete {
            if let Some(send) = self.send.as_mut() {
                send.send_reset(reason);
            } else if let Some(respond) = self.respond.as_mut() {
                respond.send_reset(reason);
            }
        }
        self.reset = true;
        self.out.clear();
        self.out_len = 0;
        self.event(true, true);
    }
}

/// Everything one connection's streams and the loop share, behind its lock.
pub(crate) struct State {
    phase: Phase,
    pub(crate) streams: HashMap<u32, StreamState>,
    /// Streams accepted and not yet handed to the loop.
    pub(crate) opened: Vec<u32>,
    pub(crate) report: Arc<Report>,
    waker: Waker,
    graceful: bool,
    graceful_sent: bool,
    /// The idle close: GOAWAY NO_ERROR with the last stream id processed, then the end.
    idle_close: bool,
    idle_close_sent: bool,
    calm_sent: bool,
    /// The connection is over and its input drained: the loop drops it.
    pub(crate) finished: bool,
    /// Response bytes a stream may hold before its writes would block.
    budget: usize,
    /// How long a detached stream's bytes may wait for the client's window.
    send_timeout: Duration,
    /// A stream detached with bytes held since the last advance: the loop must learn its
    /// deadline.
    pub(crate) detached_news: bool,
    link: WireLink,
    scratch: Vec<Out>,
    /// Declared last: dropped after `h2` and the streams' handles, which hold wakers that
    /// point at it without counting ([`Flag::waker`]).
    flag: Arc<Flag>,
}

impl State {
    /// The state of a connection whose handshake `h2` has begun on `link`.
    pub(crate) fn new(
        handshake: Handshake<Io, Bytes>,
        report: Arc<Report>,
        budget: usize,
        send_timeout: Duration,
        link: WireLink,
    ) -> State {
        let flag = Arc::new(Flag::default());
        State {
            phase: Phase::Handshaking(Box::pin(handshake)),
            streams: HashMap::new(),
            opened: Vec::new(),
            report,
            // SAFETY: the flag is the state's last field, so it outlives every waker `h2`
            // keeps (in the connection and the streams' handles, all inside the state).
            waker: unsafe { flag.waker() },
            flag,
            graceful: false,
            graceful_sent: false,
            idle_close: false,
            idle_close_sent: false,
            calm_sent: false,
            finished: false,
            budget: budget.max(1),
            send_timeout,
            detached_news: false,
            link,
            scratch: Vec::new(),
        }
    }

    /// The loop dropped the connection: `h2` goes (its streams see the end), the socket is
    /// shut both ways (it closes when the last stream's transport does), and every stream
    /// whose response was not handed over complete is broken.
    pub(crate) fn abandon(&mut self) {
        if !self.finished {
            self.phase = Phase::Closed;
            self.link.shutdown();
            self.finished = true;
        }
        for stream in self.streams.values_mut() {
            stream.reset |= !stream.complete;
        }
    }

    /// Asks for the two-step GOAWAY at the next drive.
    pub(crate) fn close_gracefully(&mut self) {
        self.graceful = true;
    }

    /// Asks for the idle close at the next drive (no stream is open: one GOAWAY with the last
    /// stream id processed, then the connection ends).
    pub(crate) fn close_idle(&mut self) {
        self.idle_close = true;
    }

    /// True when the graceful close was asked for and its first GOAWAY is not sent yet.
    pub(crate) fn graceful_owed(&self) -> bool {
        self.graceful && !self.graceful_sent
    }

    /// True when a stream's reads must fail: reset before its first byte was read (no
    /// request to serve).
    pub(crate) fn reset_unread(&mut self, id: u32) -> bool {
        let stream = self.stream(id);
        stream.reset && !stream.started
    }

    /// True when a stream's `h2` handles asked to be polled (a write, a released window).
    pub(crate) fn woken(&self) -> bool {
        self.flag.is_up()
    }

    /// Polls `h2` and the streams until nothing moves (`reads`: the socket may be read).
    pub(crate) fn drive(&mut self, reads: bool) {
        self.report.reads.store(reads, Ordering::Relaxed);
        self.report.drained.store(false, Ordering::Relaxed);
        self.report.write_blocked.store(false, Ordering::Relaxed);
        let waker = self.waker.clone();
        let mut cx = Context::from_waker(&waker);
        for _ in 0..MAX_ROUNDS {
            self.flag.take();
            self.poll_connection(&mut cx);
            self.pump(&mut cx);
            if !self.flag.take() {
                break;
            }
        }
        // One write for everything this drive produced.
        let sent = match send_out(self.link, &self.report) {
            Ok(sent) => sent,
            Err(_) => {
                // `h2` learns the failure at its next write or flush: the connection ends.
                self.poll_connection(&mut cx);
                true
            }
        };
        if matches!(self.phase, Phase::Closed) && !self.finished && reads && sent {
            self.drain();
            // FIN now (our close_notify first on TLS): the socket itself closes when the
            // last stream's transport is dropped, which a slot may still hold.
            self.link.shutdown_write();
            self.finished = true;
            for stream in self.streams.values_mut() {
                // A response handed to `h2` complete went out with the connection's last
                // flush: only the others are broken.
                stream.reset |= !stream.complete;
                stream.event(true, true);
            }
        }
    }

    fn poll_connection(&mut self, cx: &mut Context<'_>) {
        loop {
            let calm = self.report.calm.load(Ordering::Relaxed);
            let accepted = match &mut self.phase {
                Phase::Handshaking(handshake) => {
                    if calm {
                        self.goaway(Reason::ENHANCE_YOUR_CALM);
                        self.phase = Phase::Closed;
                        return;
                    }
                    match handshake.as_mut().poll(cx) {
                        Poll::Ready(Ok(connection)) => {
                            self.phase = Phase::Open(Box::new(connection));
                            continue;
                        }
                        Poll::Ready(Err(_)) => {
                            // A bad preface (h2 wrote nothing: no connection yet): our
                            // GOAWAY, then the close reads what came first (no RST).
                            if !self.report.eof.load(Ordering::Relaxed) {
                                self.goaway(Reason::PROTOCOL_ERROR);
                            }
                            self.phase = Phase::Closed;
                            return;
                        }
                        // A flood met in the preface's read: answered above.
                        Poll::Pending if self.report.calm.load(Ordering::Relaxed) => continue,
                        Poll::Pending => return,
                    }
                }
                Phase::Open(connection) => {
                    if self.graceful && !self.graceful_sent {
                        self.graceful_sent = true;
                        connection.graceful_shutdown();
                    }
                    if self.idle_close && !self.idle_close_sent {
                        self.idle_close_sent = true;
                        connection.abrupt_shutdown(Reason::NO_ERROR);
                    }
                    if calm && !self.calm_sent {
                        self.calm_sent = true;
                        connection.abrupt_shutdown(Reason::ENHANCE_YOUR_CALM);
                    }
                    match connection.poll_accept(cx) {
                        Poll::Ready(Some(Ok(accepted))) => accepted,
                        Poll::Ready(Some(Err(_)) | None) => {
                            self.phase = Phase::Closed;
                            return;
                        }
                        // A flood the read just met: abrupt_shutdown, then poll again.
                        Poll::Pending
                            if !self.calm_sent && self.report.calm.load(Ordering::Relaxed) =>
                        {
                            continue
                        }
                        Poll::Pending => return,
                    }
                }
                Phase::Closed => return,
            };
            self.accept(accepted, cx);
        }
    }

    /// A GOAWAY written as raw bytes (no `h2` connection to write it), best effort.
    fn goaway(&self, reason: Reason) {
        let mut frame = [0u8; 17];
        frame[2] = 8;
        frame[3] = 0x7;
        frame[13..17].copy_from_slice(&u32::from(reason).to_be_bytes());
        self.report
            .out
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .extend_from_slice(&frame);
    }

    /// Reads what the client sent and nobody will read, so that the close sends FIN and not
    /// RST (bounded: a peer still sending meets the RST it earned).
    fn drain(&self) {
        let mut buf = [0u8; 4096];
        for _ in 0..64 {
            match self.link.read(&mut buf) {
                Ok(Some(n)) if n > 0 => {}
                _ => break,
            }
        }
    }

    fn accept(
        &mut self,
        (request, mut respond): (Request<RecvStream>, SendResponse<Bytes>),
        cx: &mut Context<'_>,
    ) {
        if respond.poll_reset(cx).is_ready() {
            // Reset by the client before we saw it (HEADERS then RST_STREAM): no app runs.
            return;
        }
        let (parts, recv) = request.into_parts();
        let id = respond.stream_id().as_u32();
        let end = recv.is_end_stream();
        match synthesize(&parts, end) {
            Ok(synthesized) => {
                let mut inbound = VecDeque::with_capacity(4);
                inbound.push_back(Segment {
                    bytes: Bytes::from(synthesized.head),
                    flow: false,
                });
                self.streams.insert(
                    id,
                    StreamState {
                        token: None,
                        recv: Some(recv),
                        recv_done: end,
                        chunked: synthesized.chunked,
                        inbound,
                        reset: false,
                        shut: false,
                        respond: Some(respond),
                        send: None,
                        transcoder: Transcoder::new(synthesized.head_request),
                        out: VecDeque::new(),
                        out_len: 0,
                        trailers: None,
                        out_end: false,
                        complete: false,
                        want_writable: false,
                        flush_waiting: false,
                        pending: Readiness::default(),
                        waiting: false,
                        budget: self.budget,
                        detached: false,
                        detached_until: None,
                        started: false,
                    },
                );
                self.opened.push(id);
            }
            Err(Refused::Malformed) => {
                respond.send_reset(Reason::PROTOCOL_ERROR);
                self.report.refused.fetch_add(1, Ordering::Relaxed);
            }
            Err(Refused::Connect) => {
                let mut response = Response::new(());
                *response.status_mut() = StatusCode::NOT_IMPLEMENTED;
                let _ = respond.send_response(response, true);
            }
        }
    }

    /// Moves DATA in and out of every stream as far as `h2` allows.
    fn pump(&mut self, cx: &mut Context<'_>) {
        let (budget, send_timeout) = (self.budget, self.send_timeout);
        self.streams.retain(|_, stream| {
            pump_stream(stream, cx, budget, send_timeout);
            !(stream.detached && (stream.reset || (stream.complete && stream.out_len == 0)))
        });
    }

    /// The stream `id` (it lives while its `H2Stream` does).
    pub(crate) fn stream(&mut self, id: u32) -> &mut StreamState {
        self.streams
            .get_mut(&id)
            .expect("a stream's state lives while its H2Stream does")
    }

    /// Takes request bytes of stream `id` into `buf` (`None`: nothing yet; `Some(0)`: the
    /// end, or a reset), reopening the window by the DATA bytes taken; true with them when
    /// it did (the caller then drives: `h2` does not always wake its task for the
    /// connection's WINDOW_UPDATE).
    pub(crate) fn read(&mut self, id: u32, buf: &mut [u8]) -> (Option<usize>, bool) {
        let stream = self.stream(id);
        let mut filled = 0;
        let mut released = 0;
        while filled < buf.len() {
            let Some(segment) = stream.inbound.front_mut() else {
                break;
            };
            let n = segment.bytes.len().min(buf.len() - filled);
            buf[filled..filled + n].copy_from_slice(&segment.bytes[..n]);
            segment.bytes.advance(n);
            filled += n;
            if segment.flow {
                released += n;
            }
            if segment.bytes.is_empty() {
                stream.inbound.pop_front();
            }
        }
        if released > 0 {
            if let Some(recv) = stream.recv.as_mut() {
                let _ = recv.flow_control().release_capacity(released);
            }
        }
        stream.started |= filled > 0;
        let read = if filled > 0 {
            Some(filled)
        } else if stream.recv_done || stream.broken() {
            Some(0)
        } else {
            None
        };
        (read, released > 0)
    }

    /// Takes response bytes of stream `id` (`parts` from byte `skip`) as far as its budget
    /// allows: how many (`Ok(None)`: none, the stream holds its budget).
    pub(crate) fn write(
        &mut self,
        id: u32,
        parts: &[&[u8]],
        mut skip: usize,
    ) -> std::io::Result<Option<usize>> {
        let budget = self.budget;
        let mut events = std::mem::take(&mut self.scratch);
        let stream = self.stream(id);
        if stream.broken() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the HTTP/2 stream was reset",
            ));
        }
        stream.flush_waiting = false;
        let room = budget.saturating_sub(stream.out_len);
        if room == 0 {
            stream.want_writable = true;
            return Ok(None);
        }
        let mut taken = 0;
        for part in parts {
            if skip >= part.len() {
                skip -= part.len();
                continue;
            }
            let n = (part.len() - skip).min(room - taken);
            let fed = stream.transcoder.feed(&part[skip..skip + n], &mut events);
            skip = 0;
            taken += n;
            if fed.is_err() {
                stream.reset_with(Reason::INTERNAL_ERROR);
                events.clear();
                self.scratch = events;
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "the response is not HTTP/1.1 as an exchange writes it",
                ));
            }
            if taken == room {
                break;
            }
        }
        apply(stream, &mut events);
        self.scratch = events;
        Ok(Some(taken))
    }

    /// The exchange says the response is complete (`shutdown_write`).
    pub(crate) fn finish_response(&mut self, id: u32) {
        let mut events = std::mem::take(&mut self.scratch);
        let stream = self.stream(id);
        if !stream.broken() {
            if stream.transcoder.finish(&mut events).is_err() {
                stream.reset_with(Reason::INTERNAL_ERROR);
                events.clear();
            }
            apply(stream, &mut events);
        }
        self.scratch = events;
    }

    /// A timed-out request (`shutdown`): what was written goes if it is a complete response,
    /// else RST_STREAM; the stuck thread's calls fail from now on.
    pub(crate) fn shut(&mut self, id: u32) {
        let stream = self.stream(id);
        if !stream.transcoder.is_done() {
            stream.reset_with(Reason::CANCEL);
        }
        stream.shut = true;
        stream.event(true, true);
    }

    /// The `H2Stream` of `id` is dropped: a response not complete is reset; a complete one
    /// keeps going until its bytes are sent (a request body left unread is then reset
    /// NO_ERROR by `h2`, RFC 9113 8.1).
    pub(crate) fn detach(&mut self, id: u32) {
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        if !stream.transcoder.is_done() && !stream.reset {
            let reason = if stream.transcoder.nothing_sent() {
                Reason::CANCEL
            } else {
                Reason::INTERNAL_ERROR
            };
            stream.reset_with(reason);
        }
        stream.detached = true;
        // Its token goes back to the loop, which may give it to another connection.
        stream.token = None;
        let done = stream.reset || (stream.complete && stream.out_len == 0);
        if !done {
            stream.detached_until = Some(Instant::now() + self.send_timeout);
            self.detached_news = true;
        }
        if done {
            self.streams.remove(&id);
        }
    }

    /// Resets the detached streams whose bytes did not move by their deadline (CANCEL); the
    /// earliest deadline left, when the loop must come back.
    pub(crate) fn expire_detached(&mut self, now: Instant) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        self.streams.retain(|_, stream| {
            let Some(until) = stream.detached_until else {
                return true;
            };
            if until <= now {
                stream.reset_with(Reason::CANCEL);
                return false;
            }
            next = Some(next.map_or(until, |next| next.min(until)));
            true
        });
        next
    }

    /// Readiness of the loop's streams to report (and forgets it).
    pub(crate) fn take_ready(&mut self, ready: &mut Vec<(u64, Readiness)>) {
        for stream in self.streams.values_mut() {
            if let Some(token) = stream.token {
                if !stream.waiting && (stream.pending.readable || stream.pending.writable) {
                    ready.push((token, stream.pending));
                    stream.pending = Readiness::default();
                }
            }
        }
    }

    /// True when the loop has something to do: streams to hand over, readiness to report,
    /// output the socket did not take, or the end to notice.
    pub(crate) fn left_for_loop(&self) -> bool {
        !self.opened.is_empty()
            || self.flag.is_up()
            || self.detached_news
            || self.report.write_blocked.load(Ordering::Relaxed)
            || (matches!(self.phase, Phase::Closed) && !self.finished)
            || self.streams.values().any(|stream| {
                stream.token.is_some()
                    && !stream.waiting
                    && (stream.pending.readable || stream.pending.writable)
            })
    }

    /// True when a blocked thread's stream became ready.
    pub(crate) fn waiter_ready(&self) -> bool {
        self.streams
            .values()
            .any(|stream| stream.waiting && (stream.pending.readable || stream.pending.writable))
    }

    #[cfg(test)]
    pub(crate) fn debug(&mut self) -> String {
        let mut out = format!(
            "phase closed={} finished={} ",
            matches!(self.phase, Phase::Closed),
            self.finished
        );
        for (id, s) in self.streams.iter_mut() {
            let flow = s.recv.as_mut().map(|r| {
                (
                    r.flow_control().available_capacity(),
                    r.flow_control().used_capacity(),
                    r.is_end_stream(),
                )
            });
            out += &format!(
                "[{id} inbound={} done={} reset={} waiting={} pending={:?} flow={flow:?}]",
                s.inbound.len(),
                s.recv_done,
                s.reset,
                s.waiting,
                s.pending
            );
        }
        out
    }

    /// The output budget per stream.
    pub(crate) fn budget(&self) -> usize {
        self.budget
    }
}
