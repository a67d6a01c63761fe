//! A WebSocket connection after its 101 (RFC 6455, ADR 0014): reading and decoding the
//! client's frames (`tines_proto::websocket`, sans-IO), answering pings, the closing
//! handshake, permessage-deflate both ways, and writing the server's frames without ever
//! waiting (what the socket does not take is queued for the reactor, ADR 0009).
//!
//! The event loop that serves the app (ASGI) owns a [`WsSession`] and calls
//! [`WsSession::read`] when the reactor reports its socket readable; messages come out whole
//! (ASGI hands whole messages to the app), bounded by `ws_max_message_size` after inflation.
//!
//! It must not know ASGI; it decides no HTTP (the upgrade happened before).

use std::io;
use std::time::Instant;

use tines_proto::websocket::deflate::{Agreement, Deflater, Inflater};
use tines_proto::websocket::frame::{encode, encode_close, Decoder, Event, MessageKind, Opcode};
use tines_proto::websocket::utf8::Utf8Stream;
use tines_proto::websocket::{close_code, WsError};

use crate::connection::{Connection, Protocol};

/// Bytes read from the socket per read call (a per-worker scratch would do as well; this one
/// lives only during [`WsSession::read`]).
const READ_CHUNK: usize = 64 * 1024;

/// Most bytes one [`WsSession::read`] takes off the socket before it returns, so one fast
/// sender cannot hold the loop (the rest raises no new edge: the caller reads again when
/// told [`ReadOutcome::More`]).
const READ_BUDGET: usize = 1024 * 1024;

/// The largest frame buffer a session keeps for its next frame.
const SCRATCH_KEPT: usize = 4 * 1024;

/// Unanswered pings beyond which the session stops reading from the client until its pongs
/// are written (a client that floods pings and reads nothing must not grow the queue).
pub const MAX_UNSENT_PONGS: u64 = 64 * 1024;

/// What the client sent, as the app sees it.
#[derive(Debug, PartialEq, Eq)]
pub enum WsIncoming {
    /// A whole message.
    Message {
        /// Text (valid UTF-8) or bytes.
        kind: MessageKind,
        /// Its payload, inflated.
        data: Vec<u8>,
    },
    /// The connection is over: the client closed (its code, or 1005 when it gave none), or
    /// broke a rule (the code the server closed with), or went away (1006). Nothing follows.
    Closed {
        /// The close code.
        code: u16,
        /// The reason.
        reason: String,
    },
}

/// How a read ended.
#[derive(Debug, PartialEq, Eq)]
pub enum ReadOutcome {
    /// The socket is drained: the next bytes raise a new readiness edge.
    Drained,
    /// The read budget is spent with bytes possibly left: read again soon.
    More,
    /// The connection is over ([`WsIncoming::Closed`] was given).
    Over,
}

/// A WebSocket connection.
pub struct WsSession {
    conn: Box<Connection>,
    decoder: Decoder,
    /// Bytes read but not yet decoded (a partial header or control frame: small).
    pending: Vec<u8>,
    /// The message being gathered.
    message: Vec<u8>,
    compressed: bool,
    kind: MessageKind,
    inflater: Option<Inflater>,
    deflater: Option<Deflater>,
    /// UTF-8 check of an inflated text message.
    utf8: Utf8Stream,
    max_message_size: u64,
    /// The server sent its close frame.
    close_sent: bool,
    /// The session is over (closed either way, or failed).
    over: bool,
    /// When the client last sent anything (for the keep-alive ping).
    pub last_seen: Instant,
    /// Message bytes this read may still decode (the worker's receive budget: see
    /// [`WsSession::read`]).
    allowance: usize,
    /// A ping was sent and its pong not yet seen.
    pub ping_outstanding: Option<Instant>,
    scratch: Vec<u8>,
}

impl WsSession {
    /// A session on `conn` (its 101 written), whose read buffer may hold the client's first
    /// frames from byte `start` to `end`; `deflate` when permessage-deflate was agreed.
    pub fn new(
        mut conn: Box<Connection>,
        start: usize,
        end: usize,
        deflate: Option<Agreement>,
        max_message_size: u64,
    ) -> WsSession {
        conn.protocol = Protocol::WebSocket;
        let pending = conn.buf[start..end].to_vec();
        // The HTTP read buffer is not needed any more.
        conn.buf = Vec::new();
        conn.filled = 0;
        let decoder = if deflate.is_some() {
            Decoder::with_deflate(max_message_size)
        } else {
            Decoder::new(max_message_size)
        };
        WsSession {
            conn,
            decoder,
            pending,
            message: Vec::new(),
            compressed: false,
            kind: MessageKind::Binary,
            inflater: deflate.as_ref().map(Inflater::new),
            deflater: deflate.as_ref().map(Deflater::new),
            utf8: Utf8Stream::default(),
            max_message_size,
            close_sent: false,
            over: false,
            last_seen: Instant::now(),
            allowance: usize::MAX,
            ping_outstanding: None,
            scratch: Vec::new(),
        }
    }

    /// True once the session is over.
    pub fn is_over(&self) -> bool {
        self.over
    }

    /// True once the server sent its close frame.
    pub fn close_sent(&self) -> bool {
        self.close_sent
    }

    /// Reads what the socket has (up to a budget) and decodes it into `out`, stopping at the
    /// first piece of a message that takes the bytes decoded past `allowance` (the room left
    /// in the worker's receive budget): the rest waits, undecoded or unread, for the next
    /// read ([`ReadOutcome::More`]). A compressed piece inflates whole, so a read may
    /// overshoot `allowance` by one message (`ws_max_message_size`).
    pub fn read(&mut self, out: &mut Vec<WsIncoming>, allowance: usize) -> ReadOutcome {
        if self.over {
            return ReadOutcome::Over;
        }
        self.allowance = allowance;
        // Frames that came with the handshake, or were left by the last read.
        if !self.pending.is_empty() {
            let mut bytes = std::mem::take(&mut self.pending);
            let used = self.decode(&mut bytes, out);
            if self.over {
                return ReadOutcome::Over;
            }
            self.keep_pending(bytes, used);
        }
        let mut taken = 0;
        let mut chunk = vec![0u8; READ_CHUNK];
        loop {
            if taken >= READ_BUDGET || self.allowance == 0 {
                return ReadOutcome::More;
            }
            match self.conn.link().read(&mut chunk) {
                Ok(Some(0)) => {
                    self.finish(out, 1006, "the client went away without a close frame");
                    return ReadOutcome::Over;
                }
                Ok(Some(n)) => {
                    taken += n;
                    self.last_seen = Instant::now();
                    let used = if self.pending.is_empty() {
                        let used = self.decode(&mut chunk[..n], out);
                        if used < n {
                            self.pending.extend_from_slice(&chunk[used..n]);
                        }
                        used
                    } else {
                        self.pending.extend_from_slice(&chunk[..n]);
                        let mut bytes = std::mem::take(&mut self.pending);
                        let used = self.decode(&mut bytes, out);
                        self.keep_pending(bytes, used);
                        used
                    };
                    let _ = used;
                    if self.over {
                        return ReadOutcome::Over;
                    }
                }
                Ok(None) => return ReadOutcome::Drained,
                Err(_) => {
                    self.finish(out, 1006, "the connection failed");
                    return ReadOutcome::Over;
                }
            }
        }
    }

    /// Keeps what `bytes` holds past `used` for the next decode; an empty buffer is freed (the
    /// receive budget charges what it holds, and an idle connection holds nothing).
    fn keep_pending(&mut self, mut bytes: Vec<u8>, used: usize) {
        bytes.drain(..used);
        self.pending = if bytes.is_empty() { Vec::new() } else { bytes };
    }

    /// Decodes from the start of `bytes`; returns the bytes used.
    fn decode(&mut self, bytes: &mut [u8], out: &mut Vec<WsIncoming>) -> usize {
        let mut at = 0;
        while at < bytes.len() && !self.over {
            let (used, event) = match self.decoder.decode(&mut bytes[at..]) {
                Ok(step) => step,
                Err(err) => {
                    self.fail(out, err);
                    return bytes.len();
                }
            };
            at += used;
            match event {
                None if used == 0 => break,
                None => {}
                Some(Event::Data {
                    kind,
                    payload,
                    last,
                    compressed,
                }) => {
                    if let Err(err) = self.on_data(kind, payload, last, compressed, out) {
                        self.fail(out, err);
                        return bytes.len();
                    }
                    if self.allowance == 0 {
                        break;
                    }
                }
                Some(Event::Ping(payload)) => {
                    let mut frame = std::mem::take(&mut self.scratch);
                    frame.clear();
                    encode(&mut frame, Opcode::Pong, payload, true);
                    let _ = self.write(&frame);
                    self.scratch = frame;
                }
                Some(Event::Pong(_)) => self.ping_outstanding = None,
                Some(Event::Close { code, reason }) => {
                    // RFC 6455 5.5.1: answer with a close frame (echoing the code) unless one
                    // was sent; then the server closes the TCP connection.
                    if !self.close_sent {
                        let _ = self.send_close(code.unwrap_or(close_code::NORMAL), "");
                    }
                    self.over = true;
                    out.push(WsIncoming::Closed {
                        code: code.unwrap_or(1005),
                        reason: reason.to_string(),
                    });
                    return bytes.len();
                }
            }
        }
        at
    }

    fn on_data(
        &mut self,
        kind: MessageKind,
        payload: &[u8],
        last: bool,
        compressed: bool,
        out: &mut Vec<WsIncoming>,
    ) -> Result<(), WsError> {
        if self.message.is_empty() {
            self.kind = kind;
            self.compressed = compressed;
        }
        let before = self.message.len();
        if self.compressed {
            let inflater = self.inflater.as_mut().ok_or(WsError {
                code: close_code::PROTOCOL_ERROR,
                reason: "a compressed message without permessage-deflate",
            })?;
            // The limit is the message's, not the piece's: what earlier pieces inflated to
            // counts (a bomb split over many frames or reads stops at the limit too).
            let room = self.max_message_size.saturating_sub(before as u64);
            inflater.inflate(payload, last, &mut self.message, room)?;
            if self.kind == MessageKind::Text && !self.utf8.feed(&self.message[before..]) {
                return Err(WsError {
                    code: close_code::INVALID_PAYLOAD,
                    reason: "a text message that is not UTF-8",
                });
            }
        } else {
            self.message.extend_from_slice(payload);
        }
        self.allowance = self
            .allowance
            .saturating_sub(self.message.len().saturating_sub(before));
        if last {
            if self.compressed && self.kind == MessageKind::Text && !self.utf8.finish() {
                return Err(WsError {
                    code: close_code::INVALID_PAYLOAD,
                    reason: "a text message that is not UTF-8",
                });
            }
            self.utf8 = Utf8Stream::default();
            let data = std::mem::take(&mut self.message);
            out.push(WsIncoming::Message {
                kind: self.kind,
                data,
            });
        }
        Ok(())
    }

    /// The client broke a rule: the server closes with the error's code.
    fn fail(&mut self, out: &mut Vec<WsIncoming>, err: WsError) {
        if !self.close_sent {
            let _ = self.send_close(err.code, err.reason);
        }
        self.finish(out, err.code, err.reason);
    }

    fn finish(&mut self, out: &mut Vec<WsIncoming>, code: u16, reason: &str) {
        if !self.over {
            self.over = true;
            out.push(WsIncoming::Closed {
                code,
                reason: reason.to_string(),
            });
        }
    }

    /// Bytes the session holds of what the client sent: the message being gathered (inflated)
    /// and the bytes read but not decoded (what the worker's receive budget charges).
    pub fn buffered(&self) -> usize {
        self.message.capacity() + self.pending.capacity()
    }

    /// Closes with `code` and reads no more (the worker's receive budget has no room for this
    /// connection): the message being gathered and the bytes not yet decoded are dropped.
    pub fn abandon(&mut self, code: u16, reason: &str) {
        let _ = self.send_close(code, reason);
        self.over = true;
        self.message = Vec::new();
        self.pending = Vec::new();
        self.utf8 = Utf8Stream::default();
    }

    /// Sends a message (compressed when permessage-deflate was agreed and it is worth it:
    /// above 64 bytes).
    pub fn send(&mut self, kind: MessageKind, data: &[u8]) -> io::Result<()> {
        if self.close_sent || self.over {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the WebSocket is closed",
            ));
        }
        let opcode = match kind {
            MessageKind::Text => Opcode::Text,
            MessageKind::Binary => Opcode::Binary,
        };
        let mut frame = std::mem::take(&mut self.scratch);
        frame.clear();
        match self.deflater.as_mut() {
            Some(deflater) if data.len() > 64 => {
                let mut compressed = Vec::with_capacity(data.len() / 2 + 16);
                deflater.deflate(data, &mut compressed);
                encode(&mut frame, opcode, &compressed, true);
                // RSV1 marks the message compressed (RFC 7692 6).
                frame[0] |= 0x40;
            }
            _ => {
                // A small frame goes out in one write: header and payload together.
                encode(&mut frame, opcode, data, true);
            }
        }
        let result = self.write(&frame);
        // A large message's frame is not kept: an idle connection holds no big buffer.
        if frame.capacity() <= SCRATCH_KEPT {
            self.scratch = frame;
        }
        result
    }

    /// Sends the server's close frame (once).
    pub fn send_close(&mut self, code: u16, reason: &str) -> io::Result<()> {
        if self.close_sent {
            return Ok(());
        }
        self.close_sent = true;
        let mut frame = Vec::with_capacity(4 + reason.len());
        encode_close(&mut frame, code, reason);
        self.write(&frame)
    }

    /// Sends a ping (the keep-alive).
    pub fn send_ping(&mut self) -> io::Result<()> {
        let mut frame = Vec::with_capacity(2);
        encode(&mut frame, Opcode::Ping, b"", true);
        self.ping_outstanding = Some(Instant::now());
        self.write(&frame)
    }

    /// Writes `bytes` after whatever is queued: what the socket takes now, the rest queued
    /// for the reactor (uncharged: the caller waits for it when it grows, see
    /// [`WsSession::unsent`]).
    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        let link = self.conn.link();
        let output = self.conn.output();
        let mut written = 0;
        if output.is_empty() {
            while written < bytes.len() {
                match link.write_vectored(&[bytes], written)? {
                    Some(n) => written += n,
                    None => break,
                }
            }
            if written == bytes.len() && !link.wants_write() {
                return Ok(());
            }
        }
        // The rest, if any, or only a TLS backlog the write left: the output notes it.
        output.with(|pending| pending.push(&[bytes], written));
        Ok(())
    }

    /// Bytes queued for the reactor and not yet written.
    pub fn unsent(&mut self) -> u64 {
        let output = self.conn.output();
        if output.is_empty() {
            return 0;
        }
        output.with(|pending| pending.unsent())
    }

    /// Bytes written to the socket so far: a `send` that waits for the client made progress
    /// when this grew.
    pub fn written(&mut self) -> u64 {
        self.conn.output().written()
    }

    /// Writes what the socket takes now of what is queued (a deadline's last look: the
    /// client may have read while the loop was not looking, ADR 0022). An error is left for
    /// the poller's event to report.
    pub fn write_pending(&mut self) {
        let _ = self.conn.output().write_some();
    }

    /// Runs `action` once what is queued now is written (see [`crate::pending::Pending::when_written`]).
    pub fn when_written(&mut self, action: crate::pending::WhenWritten) {
        self.conn
            .output()
            .with(|pending| pending.when_written(action));
    }

    /// The connection, to give back to the reactor, which writes what is queued and closes
    /// it, lingering until the client closes its side (or `linger_timeout`; a WebSocket
    /// connection always ends so: `Connection::next`).
    pub fn into_connection(self) -> Box<Connection> {
        self.conn
    }
}

#[cfg(test)]
mod budget_tests;
#[cfg(test)]
mod tls_tests;
