//! One client connection: its socket and its state (idle, connecting, open),
//! the requests outstanding on it, the bytes still to write, and the framing
//! of the responses read (`tines_proto::client` for heads, `ChunkedDecoder`
//! for chunked bodies). On `https://` the socket carries a TLS session (`tls`),
//! through which every read and write goes; the framing sees plaintext. In an
//! HTTP/2 run the plaintext goes to and from the connection's client (`http2`),
//! which frames the streams instead; the queue `in_flight` then holds the
//! requests not yet opened as streams.
//!
//! Owns the socket calls and the bytes; it does not count anything and does
//! not decide what to send next: it reports what happened (`Received`,
//! `Framed`, `ConnectProgress`, a write error) and the worker applies the
//! counting rules. Must not allocate per request: the buffers are per
//! connection and reused (only a malformed response builds a message).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tines_proto::client::{parse_response_head, BodyKind};
use tines_proto::{ChunkedDecoder, ChunkedEvent};

use crate::args::RequestSpec;

mod http2;
mod tls;
mod websocket;

pub use http2::{describe as describe_h2_error, kind_of as h2_error_kind, Event, Health};

/// The read buffer's first size; it doubles while one response head does not fit.
pub const READ_BUFFER: usize = 16 * 1024;
/// Largest response head read (the buffer stops growing there); a larger one
/// is a `parse` error. As large as any server we know sends.
const MAX_HEAD: usize = 64 * 1024;
/// The chunked decoder's limit on a response's trailer section: a quarter of
/// the head limit, as trailers are rare and small.
const MAX_TRAILER: usize = 16 * 1024;

/// A request written (or waiting to be) and not yet answered.
#[derive(Clone, Copy, Debug)]
pub struct InFlight {
    /// Latency origin: intended time (open loop), write, or connect start.
    pub start: Instant,
    /// When the request was written (for the timeout); `None` until then.
    pub sent: Option<Instant>,
    /// Index into the request specs.
    pub spec: u32,
}

/// Where the connection is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// No socket: the slot waits for work.
    Idle,
    /// The non-blocking connect is under way.
    Connecting,
    /// Connected: requests are written and responses read.
    Open,
}

/// What the next bytes read belong to.
#[derive(Debug)]
enum Body {
    /// A response head.
    Head,
    /// A body with this many bytes left.
    Length(u64),
    /// A chunked body.
    Chunked(ChunkedDecoder),
    /// A body that ends when the server closes.
    UntilClose,
}

/// The outcome of one read from the socket.
pub enum Received {
    /// `count` bytes were read; `filled_buffer` says the read filled the
    /// space it had, so more may be waiting.
    Bytes {
        /// Bytes read.
        count: usize,
        /// The read used all the free space of the buffer.
        filled_buffer: bool,
    },
    /// The server closed its side.
    Eof,
    /// Nothing more to read now.
    WouldBlock,
    /// The buffer is at its limit with one response head not complete.
    HeadTooLarge,
    /// The read failed.
    Failed(io::Error),
    /// The TLS handshake failed or a record could not be read: why, in one line.
    Tls(String),
}

/// The outcome of framing the bytes read.
pub enum Framed {
    /// The bytes read so far hold no further complete response.
    NeedMore,
    /// The oldest request's response is complete (`finish_response` takes it).
    Response,
    /// The bytes cannot be a response: the message says why.
    Malformed(String),
}

/// The state of a connect under way.
pub enum ConnectProgress {
    /// The connection is open.
    Connected,
    /// Not yet: a spurious wake-up.
    Pending,
    /// The connect failed.
    Failed(io::Error),
}

/// The response just completed, taken off the connection.
pub struct Response {
    /// Its request.
    pub request: InFlight,
    /// Its status code.
    pub status: u16,
    /// When its first byte was read.
    pub first_byte: Instant,
    /// The server allows another request on the connection.
    pub keep_alive: bool,
}

/// One connection slot of a worker.
pub struct Connection {
    /// Bumped on every close, so events and ready-queue entries of an older
    /// socket in this slot are recognised as stale.
    generation: u32,
    state: State,
    stream: Option<TcpStream>,
    /// The TLS session over `stream` (`https://`, `wss://`).
    session: Option<Box<tls::Session>>,
    addr: Option<SocketAddr>,
    connect_started: Instant,
    read_buffer: Vec<u8>,
    read_length: usize,
    write_buffer: Vec<u8>,
    written: usize,
    in_flight: VecDeque<InFlight>,
    body: Body,
    status: u16,
    keep_alive: bool,
    first_byte: Option<Instant>,
    /// A WebSocket connection: after its 101, each response is one server frame.
    websocket: bool,
    /// The WebSocket handshake's 101 has not been read yet: only the handshake's bytes (the
    /// first this many of the write buffer) may be written (RFC 6455 4.1: a client sends
    /// nothing more until the server's handshake has come).
    awaiting_upgrade: bool,
    handshake_len: usize,
    /// Payload bytes of the server frame being read still to come, and whether that frame
    /// is a message (else a ping or pong, which is no response).
    ws_remaining: u64,
    ws_message: bool,
    /// An HTTP/2 run: each connection speaks HTTP/2 (its client made once connected).
    http2: bool,
    h2: Option<Box<http2::H2Client>>,
}

/// The poll token of `slot` while it holds generation `generation`.
fn token(slot: usize, generation: u32) -> Token {
    Token(slot | ((generation as usize) << 32))
}

/// The slot and generation an event's token names.
pub fn slot_and_generation(token: Token) -> (usize, u32) {
    (token.0 & 0xffff_ffff, (token.0 >> 32) as u32)
}

impl Connection {
    /// An idle slot that will hold up to `pipeline` requests of at most
    /// `largest_request` bytes each.
    pub fn new(pipeline: usize, largest_request: usize, now: Instant, http2: bool) -> Connection {
        Connection {
            generation: 0,
            state: State::Idle,
            stream: None,
            session: None,
            addr: None,
            connect_started: now,
            read_buffer: vec![0; READ_BUFFER],
            read_length: 0,
            write_buffer: Vec::with_capacity(pipeline * largest_request),
            written: 0,
            in_flight: VecDeque::with_capacity(pipeline),
            body: Body::Head,
            status: 0,
            keep_alive: true,
            first_byte: None,
            websocket: false,
            awaiting_upgrade: false,
            handshake_len: 0,
            ws_remaining: 0,
            ws_message: false,
            http2,
            h2: None,
        }
    }

    /// The current generation (see `slot_and_generation`).
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// Where the connection is in its life.
    pub fn state(&self) -> State {
        self.state
    }

    /// The address connected (or being connected) to, if any yet.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.addr
    }

    /// Requests outstanding (HTTP/2: queued or open as streams).
    pub fn in_flight(&self) -> usize {
        self.in_flight.len() + self.h2.as_ref().map_or(0, |h2| h2.open_streams())
    }

    /// Whether the oldest outstanding request has been written (HTTP/2: a stream is open).
    pub fn oldest_was_sent(&self) -> bool {
        match &self.h2 {
            Some(h2) => h2.open_streams() > 0,
            None => self.in_flight.front().is_some_and(|r| r.sent.is_some()),
        }
    }

    /// Whether bytes are waiting to be written (plaintext, or records the session holds).
    pub fn has_unwritten(&self) -> bool {
        self.written < self.write_buffer.len()
            || self.session.as_ref().is_some_and(|s| s.wants_write())
    }

    /// Whether the TLS handshake has just ended: `Some(resumed)` once per connection.
    pub fn handshake_done(&mut self) -> Option<bool> {
        self.session.as_mut().and_then(|s| s.handshake_done())
    }

    /// Whether the response being read ends when the server closes.
    pub fn reads_until_close(&self) -> bool {
        matches!(self.body, Body::UntilClose)
    }

    /// Whether one more request to `addr` may go on this connection, with at
    /// most `pipeline` outstanding.
    pub fn can_take(&self, pipeline: usize, addr: SocketAddr) -> bool {
        if self.in_flight() >= pipeline || self.h2_health() != Health::Open {
            return false;
        }
        if self.state == State::Idle {
            return true;
        }
        // A keep-alive connection to another address must drain first.
        self.addr == Some(addr) || self.in_flight.is_empty()
    }

    /// Opens a connection that is to be connected with a WebSocket handshake: `handshake`
    /// goes first, and the bytes read are its 101, then one frame per response.
    pub fn begin_websocket(&mut self, handshake: &[u8]) {
        self.websocket = true;
        self.awaiting_upgrade = true;
        self.handshake_len = handshake.len();
        self.write_buffer.extend_from_slice(handshake);
    }

    /// Adds a request (spec `spec`, its encoded `bytes`, unused by HTTP/2) whose latency runs
    /// from `start`.
    pub fn queue(&mut self, start: Instant, spec: u32, bytes: &[u8]) {
        self.in_flight.push_back(InFlight {
            start,
            sent: None,
            spec,
        });
        // HTTP/2: the request waits here until it is opened as a stream.
        if !self.http2 {
            self.write_buffer.extend_from_slice(bytes);
        }
    }

    /// Starts a non-blocking connect to `addr` and registers it as `slot`; with `tls`, the
    /// connection is a TLS session to that server name (its handshake starts once connected).
    pub fn connect(
        &mut self,
        slot: usize,
        addr: SocketAddr,
        tls: Option<(&Arc<ClientConfig>, &ServerName<'static>)>,
        now: Instant,
        registry: &Registry,
    ) -> io::Result<()> {
        self.connect_started = now;
        self.addr = Some(addr);
        if let Some((config, name)) = tls {
            let session = tls::Session::new(config, name).map_err(io::Error::other)?;
            self.session = Some(Box::new(session));
        }
        let mut stream = TcpStream::connect(addr)?;
        registry.register(
            &mut stream,
            token(slot, self.generation),
            Interest::READABLE | Interest::WRITABLE,
        )?;
        self.stream = Some(stream);
        self.state = State::Connecting;
        Ok(())
    }

    /// Whether the connect under way has finished; `is_error` is the event's error flag.
    pub fn connect_progress(&self, is_error: bool) -> ConnectProgress {
        let stream = self.stream.as_ref().expect("connecting has a stream");
        match stream.take_error() {
            Ok(Some(error)) | Err(error) => ConnectProgress::Failed(error),
            Ok(None) if is_error => {
                ConnectProgress::Failed(io::Error::from(io::ErrorKind::ConnectionRefused))
            }
            Ok(None) => match stream.peer_addr() {
                Ok(_) => ConnectProgress::Connected,
                Err(error) if error.kind() == io::ErrorKind::NotConnected => {
                    ConnectProgress::Pending
                }
                Err(error) => ConnectProgress::Failed(error),
            },
        }
    }

    /// The connect finished at `now`: the connection is open. With
    /// `latency_from_now` the outstanding requests' latency runs from now (the
    /// closed loop with keep-alive measures from the write). Returns the
    /// connection's set-up time.
    pub fn on_connected(&mut self, now: Instant, latency_from_now: bool) -> Duration {
        let stream = self.stream.as_ref().expect("connecting has a stream");
        let _ = stream.set_nodelay(true);
        self.state = State::Open;
        if latency_from_now {
            for request in self.in_flight.iter_mut() {
                request.start = now;
            }
        }
        now.saturating_duration_since(self.connect_started)
    }

    /// Writes what it can of the pending bytes; once all are written, the
    /// requests they held are marked sent at `now`. HTTP/2: the queued requests
    /// are opened as streams first (a stream is sent when the client takes it).
    pub fn write_pending(&mut self, now: Instant, specs: &[RequestSpec]) -> io::Result<()> {
        // Over TLS the client is made once the handshake has ended, so that nothing of
        // HTTP/2 is sent before the server's ALPN answer has been checked.
        let handshaking = self.session.as_ref().is_some_and(|s| s.is_handshaking());
        if self.http2 && !handshaking {
            if self.h2.is_none() {
                self.h2 = Some(Box::new(http2::H2Client::new()?));
            }
            if let Some(h2) = self.h2.as_mut() {
                h2.pump(&mut self.in_flight, specs, now);
                h2.take_output(&mut self.write_buffer);
            }
        }
        let stream = self.stream.as_mut().expect("open has a stream");
        let end = if self.awaiting_upgrade {
            self.handshake_len
        } else {
            self.write_buffer.len()
        };
        if let Some(session) = self.session.as_mut() {
            if self.written < end {
                self.written += session.send(&self.write_buffer[self.written..end])?;
            }
            session.flush(stream)?;
        } else {
            while self.written < end {
                match stream.write(&self.write_buffer[self.written..end]) {
                    Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                    Ok(n) => self.written += n,
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                    Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                    Err(error) => return Err(error),
                }
            }
        }
        if self.written == self.write_buffer.len() {
            self.write_buffer.clear();
            self.written = 0;
            if self.http2 {
                return Ok(());
            }
            for request in self.in_flight.iter_mut().rev() {
                if request.sent.is_some() {
                    break;
                }
                request.sent = Some(now);
            }
        }
        Ok(())
    }

    /// Reads once into the free space of the buffer (growing it, up to the
    /// head limit, when it is full).
    pub fn receive(&mut self) -> Received {
        if self.read_length == self.read_buffer.len() {
            if self.read_buffer.len() >= MAX_HEAD {
                return Received::HeadTooLarge;
            }
            let grown = self.read_buffer.len() * 2;
            self.read_buffer.resize(grown, 0);
        }
        let stream = self.stream.as_mut().expect("open has a stream");
        if let Some(session) = self.session.as_mut() {
            let received = session.receive(stream, &mut self.read_buffer[self.read_length..]);
            if let Received::Bytes { count, .. } = received {
                self.read_length += count;
            }
            return received;
        }
        let space = self.read_buffer.len() - self.read_length;
        loop {
            match stream.read(&mut self.read_buffer[self.read_length..]) {
                Ok(0) => return Received::Eof,
                Ok(count) => {
                    self.read_length += count;
                    return Received::Bytes {
                        count,
                        filled_buffer: count == space,
                    };
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    return Received::WouldBlock
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Received::Failed(error),
            }
        }
    }

    /// Frames the bytes read from `position` on, up to the next complete
    /// response (or until more bytes are needed); `position` advances past
    /// what was consumed. `now` is the first byte's time of a new response.
    pub fn frame(&mut self, position: &mut usize, now: Instant, specs: &[RequestSpec]) -> Framed {
        loop {
            if *position == self.read_length {
                return Framed::NeedMore;
            }
            if self.websocket {
                match self.frame_websocket(position, now) {
                    Some(framed) => return framed,
                    None => continue,
                }
            }
            match &mut self.body {
                Body::Head => {
                    let Some(front) = self.in_flight.front() else {
                        return Framed::Malformed(
                            "bytes from the server with no request outstanding".into(),
                        );
                    };
                    if self.first_byte.is_none() {
                        self.first_byte = Some(now);
                    }
                    let is_head = specs[front.spec as usize].is_head;
                    let bytes = &self.read_buffer[*position..self.read_length];
                    match parse_response_head(bytes, is_head, MAX_HEAD) {
                        Ok(None) => return Framed::NeedMore,
                        Err(error) => return Framed::Malformed(error.reason().into()),
                        Ok(Some(head)) => {
                            *position += head.head_len;
                            if head.is_interim() && head.status != 101 {
                                continue;
                            }
                            self.status = head.status;
                            self.keep_alive = head.keep_alive;
                            match head.body {
                                BodyKind::None => return Framed::Response,
                                BodyKind::Length(n) => self.body = Body::Length(n),
                                BodyKind::Chunked => {
                                    self.body = Body::Chunked(ChunkedDecoder::new(MAX_TRAILER))
                                }
                                BodyKind::UntilClose => self.body = Body::UntilClose,
                            }
                        }
                    }
                }
                Body::Length(remaining) => {
                    let take = (*remaining).min((self.read_length - *position) as u64);
                    *position += take as usize;
                    *remaining -= take;
                    if *remaining == 0 {
                        return Framed::Response;
                    }
                }
                Body::Chunked(decoder) => {
                    match decoder.decode(&self.read_buffer[*position..self.read_length]) {
                        Ok((consumed, event)) => {
                            *position += consumed;
                            match event {
                                ChunkedEvent::Data(_) => {}
                                ChunkedEvent::NeedMore => return Framed::NeedMore,
                                ChunkedEvent::End => return Framed::Response,
                            }
                        }
                        Err(error) => {
                            return Framed::Malformed(format!("chunked body: {}", error.reason()))
                        }
                    }
                }
                Body::UntilClose => {
                    *position = self.read_length;
                }
            }
        }
    }

    /// Drops the first `position` bytes read (framed already).
    pub fn discard_framed(&mut self, position: usize) {
        self.read_buffer.copy_within(position..self.read_length, 0);
        self.read_length -= position;
    }

    /// Takes the oldest request's completed response off the connection; the
    /// next bytes are a new response head.
    pub fn finish_response(&mut self, now: Instant) -> Response {
        let request = self
            .in_flight
            .pop_front()
            .expect("a request was outstanding");
        self.body = Body::Head;
        Response {
            request,
            status: self.status,
            first_byte: self.first_byte.take().unwrap_or(now),
            keep_alive: self.keep_alive,
        }
    }

    /// Drops every outstanding request; returns how many there were.
    pub fn abandon_requests(&mut self) -> usize {
        let abandoned = self.in_flight.len() + self.h2.as_mut().map_or(0, |h2| h2.abandon());
        self.in_flight.clear();
        abandoned
    }

    /// Closes the socket (deregistering it) and makes the slot idle, in a new
    /// generation. Outstanding requests are left for the caller to settle.
    pub fn close(&mut self, registry: &Registry) {
        if let Some(mut stream) = self.stream.take() {
            let _ = registry.deregister(&mut stream);
        }
        self.session = None;
        self.h2 = None;
        self.generation = self.generation.wrapping_add(1);
        self.state = State::Idle;
        self.read_length = 0;
        self.write_buffer.clear();
        self.written = 0;
        self.body = Body::Head;
        self.first_byte = None;
        self.websocket = false;
        self.awaiting_upgrade = false;
        self.ws_remaining = 0;
    }

    /// Whether a connect has been under way for `limit` or more at `now`.
    pub fn connect_expired(&self, now: Instant, limit: Duration) -> bool {
        self.state == State::Connecting
            && now.saturating_duration_since(self.connect_started) >= limit
    }

    /// Whether the oldest written request has waited `limit` or more at `now`.
    pub fn request_expired(&self, now: Instant, limit: Duration) -> bool {
        if let Some(h2) = &self.h2 {
            return self.state == State::Open && h2.expired(now, limit);
        }
        self.state == State::Open
            && self
                .in_flight
                .front()
                .and_then(|r| r.sent)
                .is_some_and(|sent| now.saturating_duration_since(sent) >= limit)
    }
}
