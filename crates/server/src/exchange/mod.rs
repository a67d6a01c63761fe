//! One request/response exchange served by a slot: the [`Exchange`] type, its states and its
//! life cycle (made from a connection whose head is complete, which lends it its parts, ended
//! by `Exchange::complete`, which gives them back with how the exchange ended).
//!
//! An exchange holds what the connection lends it ([`Lent`]: the request head and the bytes
//! it indexes, the connection's side of the body source, the output sink), never the
//! connection: its transport, protocol phase and readiness stay with whoever holds the
//! connection meanwhile (the slot, or the ASGI bridge's table), so an HTTP/2 stream can provide
//! the same three without a connection of its own (ADR 0018).
//!
//! The app (through [`crate::App::serve`]) reads the request body and writes the response
//! through this type; it never sees the socket. It enforces HTTP/1.1 framing; each idea has
//! its own file: `body` (request body decoding, `100 Continue`, reading and its deadlines),
//! `response` (the head, the response framing, the app's Content-Length honoured exactly),
//! `send` (how the bytes reach the socket: at once, or handed to the poller),
//! `keepalive` (whether the connection is kept, draining an unread body) and `timeout` (a
//! request the master judged timed out: its 503, paid once), `wire` (which queued bytes of a
//! response the poller finishes are body, for its access-log line). One write per
//! response where possible: the head and small bodies are gathered in the slot's output buffer
//! and sent with one `sendmsg`.
//!
//! It must not watch sockets for readiness (the reactor does) nor know which MPM runs it.

use std::net::IpAddr;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tines_proto::response::ResponseFraming;
use tines_proto::{BodyFraming, ChunkedDecoder, RequestHead, Version};

use crate::access_log::{DeferredLine, LoggedRequest, LoggedTls, Protocol, RequestLine};
use crate::connection::{Connection, Lent, Linger, Outcome};
use crate::listener::{Local, Peer};
use crate::parked_body::Stored;
use crate::scoreboard::Counted;
use crate::shared::WorkerShared;
use crate::spool::{Held, SpoolFile};
use crate::tls::TlsInfo;

mod body;
mod compressing;
mod context;
mod keepalive;
mod response;
mod send;
mod timeout;
mod wire;

pub use compressing::{BlockEnd, EncoderLoan};
pub use context::{SlotContext, OUT_BUFFER_LIMIT};
pub use response::ResponseError;
pub(crate) use timeout::pay_owed;

/// How much of the request body is left to read.
#[derive(Debug)]
enum Body {
    /// No body, or it has been read to its end.
    Done,
    /// `Content-Length` bytes still to read, from the socket (after what is buffered).
    Length(u64),
    /// `Content-Length` bytes still to read, all in the read buffer already (the loop read
    /// the body before dispatch, or it came with the head): what the app leaves unread is
    /// dropped for free, whatever its size (`max_body_drain` bounds only bodies still in the
    /// socket).
    Buffered(u64),
    /// A chunked body being decoded.
    Chunked(ChunkedDecoder),
    /// A body the loop read before dispatch into a temporary file, read from `offset`.
    Spooled { file: SpoolFile, offset: u64 },
    /// Reading failed (timeout, early EOF, bad chunk): the connection must close.
    Failed,
}

/// Where `Expect: 100-continue` stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Continue {
    /// No `Expect: 100-continue`, or it was answered.
    Settled,
    /// The client waits for `100 Continue` before sending the body.
    Pending,
}

/// How far the response has gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// No response head yet.
    NotStarted,
    /// The head is encoded in the output buffer, nothing written to the socket.
    Buffered,
    /// Bytes have reached the socket: the status can no longer change.
    Committed,
    /// The response is complete (or abandoned).
    Finished,
}

/// One request being served.
pub struct Exchange {
    /// What the connection lent: the request head and its bytes, the body source's and the
    /// output sink's connection-side state (given back at `complete`).
    parts: Box<Lent>,
    ctx: Box<SlotContext>,
    shared: Arc<WorkerShared>,
    body: Body,
    /// Undecoded body bytes in `parts.buf`.
    raw: Range<usize>,
    /// Decoded body bytes in `parts.buf`, ready for the app.
    avail: Range<usize>,
    expect: Continue,
    phase: Phase,
    framing: ResponseFraming,
    declared: Option<u64>,
    body_sent: u64,
    status: u16,
    keep_alive: bool,
    is_head: bool,
    /// Decoded chunked-body bytes so far (for `max_body_size`).
    chunked_received: u64,
    /// When the first body read started, and the raw body bytes read from the socket since
    /// (for `body_min_rate`).
    body_started: Option<Instant>,
    body_received: u64,
    /// The status the request's own fault calls for (413, 400, 408), when reading its body
    /// failed because of it; the app layer answers with it instead of 500.
    fault: Option<u16>,
    /// The request was counted in the scoreboard ([`Exchange::count_request`]).
    counted: bool,
    /// This thread claimed the response ([`Exchange::claim_response`]): its bytes may go out.
    response_claimed: bool,
    /// The master judged the request timed out before its response was claimed: nothing of
    /// it is written, counted or logged (the 503 is, by whoever pays it, `timeout`).
    timed_out: bool,
    /// Bytes of the response were handed to the poller to write after the exchange (not a
    /// small response queued for the slot's batch): its access-log line waits for them.
    handed_over: bool,
    /// When the slot took the request.
    pub started: Instant,
    /// The response was begun with its body's length known up front (a WSGI list or tuple):
    /// the whole body exists already, so what the socket does not take goes to the response
    /// store (memory, then a spill file) rather than holding the slot (`exchange::send`).
    complete_body: bool,
    /// The response must close the connection (an error response from [`Exchange::fail`]):
    /// the head then says `Connection: close` (RFC 9112 9.6).
    must_close: bool,
    /// The charge against `request_buffer_total` of a body the loop read into memory before
    /// dispatch: given back when the exchange ends.
    _body_charge: Option<Held>,
    /// The decoded length of a chunked body the loop read before dispatch (the app sees it
    /// as `CONTENT_LENGTH`).
    decoded_length: Option<u64>,
    /// The response body's encoder while it is compressed (ADR 0037): made only then.
    compressing: Option<Box<compressing::Compressing>>,
    /// The response is never compressed ([`Exchange::keep_identity`]).
    keep_identity: bool,
    /// Compressed body bytes framed for the socket (`None`: the body is not compressed):
    /// what the access log shows as the bytes sent, as nginx's `$body_bytes_sent`, while
    /// `body_sent` stays the app's bytes (the Content-Length accounting).
    coded_sent: Option<u64>,
    /// Which of the response's bytes on the wire are body (read only once it is handed
    /// over): the deferred access-log line takes only the body's unsent bytes off.
    wire: wire::WireMap,
}

impl Exchange {
    /// The exchange for the request whose head `conn` holds: `conn` lends it its parts (and
    /// the body the loop read before dispatch, if any) until `complete`. Boxed: it travels
    /// by move through the app layer (into `wsgi.input` and back), and moving its ~600 bytes
    /// by value at each step cost about 0.3 µs per request in `memmove` (perf, hello
    /// keep-alive).
    pub(crate) fn new(
        conn: &mut Connection,
        mut ctx: Box<SlotContext>,
        shared: Arc<WorkerShared>,
        started: Instant,
    ) -> Box<Exchange> {
        let parked_body = conn.parked_body.take();
        let vacant = ctx
            .vacant
            .take()
            .unwrap_or_else(|| Lent::vacant(conn.link(), conn.peer, conn.listener));
        let parts = conn.lend(vacant);
        let head_len = parts.head.head_len;
        let mut body_charge = None;
        let mut decoded_length = None;
        // Read before dispatch (the loop sent any `100 Continue`), or streamed from the socket.
        let mut read_ahead = parked_body.is_some();
        let body = match parked_body.map(|parked| parked.finish()) {
            Some(finished) => {
                decoded_length = finished.chunked.then_some(finished.length);
                match finished.stored {
                    Stored::Memory(held) => {
                        body_charge = Some(held);
                        match finished.length {
                            0 => Body::Done,
                            n => Body::Buffered(n),
                        }
                    }
                    Stored::File(file) => Body::Spooled { file, offset: 0 },
                }
            }
            None => match parts.head.body {
                BodyFraming::None | BodyFraming::Length(0) => Body::Done,
                BodyFraming::Length(n) => {
                    // Whole in the read buffer already (it came with the head).
                    read_ahead = (parts.filled - head_len) as u64 >= n;
                    if read_ahead {
                        Body::Buffered(n)
                    } else {
                        Body::Length(n)
                    }
                }
                BodyFraming::Chunked => {
                    Body::Chunked(ChunkedDecoder::new(shared.config.limits.max_head_size))
                }
            },
        };
        let expect = if parts.head.expect_continue && !matches!(body, Body::Done) && !read_ahead {
            Continue::Pending
        } else {
            Continue::Settled
        };
        let is_head = parts.head.method_is(&parts.buf, b"HEAD");
        let raw = head_len..parts.filled;
        Box::new(Exchange {
            parts,
            ctx,
            shared,
            body,
            raw,
            avail: head_len..head_len,
            expect,
            phase: Phase::NotStarted,
            framing: ResponseFraming::NoBody,
            declared: None,
            body_sent: 0,
            status: 0,
            keep_alive: false,
            is_head,
            chunked_received: 0,
            body_started: None,
            body_received: 0,
            fault: None,
            counted: false,
            response_claimed: false,
            timed_out: false,
            handed_over: false,
            started,
            complete_body: false,
            must_close: false,
            _body_charge: body_charge,
            decoded_length,
            compressing: None,
            keep_identity: false,
            coded_sent: None,
            wire: wire::WireMap::default(),
        })
    }

    /// The parsed request head (spans index into [`Exchange::buffer`]).
    pub fn head(&self) -> &RequestHead {
        &self.parts.head
    }

    /// The bytes the head's spans index (the connection's read buffer, lent).
    pub fn buffer(&self) -> &[u8] {
        &self.parts.buf[..self.parts.head.head_len]
    }

    /// The request method.
    pub fn method(&self) -> &[u8] {
        self.parts.head.method.of(&self.parts.buf)
    }

    /// The request target, as sent.
    pub fn target(&self) -> &[u8] {
        self.parts.head.target.of(&self.parts.buf)
    }

    /// The protocol version.
    pub fn version(&self) -> Version {
        self.parts.head.version
    }

    /// The request headers, in order, as sent.
    pub fn headers(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let buf = &self.parts.buf;
        self.parts
            .head
            .headers
            .iter()
            .map(move |(name, value)| (name.of(buf), value.of(buf)))
    }

    /// The request line as sent, from the method to the end of the target (without the
    /// version): two requests whose lines are the same bytes have the same method and target.
    pub fn method_and_target(&self) -> &[u8] {
        let head = &self.parts.head;
        &self.parts.buf[head.method.start as usize..head.target.end as usize]
    }

    /// The header section as sent, from the first field's name to the last field's value
    /// (empty without fields): two requests whose blocks are the same bytes have the same
    /// fields.
    pub fn header_block(&self) -> &[u8] {
        let head = &self.parts.head;
        match (head.headers.first(), head.headers.last()) {
            (Some((first, _)), Some((_, last))) => {
                &self.parts.buf[first.start as usize..last.end as usize]
            }
            _ => &[],
        }
    }

    /// The client's address.
    pub fn peer(&self) -> Peer {
        self.parts.peer
    }

    /// The address of the listener that accepted the connection.
    pub fn local(&self) -> &Local {
        &self.shared.locals[self.parts.listener]
    }

    /// Whether the peer is a proxy whose `X-Forwarded-*` headers are believed
    /// (`forwarded_allow_ips`; a Unix-socket peer always is).
    pub fn peer_is_trusted_proxy(&self) -> bool {
        self.shared.config.trusted_proxies.trusts_peer(self.peer())
    }

    /// The client's address as the app sees it (`REMOTE_ADDR`) and the access log shows it:
    /// behind a trusted proxy, the right-most `X-Forwarded-For` entry that is not itself a
    /// trusted proxy, when it is an IP address (repeated header lines form one list); else
    /// the peer's address. `None` for a Unix-socket peer without such a header.
    pub fn client_ip(&self) -> Option<IpAddr> {
        self.parts.client_ip(&self.shared.config.trusted_proxies)
    }

    /// Whether the request came over TLS (the app then sees `https` whatever a forwarded
    /// header says).
    pub fn is_tls(&self) -> bool {
        self.parts.link.is_tls()
    }

    /// Whether the request came on an HTTP/2 stream (ADR 0035: its head is synthesized as
    /// HTTP/1.1): WSGI's `SERVER_PROTOCOL`, ASGI's `http_version`, the access log's protocol.
    #[inline]
    pub fn is_h2(&self) -> bool {
        self.parts.link.is_h2()
    }

    /// Calls `f` with what the connection's TLS handshake told (`None` on a plain
    /// connection): the environ's `SSL_*` variables, the ASGI `tls` extension, the access
    /// log's TLS atoms. A closure, as [`Link::with_tls_info`] takes: the info lives in the
    /// connection's transport, which the lent link points to without borrowing it.
    ///
    /// [`Link::with_tls_info`]: crate::transport::Link::with_tls_info
    pub fn with_tls_info<R>(&self, f: impl FnOnce(Option<&TlsInfo>) -> R) -> R {
        self.parts.link.with_tls_info(f)
    }

    /// The scheme the client used, as the app sees it (`wsgi.url_scheme`, the ASGI scope's
    /// `scheme`), decided here once for both: `https` on a TLS connection, whatever a
    /// forwarded header says; else, behind a trusted proxy, its `X-Forwarded-Proto` when that
    /// says `https` or `http` (the last header line's first entry, any case); else the
    /// connection's own scheme, `http`. A proxy's header can upgrade a plain connection
    /// (TLS ended at the proxy), never downgrade a TLS one.
    pub fn url_scheme(&self) -> &'static str {
        const OWN: &str = "http";
        if self.is_tls() {
            return "https";
        }
        // The parser noted the last such line: the usual request, without one, costs a load.
        let Some(index) = self.head().forwarded_proto else {
            return OWN;
        };
        if !self.peer_is_trusted_proxy() {
            return OWN;
        }
        let value = self.head().headers[index as usize].1.of(self.buffer());
        let proto = value
            .split(|&b| b == b',')
            .next()
            .unwrap_or(b"")
            .trim_ascii();
        if proto.eq_ignore_ascii_case(b"https") {
            "https"
        } else if proto.eq_ignore_ascii_case(b"http") {
            "http"
        } else {
            OWN
        }
    }

    /// The value of the first request header named `name` (any case).
    fn header(&self, name: &[u8]) -> Option<&[u8]> {
        self.headers()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// Writes this exchange's access-log line, if there is a log (and the path is not
    /// excluded from it).
    fn log_access(&mut self) {
        let Some(log) = &self.shared.access_log else {
            return;
        };
        if self.timed_out {
            // Its line is the 503's (`timeout`).
            return;
        }
        let format = log.format();
        let duration = format.shows_duration().then(|| self.started.elapsed());
        // A request the loop handed to an app thread waited from `ready_at`; one served
        // where it was read (inline, or pipelined behind another) did not wait.
        let ready_at = self.parts.ready_at.take();
        let queue = format.shows_queue_wait().then(|| {
            ready_at.map_or(Duration::ZERO, |ready| {
                self.started.saturating_duration_since(ready)
            })
        });
        let mut line = std::mem::take(&mut self.ctx.log_line);
        let mut clock = std::mem::take(&mut self.ctx.log_clock);
        let response_headers = std::mem::take(&mut self.ctx.logged_response_headers);
        let output = self
            .handed_over
            .then(|| Arc::clone(self.parts.output()))
            .filter(|output| !output.is_empty());
        let find = |name: &[u8]| self.header(name);
        let request = LoggedRequest {
            client: self.client_ip(),
            line: RequestLine::Parsed {
                method: self.method(),
                target: self.target(),
                protocol: Protocol::of(self.version(), self.is_h2()),
            },
            status: self.status(),
            body_sent: self.coded_sent.unwrap_or(self.body_sent),
            uncompressed: self.coded_sent.map(|_| self.body_sent),
            request_header: &find,
            response_headers: &response_headers,
            duration,
            queue,
            tls: self.with_tls_info(LoggedTls::of),
        };
        if let Some(output) = output {
            // Written once the poller has sent the rest, or the connection dropped it: with
            // the body bytes that really went out, and the time until then.
            // `unsent` counts every queued byte never written: head and chunk framing too;
            // the line takes off only the body's share of them.
            let deferred = DeferredLine::new(&request, self.headers(), self.started);
            let shared = Arc::clone(&self.shared);
            let wire = std::mem::take(&mut self.wire);
            output.with(|pending| {
                pending.when_written(Box::new(move |unsent| {
                    if let Some(log) = &shared.access_log {
                        deferred.write(log, wire.body_unsent(unsent));
                    }
                }))
            });
        } else {
            log.log(&mut line, &request, &mut clock);
        }
        self.ctx.log_line = line;
        self.ctx.log_clock = clock;
        self.ctx.logged_response_headers = response_headers;
        self.ctx.logged_response_headers.clear();
    }

    /// Counts the request in the scoreboard, once: its method, status and queue wait, and the
    /// bytes it came in (no clock read; its duration is observed when it ends). Called when
    /// the response is complete and before its last bytes are written (or queued for the
    /// loop to write), so a client that has the response finds it counted; else when the
    /// exchange ends (a response abandoned).
    pub(crate) fn count_request(&mut self) {
        if self.counted || self.timed_out {
            return;
        }
        self.counted = true;
        // Nothing could be sent: counted as the server error it is.
        let status = if self.status == 0 { 500 } else { self.status };
        let wait = self.parts.ready_at.map_or(Duration::ZERO, |ready| {
            self.started.saturating_duration_since(ready)
        });
        let counted = Counted::new(self.method(), status, wait.as_micros() as u64);
        let received = std::mem::take(&mut self.parts.received);
        self.shared
            .count_request(self.ctx.thread, counted, received);
    }

    /// Marks, in the scoreboard, that the app returned its iterable: the "app done" time of
    /// the request's timing, and a progress point for `request_timeout` (one vDSO clock read,
    /// two stores).
    pub fn app_returned(&self) {
        if let Some(thread) = self.shared.thread_slot(self.ctx.thread) {
            thread.app_returned();
        }
    }

    /// The thread starts waiting on the client (reading the body, writing): not app time for
    /// `request_timeout` (one store).
    pub(crate) fn begin_client_wait(&self) {
        if let Some(thread) = self.shared.thread_slot(self.ctx.thread) {
            thread.waiting_on_client();
        }
    }

    /// The wait on the client ended having handed `sent` bytes to the socket: a progress point
    /// (one vDSO clock read, three stores).
    pub(crate) fn end_client_wait(&self, sent: u64) {
        if let Some(thread) = self.shared.thread_slot(self.ctx.thread) {
            thread.progressed(sent);
        }
    }

    /// `sent` bytes were queued for the poller with no wait on the client: a progress point at
    /// the thread's last clock reading (`clock::recent`).
    pub(crate) fn queued_for_poller(&self, sent: u64) {
        if let Some(thread) = self.shared.thread_slot(self.ctx.thread) {
            thread.progressed_at(sent, crate::clock::recent());
        }
    }

    /// The decoded length of a chunked request body the server read whole before dispatch:
    /// the app is given it as `CONTENT_LENGTH`, and no `Transfer-Encoding` (as a buffering
    /// proxy does). `None` for any other body.
    pub fn decoded_body_length(&self) -> Option<u64> {
        self.decoded_length
    }

    /// The response status (0 before `begin_response`).
    pub fn status(&self) -> u16 {
        self.status
    }

    /// Body bytes the app gave so far (before any compression).
    pub fn body_sent(&self) -> u64 {
        self.body_sent
    }

    /// How this connection must close after its response, when it is not kept: lingering
    /// until EOF if the request body was not read to its end (the client may still be
    /// uploading); until everything sent is acknowledged if the client wanted the connection
    /// kept (pipelined requests may be buffered, in the socket or in flight: the keep-alive
    /// limit, a stop or an error ended it); at once when the client itself asked to close
    /// (after `Connection: close` it must send nothing more, RFC 9112 9.6) and nothing is
    /// buffered past the request.
    fn closing_linger(&self) -> Linger {
        // A body read before dispatch was read to its end, whatever the app read of it.
        if !self.body_received_whole() {
            Linger::UntilEof
        } else if !self.raw.is_empty() || self.parts.head.keep_alive() {
            Linger::UntilAcknowledged
        } else {
            Linger::No
        }
    }

    /// Ends the exchange: finishes an unfinished response, drains an unread body when the
    /// connection can be kept, and gives back what the connection lent with how the exchange
    /// ended (for [`Connection::take_back`]), and the slot's context.
    pub(crate) fn complete(mut self: Box<Self>) -> (Box<Lent>, Outcome, Box<SlotContext>) {
        match self.phase {
            Phase::NotStarted => self.fail(500),
            Phase::Buffered | Phase::Committed => {
                let _ = self.finish();
            }
            Phase::Finished => {}
        }
        self.count_request();
        self.log_access();
        if self.timed_out {
            self.pay_if_owed();
        }
        let mut keep = self.keep_alive;
        if keep && !matches!(self.body, Body::Done) {
            self.begin_client_wait();
            keep = self.drain_body();
            self.end_client_wait(0);
        }
        let outcome = if keep {
            // Undecoded bytes past the body are the start of a pipelined request.
            Outcome::Keep {
                leftover: self.raw.clone(),
            }
        } else if self.timed_out {
            // Shut down already: nothing to linger for.
            Outcome::Close(Linger::No)
        } else {
            Outcome::Close(self.closing_linger())
        };
        self.shared.response_ended(self.ctx.thread, !self.timed_out);
        let Exchange { parts, ctx, .. } = *self;
        (parts, outcome, ctx)
    }
}
