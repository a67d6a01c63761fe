//! One client connection and its protocol's state: the state machine every MPM drives.
//!
//! ```text
//! Http1: [ProxyHeader] --PROXY header parsed--> [handshake] [Preface] Head --head complete--> [Body] --> (served in Head)
//!        Preface --HTTP/2's preface, or ALPN h2--> (taken apart for an H2Conn: `reactor::h2`)
//!        served --kept--> Head (the next request; pipelined bytes kept)
//!               --ends--> Closing(linger) --output written--> closed
//!        served with a 101 --> WebSocket --session over--> closed (lingering)
//! ```
//! Who holds the connection meanwhile (the poller under a timer, a slot, the loop writing or
//! lingering) is the reactor's entry (`reactor::entries`); a slot's exchange holds only the
//! parts the connection lends it ([`Lent`], ADR 0018), not the connection. `Connection::next`
//! is the one place that decides what follows a served request, for the slot and the loop
//! (after `Connection::take_back` applied the exchange's outcome). On every MPM
//! the loop reads request bodies before dispatch (`Body`, into the [`ParkedBody`] the
//! connection carries; `reactor::body`), except on `stream_body_paths`, and finishes response
//! output the slot left [`Output`] pending (ADR 0009).
//! MPMs decide who runs a connection and when; this module and `exchange` decide how HTTP works.
//!
//! TLS (ADR 0030): a TLS transport's reads run the handshake themselves, returning nothing
//! until it is done, so its handshake happens where partial heads wait (`Phase::Head`, parked
//! in the poller under the header timeout, never in a slot) and its time counts from its first
//! byte ([`crate::tls::conn::TlsConn::started`]) against the header deadline the first head
//! shares. A PROXY header before it is read raw, in plaintext, and the bytes after it are the
//! ClientHello's start, handed to the session ([`crate::tls::conn::TlsConn::feed`]). A plain
//! HTTP request on a TLS port is [`Readiness::PlainHttpOnTls`]; a handshake that fails,
//! [`Readiness::HandshakeFailed`]. What comes before the first head is in `preface`.

use std::io;
use std::os::fd::RawFd;
use std::time::Instant;

use tines_proto::{parse_request_head, HeadStatus, Limits, ParseError, ProxyError, RequestHead};

use crate::listener::Peer;
use crate::parked_body::ParkedBody;

mod choose;
mod lent;
mod preface;

use crate::pending::Output;
use crate::spool::INITIAL_BUFFER;
use crate::transport::{Link, Transport};
pub use choose::Http2Choice;
pub use lent::Lent;
use std::sync::Arc;

/// What the bytes of a connection mean, chosen at run time: HTTP/1.1 from its first byte, a
/// WebSocket once a 101 switched it. An HTTP/2 connection leaves `Connection` once its
/// preface or ALPN chose it (`Connection::into_h2`); each of its streams is then a
/// `Connection` speaking HTTP/1.1 over `Transport::H2` (ADR 0035). Where
/// the connection is in the loop's hands is the reactor's entry; this is the protocol's side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.1 exchanges one after another; the current one at this phase.
    Http1(Phase),
    /// A WebSocket session holds the connection (`websocket::WsSession`); given back, it
    /// closes once what the session queued is written.
    WebSocket,
}

/// Where an HTTP/1.1 connection's current exchange is. A slot's exchange runs while the
/// connection is in `Head` (its head was complete); the slot's `Exchange::complete` decides
/// whether the next one begins (back to `Head`, keeping pipelined bytes) or the connection
/// ends (`Closing`). Which of the loop's timers applies is the reactor's entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// `proxy_protocol`: waiting for (the rest of) the PROXY header that must come before the
    /// first request head, under the header timeout (the header and the first head share one
    /// deadline).
    ProxyHeader,
    /// A listener that may speak HTTP/2 (h2c, or ALPN on TLS): waiting for the first bytes
    /// (or the handshake) that tell which, under the header timeout (`choose`).
    Preface,
    /// Waiting for (the rest of) a request head, idle between requests, or (its head
    /// complete) being served.
    Head,
    /// The head is complete and the loop reads the body before dispatch (into the
    /// connection's [`ParkedBody`], `reactor::body`).
    Body,
    /// The last response ends the connection: once its output is written, it closes,
    /// lingering as said.
    Closing(Linger),
}

/// What follows a served request (or a response the loop finished writing) on a connection:
/// [`Connection::next`], the one place that decides it, for the slot and the loop alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Response output waits: the loop writes it first, then asks again.
    Write,
    /// The connection ends: close, lingering as said.
    Close(Linger),
    /// Bytes of a next request are buffered: parse them (a pipelined head may be whole).
    Parse,
    /// Nothing is buffered, but the socket may hold more bytes (or an EOF) that no new edge
    /// will announce: read before parking.
    Read,
    /// Nothing is buffered, the socket was drained and the peer has not shut its side: wait
    /// in the poller.
    Park,
}

/// What reading a readable connection produced.
#[derive(Debug)]
pub enum Readiness {
    /// A whole request head is buffered and parsed: hand the connection to a slot.
    HeadComplete,
    /// More bytes are needed; park it again (the socket was drained).
    Pending,
    /// The peer closed or the socket failed: drop the connection.
    Closed,
    /// The head is malformed or over a limit: answer with the error's status and close.
    Rejected(ParseError),
    /// `proxy_protocol`: the connection did not begin with a valid PROXY header. Close it
    /// without a response: the peer speaks the PROXY protocol (or is not the proxy), not HTTP.
    BadProxyHeader(ProxyError),
    /// A TLS connection began with a plain HTTP request: answer the plain-text 400 that says
    /// so, raw (the client speaks no TLS), and close.
    PlainHttpOnTls,
    /// A TLS connection's handshake failed (rustls' reason; its alert, if any, is written):
    /// close it, and log the reason.
    HandshakeFailed(io::Error),
    /// The connection speaks HTTP/2 (its preface, or ALPN's `h2`): the loop makes it an
    /// HTTP/2 connection ([`Connection::into_h2`]; the bytes read so far are buffered).
    Http2,
}

/// Whether a connection the server closes after its response must linger first (a lingering
/// close, `reactor::linger`): closing with unread input makes the kernel answer the client's
/// next bytes with a reset, which can destroy responses it has not read yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Linger {
    /// Close at once: the client has nothing more to send.
    No,
    /// The request (head or body) was not read to its end, so the client may still be
    /// uploading: drain until it closes or `linger_timeout`.
    UntilEof,
    /// The server ended a connection the client wanted kept (the keep-alive limit, a stop,
    /// an error): pipelined requests may be on their way. Drain until the client closes,
    /// until everything sent is acknowledged, or `linger_timeout`.
    UntilAcknowledged,
}

/// A client connection: its shell (transport, protocol, readiness), and the parts it lends
/// each of its exchanges in turn ([`Lent`]).
///
/// The loop and the slot reach the parts' fields through `Deref` (`conn.buf`, `conn.head`):
/// they are the connection's own while no exchange holds them. A connection whose parts are
/// lent is held only by the one slot serving it (or the ASGI bridge's table), which touches
/// its shell alone: its parts are then a vacant stand-in, never read.
pub struct Connection {
    /// What it lends its exchanges; while one holds them (between [`Connection::lend`] and
    /// [`Connection::take_back`]), a vacant set the slot keeps for the purpose stands in
    /// (no `Option` to check at each of the loop's reads, no allocation per request).
    /// Declared first so it drops before the transport: the output must be closed before
    /// the fd is (see `Lent`'s `Drop`).
    parts: Box<Lent>,
    /// What carries its bytes; every read and write goes through it ([`Connection::link`]).
    transport: Transport,
    /// What its bytes mean, and where the current exchange is (see [`Protocol`]).
    pub protocol: Protocol,
    /// When the first byte of the current head arrived (header timeout), if any has.
    pub head_started: Option<Instant>,
    /// The poller saw the peer shut its side ([`Connection::note_peer_closed`]).
    peer_closed: bool,
    /// The current request's body while the loop reads it before dispatch (`Phase::Body`);
    /// the exchange takes it over at dispatch (memory charge, temporary file).
    pub(crate) parked_body: Option<Box<ParkedBody>>,
    /// How its protocol is chosen before its first request (set at accept; `choose`).
    choice: Http2Choice,
}

impl std::ops::Deref for Connection {
    type Target = Lent;

    #[inline]
    fn deref(&self) -> &Lent {
        &self.parts
    }
}

impl std::ops::DerefMut for Connection {
    #[inline]
    fn deref_mut(&mut self) -> &mut Lent {
        &mut self.parts
    }
}

/// How an exchange ended, for its connection ([`Connection::take_back`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The connection serves a next request; `leftover`, bytes past this one in the read
    /// buffer, are the start of it (pipelined).
    Keep { leftover: std::ops::Range<usize> },
    /// The connection ends once its output is written, lingering as said.
    Close(Linger),
}

impl Connection {
    /// Wraps a freshly accepted, non-blocking socket that must begin with a PROXY header
    /// (`proxy_protocol`; the caller checked that the peer is a trusted proxy).
    pub fn behind_proxy(transport: Transport, peer: Peer, listener: usize) -> Box<Self> {
        let mut conn = Connection::new(transport, peer, listener);
        conn.protocol = Protocol::Http1(Phase::ProxyHeader);
        conn
    }

    /// Wraps a freshly accepted, non-blocking socket.
    ///
    /// On the heap: a connection moves between the loop's table, the slot and the exchange
    /// several times per request, and moving a pointer instead of the struct (about 250
    /// bytes, a `memcpy` call each time) saved about 800 instructions of a 18,500-instruction
    /// hello-world request.
    pub fn new(transport: Transport, peer: Peer, listener: usize) -> Box<Self> {
        Box::new(Connection {
            parts: Lent::vacant(transport.link(), peer, listener),
            transport,
            protocol: Protocol::Http1(Phase::Head),
            head_started: None,
            peer_closed: false,
            parked_body: None,
            choice: Http2Choice::No,
        })
    }

    /// Has the poller watch this connection from now on, if it does not yet (whoever holds
    /// it: the loop before it parks it, writes for it or lingers; a slot before it leaves
    /// output for the poller to finish).
    pub(crate) fn watch(&mut self) -> io::Result<()> {
        Lent::watch(self)
    }

    /// The body the loop reads before dispatch and the parts it reads it into, borrowed
    /// together.
    pub(crate) fn parked_and_parts(&mut self) -> (Option<&mut ParkedBody>, &mut Lent) {
        (self.parked_body.as_deref_mut(), &mut self.parts)
    }

    /// Lends the connection's parts to the exchange of the request whose head it holds
    /// (`Exchange::new`), `vacant` standing in; the connection keeps its shell until
    /// [`Connection::take_back`].
    #[inline]
    pub(crate) fn lend(&mut self, mut vacant: Box<Lent>) -> Box<Lent> {
        vacant.link = self.link();
        std::mem::replace(&mut self.parts, vacant)
    }

    /// Takes back the parts an exchange held (see [`Connection::take_back`]; alone, when the
    /// connection leaves HTTP/1.1 for a WebSocket), returning the vacant set that stood in.
    #[inline]
    pub(crate) fn restore(&mut self, parts: Box<Lent>) -> Box<Lent> {
        std::mem::replace(&mut self.parts, parts)
    }

    /// Takes back the parts an exchange held, with how it ended: a kept connection begins
    /// its next request (see [`Connection::next_request`]); one that ends closes once its
    /// output is written, lingering as said. Returns the connection, `None` when it closes at
    /// once (nothing to write, nothing to linger for), and the vacant set that stood in.
    #[inline]
    pub(crate) fn take_back(
        mut self: Box<Self>,
        parts: Box<Lent>,
        outcome: Outcome,
        max_head_size: usize,
    ) -> (Option<Box<Self>>, Box<Lent>) {
        let vacant = self.restore(parts);
        let kept = match outcome {
            Outcome::Keep { leftover } => {
                self.next_request(leftover, max_head_size);
                Some(self)
            }
            Outcome::Close(linger) if !self.has_pending_output() && linger == Linger::No => None,
            // An HTTP/2 stream never lingers (ADR 0035): closed at once, or once its
            // response's output is written (dropping it ends the stream).
            Outcome::Close(_) if self.link().is_h2() => {
                if !self.has_pending_output() {
                    return (None, vacant);
                }
                self.close_after_response(Linger::No);
                Some(self)
            }
            Outcome::Close(linger) => {
                // The loop writes the rest (if any), then closes, lingering if the client
                // may still be sending (reactor::linger).
                self.close_after_response(linger);
                Some(self)
            }
        };
        (kept, vacant)
    }

    /// The socket's fd, for the poller and the scoreboard: reads and writes go through
    /// [`Connection::link`].
    pub fn fd(&self) -> RawFd {
        self.transport.fd()
    }

    /// The handle every read and write of this connection goes through (its transport's).
    #[inline]
    pub fn link(&self) -> Link {
        self.transport.link()
    }

    /// The current request's parsed head.
    pub fn head(&self) -> &RequestHead {
        &self.head
    }

    /// The read buffer (the head's spans index into it).
    pub fn buffer(&self) -> &[u8] {
        &self.buf[..self.filled]
    }

    /// True when no byte of a next request has arrived (an idle keep-alive connection).
    pub fn is_idle(&self) -> bool {
        self.filled == 0
    }

    /// True between requests on a kept-alive connection (it served one, and no byte of the
    /// next has arrived). A stopping worker keeps these until `drain_timeout`; a new connection that has sent
    /// nothing yet is not idle: it gets the header timeout.
    pub fn is_idle_keepalive(&self) -> bool {
        self.served > 0 && self.filled == 0
    }

    /// The poller saw bytes arrive while someone else held the connection: the socket may
    /// hold more than the buffer, and no new edge will say so. Reading (before the connection
    /// is parked) finds out.
    pub(crate) fn note_arrival(&mut self) {
        self.maybe_more = true;
    }

    /// The poller reported the peer's FIN (`EPOLLRDHUP`). It raised no edge of its own when it
    /// came with the last bytes read, which a short read leaves unseen: the connection reads
    /// to EOF before it is parked, or it would wait for an edge that never comes (until the
    /// keep-alive timeout).
    pub(crate) fn note_peer_closed(&mut self) {
        self.peer_closed = true;
    }

    /// What follows the request just served, or the response just written (see [`Next`]):
    /// output first, then the end of a connection that ends, then a next request's bytes.
    #[inline]
    pub(crate) fn next(&self) -> Next {
        if self.has_pending_output() {
            return Next::Write;
        }
        match self.protocol {
            Protocol::Http1(Phase::Closing(linger)) => Next::Close(linger),
            // RFC 6455 7.1.1 has the server close TCP first, and a client still sending (its
            // close frame, or the rest of a message that broke a limit) must get the close
            // frame, not a reset: linger until it closes its side.
            Protocol::WebSocket => Next::Close(Linger::UntilEof),
            Protocol::Http1(_) if self.filled > 0 => Next::Parse,
            Protocol::Http1(_) if self.drained() => Next::Park,
            Protocol::Http1(_) => Next::Read,
        }
    }

    /// True when the connection can be parked without reading first: nothing is buffered, the
    /// socket was drained by the last read (any later bytes raise a new edge), and the peer
    /// has not shut its side.
    pub(crate) fn drained(&self) -> bool {
        self.filled == 0 && !self.maybe_more && !self.peer_closed
    }

    /// The response being written ends the connection (`how`: whether it lingers first).
    pub(crate) fn close_after_response(&mut self, how: Linger) {
        self.protocol = Protocol::Http1(Phase::Closing(how));
    }

    /// True while the loop reads the current request's body before dispatch.
    pub(crate) fn reads_body(&self) -> bool {
        self.protocol == Protocol::Http1(Phase::Body)
    }

    /// The loop starts reading the current request's body before dispatch, into `body`.
    pub(crate) fn park_body(&mut self, body: Box<ParkedBody>) {
        self.protocol = Protocol::Http1(Phase::Body);
        self.parked_body = Some(body);
    }

    /// The body read before dispatch is whole: the request is ready to be served.
    pub(crate) fn body_read(&mut self) {
        self.protocol = Protocol::Http1(Phase::Head);
    }

    /// Reads what the socket has (until it would block, the buffer holds a whole head, or the
    /// head limit is reached) and parses. Must be called when the poller reports the fd
    /// readable, and before parking a connection (edge-triggered readiness).
    pub fn on_readable(&mut self, limits: &Limits) -> Readiness {
        if self.protocol == Protocol::Http1(Phase::ProxyHeader) {
            if let Link::Tls(tls) = self.link {
                if let Some(readiness) = self.read_proxy_header_before_tls(tls.conn()) {
                    return readiness;
                }
            }
        }
        if self.filled > 0 {
            // Pipelined bytes may already hold a whole head.
            match self.parse(limits) {
                Readiness::Pending => {}
                other => return other,
            }
        }
        let cap = limits.max_head_size + 1;
        // The buffered bytes were parsed and hold only part of a head.
        let mut partial = false;
        loop {
            if self.buf.is_empty() {
                self.buf.resize(INITIAL_BUFFER, 0);
            }
            if self.filled == self.buf.len() {
                if self.buf.len() >= cap {
                    // Full up to the limit: the parser reports 431 or 414, unless taking the
                    // PROXY header off the front made room.
                    match self.parse(limits) {
                        Readiness::Pending if self.filled < self.buf.len() => continue,
                        other => return other,
                    }
                }
                let grown = (self.buf.len() * 2).min(cap).max(self.filled + 1);
                self.buf.resize(grown, 0);
            }
            let space = self.buf.len() - self.filled;
            let parts = &mut **self;
            match parts.link.read(&mut parts.buf[parts.filled..]) {
                Ok(Some(0)) => {
                    // The peer half-closed (or closed). A whole head it sent first is still
                    // served, and read for EOF again before parking (no new edge will come);
                    // a partial head can never complete.
                    self.maybe_more = true;
                    return match self.parse(limits) {
                        Readiness::Pending => Readiness::Closed,
                        other => other,
                    };
                }
                Ok(Some(n)) => {
                    if self.head_started.is_none() {
                        // The bytes came before the loop woke (or the last response ended).
                        self.head_started = Some(crate::clock::recent());
                    }
                    self.filled += n;
                    self.received += n as u64;
                    self.maybe_more = n == space;
                    partial = false;
                    if n < space {
                        // A short read drained the socket: the next arrival raises a new edge.
                        // But an EOF that came with these bytes raised none of its own, so a
                        // partial head reads once more to see it.
                        match self.parse(limits) {
                            Readiness::Pending => partial = true,
                            other => return other,
                        }
                    }
                }
                Ok(None) => {
                    self.maybe_more = false;
                    if self.head_started.is_none() && self.served == 0 {
                        if let Link::Tls(tls) = self.link {
                            // A handshake in progress (its reads give nothing yet): the
                            // header deadline counts from the ClientHello's first byte.
                            self.head_started = tls.conn().started();
                        }
                    }
                    if partial {
                        return Readiness::Pending;
                    }
                    return self.parse(limits);
                }
                Err(err) => return Self::read_failed(err),
            }
        }
    }

    /// The body read so far: when reading began, the raw bytes received, when bytes last came
    /// (for the body deadlines while it is parked).
    pub(crate) fn body_progress(&self) -> Option<(Instant, u64, Instant)> {
        self.parked_body
            .as_ref()
            .map(|body| (body.started, body.received, body.last_progress))
    }

    /// Takes the read buffer of a connection that holds no bytes (to reuse it elsewhere while
    /// the connection idles: an idle connection keeps no buffer).
    pub(crate) fn take_idle_buffer(&mut self) -> Option<Vec<u8>> {
        (self.filled == 0 && self.buf.len() == INITIAL_BUFFER)
            .then(|| std::mem::take(&mut self.buf))
    }

    /// Gives a connection without a buffer a recycled one.
    pub(crate) fn give_buffer(&mut self, buf: Vec<u8>) {
        if self.buf.is_empty() {
            self.buf = buf;
        }
    }

    /// True when response output waits to be written (no lock taken).
    pub fn has_pending_output(&self) -> bool {
        Lent::has_pending_output(self)
    }

    /// The shared output, created on first use.
    pub(crate) fn output(&mut self) -> &Arc<Output> {
        Lent::output(self)
    }

    fn parse(&mut self, limits: &Limits) -> Readiness {
        if self.protocol != Protocol::Http1(Phase::Head) {
            if let Some(readiness) = self.before_first_head() {
                return readiness;
            }
        }
        if self.filled == 0 {
            return Readiness::Pending;
        }
        let parts = &mut **self;
        match parse_request_head(&parts.buf[..parts.filled], limits, &mut parts.head) {
            Ok(HeadStatus::Complete) => Readiness::HeadComplete,
            Ok(HeadStatus::Partial) => Readiness::Pending,
            Err(err) => Readiness::Rejected(err),
        }
    }

    /// Ends the current request: keeps the `leftover` bytes (the start of a pipelined next
    /// request) at the front of the buffer.
    ///
    /// A buffer a body kept in memory grew (its charge against `request_buffer_total` ends
    /// with the exchange) is not kept: what the next request needs is at most a head
    /// (`max_head_size` + 1 bytes), so the leftover moves into a fresh small buffer, and with
    /// no leftover the buffer is freed (an idle connection keeps none).
    pub(crate) fn next_request(&mut self, leftover: std::ops::Range<usize>, max_head_size: usize) {
        let len = leftover.len();
        let needed = INITIAL_BUFFER.max(max_head_size + 1);
        if len == 0 && self.buf.len() > INITIAL_BUFFER {
            // A large head or a body grew the buffer: give the memory back while idle.
            self.buf = Vec::new();
        } else if self.buf.len() > needed {
            let mut fresh = vec![0; INITIAL_BUFFER.max(len)];
            fresh[..len].copy_from_slice(&self.buf[leftover]);
            self.buf = fresh;
        } else if len > 0 {
            self.buf.copy_within(leftover, 0);
        }
        self.filled = len;
        self.head.clear();
        self.served += 1;
        self.head_started = if len > 0 {
            Some(crate::clock::recent())
        } else {
            None
        };
        self.parked_body = None;
    }

    /// Writes a complete error response without waiting (best effort: the connection is
    /// closed right after, so a client that is not reading simply loses it).
    pub fn reject(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.link()
            .write_all_from(&[bytes], 0, std::time::Duration::from_millis(0))
            .or(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;

    fn connection() -> (Box<Connection>, UnixStream) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        (
            Connection::new(Transport::Plain(OwnedFd::from(ours)), Peer::Unix, 0),
            theirs,
        )
    }

    #[test]
    fn what_follows_a_served_request_is_decided_by_the_connection_s_state_in_one_order() {
        let (mut conn, _peer) = connection();
        assert_eq!(conn.next(), Next::Park, "nothing buffered, socket drained");
        conn.note_arrival();
        assert_eq!(conn.next(), Next::Read, "an edge came while a slot held it");
        conn.buf = vec![0; INITIAL_BUFFER];
        conn.filled = 3;
        assert_eq!(conn.next(), Next::Parse, "a pipelined request's bytes");
        conn.close_after_response(Linger::UntilAcknowledged);
        assert_eq!(
            conn.next(),
            Next::Close(Linger::UntilAcknowledged),
            "a connection that ends is closed, whatever is buffered"
        );
        conn.output().with(|pending| pending.push(&[b"unsent"], 0));
        assert_eq!(conn.next(), Next::Write, "output is written first");
        conn.output().discard();
        conn.protocol = Protocol::WebSocket;
        assert_eq!(conn.next(), Next::Close(Linger::UntilEof));
    }

    #[test]
    fn a_connection_takes_back_its_lent_parts_and_applies_how_the_exchange_ended() {
        let (mut conn, _peer) = connection();
        let vacant = Lent::vacant(conn.link(), Peer::Unix, 0);
        let stand_in: *const Lent = &*vacant;
        let mut parts = conn.lend(vacant);
        assert!(std::ptr::eq(&**conn, stand_in), "the vacant set stands in");
        parts.buf = vec![0; INITIAL_BUFFER];
        parts.buf[100..103].copy_from_slice(b"GET");
        parts.filled = 103;
        let keep = Outcome::Keep { leftover: 100..103 };
        let (kept, vacant) = conn.take_back(parts, keep, 32 * 1024);
        assert!(
            std::ptr::eq(&*vacant, stand_in),
            "the vacant set is given back"
        );
        let mut conn = kept.expect("a kept connection");
        assert_eq!(
            conn.buffer(),
            b"GET",
            "the pipelined bytes begin the next request"
        );
        assert_eq!(conn.served, 1);
        assert_eq!(conn.protocol, Protocol::Http1(Phase::Head));

        let parts = conn.lend(vacant);
        let (kept, vacant) = conn.take_back(parts, Outcome::Close(Linger::UntilEof), 32 * 1024);
        let mut conn = kept.expect("a connection that lingers is kept until it closes");
        assert_eq!(conn.next(), Next::Close(Linger::UntilEof));

        conn.protocol = Protocol::Http1(Phase::Head);
        let mut parts = conn.lend(vacant);
        parts.output().with(|pending| pending.push(&[b"unsent"], 0));
        let (kept, vacant) = conn.take_back(parts, Outcome::Close(Linger::No), 32 * 1024);
        let mut conn = kept.expect("a connection with output left is kept until written");
        assert_eq!(conn.next(), Next::Write);
        conn.output().discard();

        let parts = conn.lend(vacant);
        let (kept, _) = conn.take_back(parts, Outcome::Close(Linger::No), 32 * 1024);
        assert!(
            kept.is_none(),
            "nothing to write or linger for: closed at once"
        );
    }

    #[test]
    fn a_buffer_grown_for_a_body_is_not_kept_for_the_next_request_s_first_bytes() {
        let (mut conn, _peer) = connection();
        let max_head_size = 32 * 1024;
        // Head, a 250 KiB body kept in memory, then one byte of the next head.
        conn.buf = vec![b'b'; 300 * 1024];
        conn.buf[290 * 1024] = b'G';
        conn.filled = 290 * 1024 + 1;
        conn.next_request(290 * 1024..290 * 1024 + 1, max_head_size);
        assert_eq!(conn.buffer(), b"G");
        assert!(
            conn.buf.capacity() <= max_head_size + 1,
            "{}",
            conn.buf.capacity()
        );
    }

    #[test]
    fn a_buffer_grown_for_a_body_is_freed_when_nothing_follows_the_request() {
        let (mut conn, _peer) = connection();
        conn.buf = vec![0; 300 * 1024];
        conn.filled = 300 * 1024;
        conn.next_request(300 * 1024..300 * 1024, 32 * 1024);
        assert!(conn.is_idle());
        assert_eq!(conn.buf.capacity(), 0);
    }

    #[test]
    fn a_buffer_of_the_usual_size_is_reused_for_pipelined_bytes() {
        let (mut conn, _peer) = connection();
        conn.buf = vec![0; INITIAL_BUFFER];
        conn.buf[100..103].copy_from_slice(b"GET");
        conn.filled = 103;
        let before = conn.buf.as_ptr();
        conn.next_request(100..103, 32 * 1024);
        assert_eq!(conn.buffer(), b"GET");
        assert_eq!(conn.buf.as_ptr(), before);
    }
}
