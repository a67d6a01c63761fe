//! One connection's HTTP/2 client (`--http2`, `--h2c`): the `h2` crate's client connection,
//! driven by the engine's own loop without a runtime.
//!
//! The crate reads and writes an in-memory `Io` (tokio's `AsyncRead`/`AsyncWrite` traits over
//! two buffers): `connection` feeds it the plaintext read from the socket (or from the TLS
//! session) and writes out what the crate wrote into it. Polls use a no-op waker: after every
//! feed and every new request the connection and its streams are polled again until nothing
//! moves, so no wake-up is ever needed (the server drives the same crate the same way, ADR
//! 0034). Each request is one stream; up to `--streams` are open at once, and never more than
//! the server's SETTINGS_MAX_CONCURRENT_STREAMS (the crate holds the rest back, and the
//! requests not yet handed to it wait in the connection's queue).
//!
//! Why the crate and not a frame writer of our own over an HPACK crate: it is already built
//! for the server (one codec in the workspace, one set of bugs; no well-kept HPACK crate is in
//! the workspace), it is the client most servers meet (hyper's), and what it costs per request
//! (a header map cloned, a slab entry, HPACK encoding, its locks) stays under the servers we
//! measure: hello over h2c with 10 streams per connection, 9.6 µs of CPU per request against
//! Granian's 15.0, 78-95 µs against gunicorn's 289 and Hypercorn's 390 (at their few thousand
//! requests a second a read carries fewer responses: the client's costs per read and per
//! wake-up are shared by fewer requests), and 6.6 µs over TLS against nginx's 6.2, the one
//! server it only matches (benches/results/2026-11-27-issue38-h2.md; docs/bench.md). A hand-written
//! client would be the next step if a server ever got cheaper than that.
//!
//! Owns: opening streams for the queued requests, reading their responses (status, body
//! drained with its flow-control capacity given back, trailers), and telling apart how a
//! stream ended. Must not: touch a socket or count anything (the worker counts the `Event`s).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use h2::client::{Builder, Connection as H2Connection, ResponseFuture, SendRequest};
use h2::RecvStream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{Connection, InFlight, Response};
use crate::args::RequestSpec;
use crate::stats::ErrorKind;

/// The flow-control window the client gives each stream: a response of up to this size is
/// never held back by the client (the window is given back as the body is read).
const STREAM_WINDOW: u32 = 1 << 20;
/// The connection's window: room for every stream's window at the default `--streams` range.
const CONNECTION_WINDOW: u32 = 16 << 20;

/// The bytes between the socket and the crate.
#[derive(Default)]
struct Pipes {
    /// Plaintext read from the server, not yet taken by the crate (from `read_at`).
    inbound: Vec<u8>,
    read_at: usize,
    /// Bytes the crate wrote, not yet taken for the socket.
    outbound: Vec<u8>,
}

/// The crate's I/O: reads what was fed (else `Pending`), writes into the outbound buffer.
struct Io(Rc<RefCell<Pipes>>);

impl AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut pipes = self.0.borrow_mut();
        let pipes = &mut *pipes;
        let available = &pipes.inbound[pipes.read_at..];
        if available.is_empty() {
            return Poll::Pending;
        }
        let count = available.len().min(buf.remaining());
        buf.put_slice(&available[..count]);
        pipes.read_at += count;
        if pipes.read_at == pipes.inbound.len() {
            pipes.inbound.clear();
            pipes.read_at = 0;
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.0.borrow_mut().outbound.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// How one stream ended.
pub enum Event {
    /// A complete response.
    Response(Response),
    /// The stream failed: reset by the server, refused by a GOAWAY, or cut by an error.
    Failed {
        /// Why.
        error: h2::Error,
    },
}

/// Where the connection is: taking streams, done with (drained), or failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// It takes new streams.
    Open,
    /// It takes no new stream (a GOAWAY came, or the crate closed the connection cleanly):
    /// once its open streams end it is closed, and the requests still queued go on a new one.
    Draining,
    /// A connection error: the requests still queued fail with this kind and message.
    Failed(ErrorKind, String),
}

/// Where one open stream is.
enum Phase {
    /// Waiting for the response's head.
    Head(ResponseFuture),
    /// Reading the body; then (`true`) the trailers.
    Body(RecvStream, bool),
}

/// One open stream.
struct Open {
    request: InFlight,
    phase: Phase,
    status: u16,
    first_byte: Instant,
}

/// The result of polling one stream.
enum Step {
    /// Nothing more now; `true` if it moved before that.
    Waiting(bool),
    Done(Event),
}

/// An HTTP/2 client connection over the bytes of one socket.
pub struct H2Client {
    pipes: Rc<RefCell<Pipes>>,
    send: SendRequest<Bytes>,
    connection: H2Connection<Io, Bytes>,
    open: Vec<Open>,
    events: VecDeque<Event>,
    health: Health,
}

/// The kind a failed stream is counted as.
pub fn kind_of(error: &h2::Error) -> ErrorKind {
    if error.is_io() {
        ErrorKind::Reset
    } else if error.is_go_away() && error.is_remote() {
        ErrorKind::GoAway
    } else if error.is_reset() && error.is_remote() {
        ErrorKind::Stream
    } else {
        ErrorKind::Parse
    }
}

/// Whether the server said it did not process the stream, so that it may go again: past the
/// last stream id of a graceful GOAWAY, or reset with REFUSED_STREAM.
fn refused_unprocessed(error: &h2::Error) -> bool {
    error.is_remote()
        && ((error.is_go_away() && error.reason() == Some(h2::Reason::NO_ERROR))
            || (error.is_reset() && error.reason() == Some(h2::Reason::REFUSED_STREAM)))
}

/// One line about a failed stream.
pub fn describe(error: &h2::Error) -> String {
    match kind_of(error) {
        ErrorKind::GoAway => format!(
            "GOAWAY {}",
            error.reason().map_or("".into(), |r| format!("{r:?}"))
        ),
        ErrorKind::Stream => format!(
            "RST_STREAM {}",
            error.reason().map_or("".into(), |r| format!("{r:?}"))
        ),
        _ => format!("HTTP/2: {error}"),
    }
}

impl H2Client {
    /// A client connection whose preface and SETTINGS wait in its outbound buffer.
    pub fn new() -> io::Result<H2Client> {
        let pipes = Rc::new(RefCell::new(Pipes::default()));
        let mut builder = Builder::new();
        builder
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .enable_push(false);
        let handshake = builder.handshake::<Io, Bytes>(Io(pipes.clone()));
        let mut handshake = std::pin::pin!(handshake);
        let mut cx = Context::from_waker(Waker::noop());
        // The client's handshake only writes (the preface and SETTINGS), and `Io` always
        // takes what is written: it ends in its first poll.
        let (send, connection) = match handshake.as_mut().poll(&mut cx) {
            Poll::Ready(Ok(pair)) => pair,
            Poll::Ready(Err(error)) => return Err(io::Error::other(error)),
            Poll::Pending => return Err(io::Error::other("HTTP/2 handshake did not end")),
        };
        Ok(H2Client {
            pipes,
            send,
            connection,
            open: Vec::new(),
            events: VecDeque::new(),
            health: Health::Open,
        })
    }

    /// Streams open (sent, not yet ended).
    pub fn open_streams(&self) -> usize {
        self.open.len()
    }

    /// Whether the connection takes new streams, or why not.
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// Whether an open stream was sent `limit` or more before `now`.
    pub fn expired(&self, now: Instant, limit: Duration) -> bool {
        self.open.iter().any(|open| {
            open.request
                .sent
                .is_some_and(|sent| now.saturating_duration_since(sent) >= limit)
        })
    }

    /// Hands the crate plaintext read from the server.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.pipes.borrow_mut().inbound.extend_from_slice(bytes);
    }

    /// Moves what the crate wrote to the end of `out`.
    pub fn take_output(&mut self, out: &mut Vec<u8>) {
        let mut pipes = self.pipes.borrow_mut();
        if out.is_empty() {
            std::mem::swap(out, &mut pipes.outbound);
        } else {
            out.extend_from_slice(&pipes.outbound);
            pipes.outbound.clear();
        }
    }

    /// The next stream that ended, if any.
    pub fn next_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Drops every open stream (the connection is abandoned); returns how many there were.
    pub fn abandon(&mut self) -> usize {
        let count = self.open.len();
        self.open.clear();
        count
    }

    /// Opens streams for the requests queued in `pending` (from its front) and moves the
    /// connection and its streams until nothing moves; streams that end become events.
    pub fn pump(&mut self, pending: &mut VecDeque<InFlight>, specs: &[RequestSpec], now: Instant) {
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            // The crate takes one new stream at a time: the next waits until the connection
            // has sent the HEADERS of the last (`poll_ready` is pending until then).
            let opened = self.start_streams(pending, specs, now, &mut cx);
            self.poll_connection(&mut cx);
            let moved = self.poll_streams(pending, now, &mut cx);
            if !opened && !moved {
                break;
            }
        }
    }

    fn start_streams(
        &mut self,
        pending: &mut VecDeque<InFlight>,
        specs: &[RequestSpec],
        now: Instant,
        cx: &mut Context<'_>,
    ) -> bool {
        let mut opened = false;
        while self.health == Health::Open && !pending.is_empty() {
            match self.send.poll_ready(cx) {
                Poll::Pending => return opened,
                Poll::Ready(Err(error)) => {
                    self.stop_opening(&error);
                    return opened;
                }
                Poll::Ready(Ok(())) => {}
            }
            let Some(mut request) = pending.pop_front() else {
                return opened;
            };
            opened = true;
            let prepared = specs[request.spec as usize]
                .h2
                .as_ref()
                .expect("an HTTP/2 run prepares every request for HTTP/2");
            match self
                .send
                .send_request(prepared.head.clone(), prepared.body.is_none())
            {
                Ok((response, mut stream)) => {
                    if let Some(body) = &prepared.body {
                        // Buffered by the crate and sent as the server's windows allow.
                        if let Err(error) = stream.send_data(body.clone(), true) {
                            self.events.push_back(Event::Failed { error });
                            continue;
                        }
                    }
                    request.sent = Some(now);
                    self.open.push(Open {
                        request,
                        phase: Phase::Head(response),
                        status: 0,
                        first_byte: now,
                    });
                }
                Err(error) => {
                    pending.push_front(request);
                    self.stop_opening(&error);
                    return opened;
                }
            }
        }
        opened
    }

    /// The crate refuses new streams: after a GOAWAY the queued requests go on a new
    /// connection; after any other error they fail.
    fn stop_opening(&mut self, error: &h2::Error) {
        if error.is_go_away() && error.reason() == Some(h2::Reason::NO_ERROR) {
            self.health = Health::Draining;
        } else {
            self.health = Health::Failed(kind_of(error), describe(error));
        }
    }

    fn poll_connection(&mut self, cx: &mut Context<'_>) {
        if matches!(self.health, Health::Failed(..)) {
            return;
        }
        match Pin::new(&mut self.connection).poll(cx) {
            Poll::Pending => {}
            Poll::Ready(Ok(())) => {
                if self.health == Health::Open {
                    self.health = Health::Draining;
                }
            }
            Poll::Ready(Err(error)) => {
                if error.is_go_away() && error.reason() == Some(h2::Reason::NO_ERROR) {
                    self.health = Health::Draining;
                } else {
                    self.health = Health::Failed(kind_of(&error), describe(&error));
                }
            }
        }
    }

    /// Polls every open stream; returns whether any moved. A stream the server refused
    /// unprocessed in a graceful GOAWAY (its id past the last the server took) or with
    /// REFUSED_STREAM (RFC 9113 8.7: safe to retry) goes back to the front of `pending`,
    /// its latency still running from its start.
    fn poll_streams(
        &mut self,
        pending: &mut VecDeque<InFlight>,
        now: Instant,
        cx: &mut Context<'_>,
    ) -> bool {
        let mut moved = false;
        let mut index = 0;
        while index < self.open.len() {
            match poll_stream(&mut self.open[index], now, cx) {
                Step::Waiting(stream_moved) => {
                    moved |= stream_moved;
                    index += 1;
                }
                Step::Done(event) => {
                    let open = self.open.swap_remove(index);
                    match event {
                        Event::Failed { error } if refused_unprocessed(&error) => {
                            pending.push_front(InFlight {
                                sent: None,
                                ..open.request
                            });
                            if self.health == Health::Open {
                                self.health = Health::Draining;
                            }
                        }
                        event => self.events.push_back(event),
                    }
                    moved = true;
                }
            }
        }
        moved
    }
}

fn poll_stream(open: &mut Open, now: Instant, cx: &mut Context<'_>) -> Step {
    let mut moved = false;
    loop {
        match &mut open.phase {
            Phase::Head(response) => match Pin::new(response).poll(cx) {
                Poll::Pending => return Step::Waiting(moved),
                Poll::Ready(Err(error)) => return Step::Done(Event::Failed { error }),
                Poll::Ready(Ok(response)) => {
                    open.status = response.status().as_u16();
                    open.first_byte = now;
                    open.phase = Phase::Body(response.into_body(), false);
                    moved = true;
                }
            },
            Phase::Body(body, false) => match body.poll_data(cx) {
                Poll::Pending => return Step::Waiting(moved),
                Poll::Ready(Some(Ok(data))) => {
                    // Gives the window back (a WINDOW_UPDATE once enough is read).
                    let _ = body.flow_control().release_capacity(data.len());
                    moved = true;
                }
                Poll::Ready(Some(Err(error))) => return Step::Done(Event::Failed { error }),
                Poll::Ready(None) => {
                    if let Phase::Body(_, trailers) = &mut open.phase {
                        *trailers = true;
                    }
                }
            },
            Phase::Body(body, true) => match body.poll_trailers(cx) {
                Poll::Pending => return Step::Waiting(moved),
                Poll::Ready(Err(error)) => return Step::Done(Event::Failed { error }),
                Poll::Ready(Ok(_)) => {
                    return Step::Done(Event::Response(Response {
                        request: open.request,
                        status: open.status,
                        first_byte: open.first_byte,
                        keep_alive: true,
                    }))
                }
            },
        }
    }
}

/// The HTTP/2 side of a connection slot.
impl Connection {
    /// Whether this is an HTTP/2 connection.
    pub fn is_h2(&self) -> bool {
        self.http2
    }

    /// HTTP/2: whether the connection takes new streams, or why not (`Open` before its
    /// client is made).
    pub fn h2_health(&self) -> Health {
        self.h2
            .as_ref()
            .map_or(Health::Open, |h2| h2.health().clone())
    }

    /// HTTP/2: streams open.
    pub fn h2_open_streams(&self) -> usize {
        self.h2.as_ref().map_or(0, |h2| h2.open_streams())
    }

    /// HTTP/2: hands the client the bytes read, moves its streams, and queues what it
    /// wrote (WINDOW_UPDATE, SETTINGS and PING acknowledgements, new streams) for writing.
    pub fn h2_receive(&mut self, now: Instant, specs: &[RequestSpec]) {
        let Some(h2) = self.h2.as_mut() else {
            return;
        };
        h2.feed(&self.read_buffer[..self.read_length]);
        self.read_length = 0;
        h2.pump(&mut self.in_flight, specs, now);
        h2.take_output(&mut self.write_buffer);
    }

    /// HTTP/2: drops the open streams (the connection is gone); returns how many.
    pub fn h2_abandon_open(&mut self) -> usize {
        self.h2.as_mut().map_or(0, |h2| h2.abandon())
    }

    /// HTTP/2: the next stream that ended.
    pub fn h2_event(&mut self) -> Option<Event> {
        self.h2.as_mut().and_then(|h2| h2.next_event())
    }

    /// The request spec of the oldest queued request (0 when none is queued).
    pub fn front_spec(&self) -> usize {
        self.in_flight.front().map_or(0, |r| r.spec as usize)
    }

    /// Whether the TLS session agreed on `h2` by ALPN.
    pub fn alpn_is_h2(&self) -> bool {
        self.session
            .as_ref()
            .is_some_and(|s| s.alpn() == Some(&b"h2"[..]))
    }
}
