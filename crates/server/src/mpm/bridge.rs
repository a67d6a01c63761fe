//! The bridge to an event loop (ASGI, ADR 0014): the worker's reactor, run turn by turn by an
//! event loop on the same thread (asyncio), which serves many requests at once and gives each
//! connection back when its request is over.
//!
//! The event loop watches one fd, the reactor's epoll fd (readable while any socket, listener
//! or signal of the worker has an event), and runs [`AsyncReactor::turn`] when it is readable,
//! when its deadline comes ([`AsyncReactor::timeout`]) and after requests end: the turn handles
//! every event there is (accept, heads, bodies read before dispatch, idle keep-alive, output
//! the socket did not take) without waiting, and hands out every request it found complete,
//! as exchanges ready to serve. No thread, no lock and no wake-up between the two: an idle
//! connection costs the event loop nothing (it is one of the reactor's epoll entries, not one
//! of the loop's), and a request crosses by a function return.
//!
//! The async side never waits for a client: a response's bytes the socket does not take are
//! queued for the reactor to write (ADR 0009), beyond every budget if need be (the app's
//! `send` then waits, on its loop, until they are written: [`AsyncReactor::watch_written`]), so
//! one slow client never stops the loop that serves the others.
//!
//! It decides who runs a request (the event loop) and when connections move; it must not know
//! ASGI (the Python crate does) nor how HTTP works.

use std::io;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::connection::Connection;
use crate::control::StopReason;
use crate::exchange::{Exchange, SlotContext};
use crate::mpm::app_threads::lock;
use crate::reactor::{Dispatch, Driver, Reactor};
use crate::shared::WorkerShared;
use crate::static_files::{Routed, Warm};
use crate::transport::Link;
use crate::websocket::WsSession;

/// The reactor's driver: keeps the turn's complete requests for the event loop.
struct AsyncDriver {
    /// Requests found complete in this turn.
    ready: Vec<(usize, Box<Connection>)>,
    /// Handed-out connections whose client closed its side (or whose socket failed).
    gone: Vec<usize>,
    /// Handed-out connections whose socket became readable (WebSockets read them).
    readable: Vec<usize>,
    /// Connections the event loop is done with, for the next turn.
    returned: Vec<(usize, Option<Box<Connection>>)>,
    in_flight: usize,
    /// Accepted WebSockets among `in_flight`: they stay handed out for their whole life but
    /// are not requests at work, so `max_concurrency` does not count them (`max_connections`
    /// does).
    websockets: usize,
    max_concurrency: usize,
    /// Runs a step of the loop with the event loop's interpreter released (a TLS handshake's
    /// crypto), when the event loop's side gave one.
    off_interpreter: Option<fn(&mut dyn FnMut())>,
}

impl AsyncDriver {
    /// Requests at work: in flight, less the accepted WebSockets.
    fn busy(&self) -> usize {
        self.in_flight - self.websockets
    }
}

impl Driver for AsyncDriver {
    fn dispatch(&mut self, token: usize, conn: Box<Connection>, _now: Option<Instant>) -> Dispatch {
        if self.max_concurrency > 0 && self.busy() >= self.max_concurrency {
            return Dispatch::Refused(conn);
        }
        self.ready.push((token, conn));
        self.in_flight += 1;
        Dispatch::Handed
    }

    fn collect(&mut self, into: &mut Vec<(usize, Option<Box<Connection>>)>) {
        self.in_flight -= self.returned.len();
        into.append(&mut self.returned);
    }

    fn has_returns(&self) -> bool {
        !self.returned.is_empty()
    }

    fn handed_peer_closed(&mut self, token: usize) {
        self.gone.push(token);
    }

    fn handed_readable(&mut self, token: usize) {
        self.readable.push(token);
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }

    fn can_take_connection(&self) -> bool {
        self.max_concurrency == 0 || self.busy() < self.max_concurrency
    }

    /// None: the loop makes its own for HTTP/2 connections (`reactor::h2`), the only work
    /// that is left for it between turns without a socket event.
    fn waker_fd(&self) -> Option<RawFd> {
        None
    }

    fn off_interpreter(&mut self, work: &mut dyn FnMut()) {
        match self.off_interpreter {
            Some(release) => release(work),
            None => work(),
        }
    }
}

/// What a turn gives the event loop.
pub enum AsyncEvent {
    /// A request to serve.
    Request {
        /// Names its connection in later events.
        token: usize,
        /// The request, its response not started.
        exchange: Box<Exchange>,
    },
    /// Everything queued on this connection's output when it was watched is written.
    Written(usize),
    /// The client of this handed-out connection closed its side, or its socket failed.
    Gone(usize),
    /// This handed-out connection's socket became readable (a WebSocket's frames).
    Readable(usize),
    /// A request under a static mount whose names are not all in the dentry cache (only
    /// after [`AsyncReactor::hand_cold_opens`]): run `warm` off the loop, then give the
    /// exchange back with [`AsyncReactor::route_warmed`]. Nothing is answered yet.
    Cold {
        /// Names its connection.
        token: usize,
        /// The request, its response not started.
        exchange: Box<Exchange>,
        /// The lookups to run where waiting for the disk holds no loop.
        warm: Warm,
    },
}

/// A worker's reactor, run turn by turn by an event loop on the same thread.
pub struct AsyncReactor {
    reactor: Reactor,
    driver: AsyncDriver,
    shared: Arc<WorkerShared>,
    /// Connections whose watched output was written (the notes come from the output's
    /// `when_written` action, which must be `Send`).
    written: Arc<Mutex<Vec<usize>>>,
    /// Slot contexts of finished requests, for the next ones (boxed: an exchange moves its
    /// context as a pointer).
    #[allow(clippy::vec_box)]
    spare: Vec<Box<SlotContext>>,
    /// Contexts made so far: a new one takes scoreboard sub-slot `made % threads_per_slot`.
    made: usize,
    /// The shells of the connections whose exchanges the event loop holds, by token: each
    /// lent its parts to its exchange (ADR 0018) and takes them back when the exchange ends
    /// (or a WebSocket session begins). A vector, as tokens are the loop's dense indices: no
    /// hashing per request.
    #[allow(clippy::vec_box)]
    shells: Vec<Option<Box<Connection>>>,
    started: bool,
    /// Static lookups are tried in the dentry cache first and a cold one handed out
    /// ([`AsyncReactor::hand_cold_opens`]).
    cold_opens_out: bool,
    /// Requests routed to the app after their cold lookups (`route_warmed`), for the next turn.
    again: Vec<AsyncEvent>,
}

impl AsyncReactor {
    /// Wraps a prepared worker's reactor (see [`crate::worker::prepare`]); it serves from
    /// [`AsyncReactor::start`] on.
    pub fn new(reactor: Reactor, shared: Arc<WorkerShared>) -> AsyncReactor {
        AsyncReactor {
            reactor,
            driver: AsyncDriver {
                ready: Vec::new(),
                gone: Vec::new(),
                readable: Vec::new(),
                returned: Vec::new(),
                in_flight: 0,
                websockets: 0,
                max_concurrency: shared.config.max_concurrency,
                off_interpreter: None,
            },
            shared,
            written: Arc::new(Mutex::new(Vec::new())),
            spare: Vec::new(),
            made: 0,
            shells: Vec::new(),
            started: false,
            cold_opens_out: false,
            again: Vec::new(),
        }
    }

    /// The fd to watch: readable while the reactor has events to handle.
    pub fn fd(&self) -> RawFd {
        self.reactor.poller_fd()
    }

    /// Announces the worker ready (after the app's own start-up: ASGI lifespan).
    pub fn start(&mut self) -> io::Result<()> {
        if !self.started {
            self.started = true;
            self.reactor.start(&mut self.driver)?;
        }
        Ok(())
    }

    /// How long the event loop may wait before the next turn if the fd stays quiet.
    pub fn timeout(&self) -> Duration {
        self.reactor.timeout()
    }

    /// Marks the event loop alive in the scoreboard
    /// ([`crate::scoreboard::Slot::loop_heartbeat_ms`]).
    pub fn loop_alive(&self) {
        self.shared.slot().loop_heartbeat_ms.store(
            crate::scoreboard::now_ms(),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// Has the turn run its TLS handshakes' reads through `release`, which runs what it is
    /// given with the event loop's interpreter released (its lock, the GIL, is held by the
    /// thread that runs the turns): the app's other threads run meanwhile (ADR 0012).
    pub fn release_interpreter_with(&mut self, release: fn(&mut dyn FnMut())) {
        self.driver.off_interpreter = Some(release);
    }

    /// One turn of the reactor, without waiting: takes back the connections given back since
    /// the last turn, handles every event, and moves into `out` the notes for requests in
    /// flight, then the new requests as exchanges ready to serve. Returns why the worker
    /// stops once it must (drained, or a quick stop).
    pub fn turn(&mut self, out: &mut Vec<AsyncEvent>) -> io::Result<Option<StopReason>> {
        let stopped = self.reactor.turn(&mut self.driver, false)?;
        out.extend(lock(&self.written).drain(..).map(AsyncEvent::Written));
        out.extend(self.driver.readable.drain(..).map(AsyncEvent::Readable));
        out.extend(self.driver.gone.drain(..).map(AsyncEvent::Gone));
        out.append(&mut self.again);
        let mut ready = std::mem::take(&mut self.driver.ready);
        for (token, mut conn) in ready.drain(..) {
            let ctx = self.spare.pop().unwrap_or_else(|| {
                let threads = self.shared.scoreboard().threads_per_slot().max(1);
                let thread = self.made % threads;
                self.made += 1;
                Box::new(SlotContext {
                    never_wait: true,
                    ..SlotContext::for_thread(thread)
                })
            });
            let now = Instant::now();
            self.shared.request_started(
                ctx.thread,
                conn.head.method.of(&conn.buf),
                conn.head.target.of(&conn.buf),
                conn.fd(),
                // Not a socket to write plain bytes to (as in `slot::serve_connection`): TLS,
                // or an HTTP/2 stream.
                !matches!(conn.link, Link::Plain(_)),
                now,
            );
            if let Link::H2(link) = &conn.link {
                // As in `slot::serve_connection`: the loop tells the stuck stream by its id.
                if let Some(thread) = self.shared.thread_slot(ctx.thread) {
                    thread.serves_stream(link.stream().id());
                }
            }
            // No rate-limit check here (ADR 0038): every head an async worker serves came
            // through the loop's `advance`, which counted it before its body (pipelined ones
            // too: each connection goes back to the loop after its response).
            let mut exchange = Exchange::new(&mut conn, ctx, Arc::clone(&self.shared), now);
            self.keep_shell(token, conn);
            if exchange.body_too_large() {
                // RFC 9110 15.5.14: refused before the app sees it.
                self.shared.request_spends_budget();
                exchange.refuse_too_large();
                self.complete(token, exchange);
                continue;
            }
            // A static answer (ADR 0036): its file work runs with the interpreter released;
            // with cold opens handed out, names are looked up in the dentry cache only, and a
            // request needing the disk goes out to be warmed (issue 39's follow-up).
            let driver = &mut self.driver;
            let mut release = |work: &mut dyn FnMut()| driver.off_interpreter(work);
            let routed = if self.cold_opens_out {
                match crate::static_files::route_cached(exchange, Some(&mut release)) {
                    Ok(routed) => routed,
                    Err((exchange, warm)) => {
                        out.push(AsyncEvent::Cold {
                            token,
                            exchange,
                            warm,
                        });
                        continue;
                    }
                }
            } else {
                crate::static_files::route(exchange, Some(&mut release))
            };
            match routed {
                Routed::Served(exchange) => {
                    self.end(token, exchange, false);
                    continue;
                }
                Routed::App(exchange) => {
                    self.shared.request_spends_budget();
                    out.push(AsyncEvent::Request { token, exchange });
                }
            }
        }
        self.driver.ready = ready;
        Ok(stopped)
    }

    /// Has static lookups tried in the dentry cache first, a request whose names are not there
    /// given out as [`AsyncEvent::Cold`] (the caller has threads to warm them on).
    pub fn hand_cold_opens(&mut self) {
        self.cold_opens_out = true;
    }

    /// Routes again a request given out as [`AsyncEvent::Cold`] once its `warm` ran: answered
    /// from the cache now (or, evicted again meanwhile, looked up here as without cold opens
    /// handed out), or, a miss for the app, handed to it in the next turn. True when a turn
    /// is needed (the event loop then schedules one).
    pub fn route_warmed(&mut self, token: usize, exchange: Box<Exchange>) -> bool {
        let driver = &mut self.driver;
        let mut release = |work: &mut dyn FnMut()| driver.off_interpreter(work);
        let routed = match crate::static_files::route_cached(exchange, Some(&mut release)) {
            Ok(routed) => routed,
            Err((exchange, _)) => crate::static_files::route(exchange, Some(&mut release)),
        };
        match routed {
            Routed::Served(exchange) => self.end(token, exchange, false),
            Routed::App(exchange) => {
                self.shared.request_spends_budget();
                self.again.push(AsyncEvent::Request { token, exchange });
                true
            }
        }
    }

    /// Ends a request: completes its exchange (an unfinished response is finished, or a 500
    /// when none started) and gives the connection back for the next turn. True when it is
    /// the first given back since the last turn (the event loop then schedules one).
    pub fn complete(&mut self, token: usize, exchange: Box<Exchange>) -> bool {
        self.end(token, exchange, true)
    }

    /// [`AsyncReactor::complete`]; `spends`: the request counts toward `max_requests` (a
    /// static answer does not).
    fn end(&mut self, token: usize, exchange: Box<Exchange>, spends: bool) -> bool {
        let (parts, outcome, mut ctx) = exchange.complete();
        let max_head_size = self.shared.config.limits.max_head_size;
        let (kept, vacant) = self.shell(token).take_back(parts, outcome, max_head_size);
        ctx.vacant = Some(vacant);
        self.shared.request_finished(spends);
        self.spare.push(ctx);
        let first = self.driver.returned.is_empty();
        self.driver.returned.push((token, kept));
        first
    }

    /// Keeps the shell of the connection `token` while its exchange is out.
    fn keep_shell(&mut self, token: usize, conn: Box<Connection>) {
        if token >= self.shells.len() {
            self.shells.resize_with(token + 1, || None);
        }
        self.shells[token] = Some(conn);
    }

    /// The shell of the connection `token`, whose exchange ends.
    fn shell(&mut self, token: usize) -> Box<Connection> {
        self.shells
            .get_mut(token)
            .and_then(Option::take)
            .expect("an exchange ends on a connection whose shell the bridge keeps")
    }

    /// True when connections given back wait for the next turn.
    pub fn has_returns(&self) -> bool {
        self.driver.has_returns()
    }

    /// Asks for [`AsyncEvent::Written`] once what the exchange's connection has queued now
    /// is written (or dropped). False, and nothing asked, when nothing is queued.
    pub fn watch_written(&self, token: usize, exchange: &mut Exchange) -> bool {
        if exchange.unsent() == 0 {
            return false;
        }
        let written = Arc::clone(&self.written);
        exchange.when_written(Box::new(move |_| lock(&written).push(token)));
        true
    }

    /// True once the worker is draining (WebSockets are then closed with 1001).
    pub fn is_stopping(&self) -> bool {
        self.shared.is_stopping()
    }

    /// Answers a WebSocket handshake with its 101 (`headers`: the accept key, the agreed
    /// subprotocol and extension, the app's own) and turns the connection `token` into a
    /// session (`deflate` when permessage-deflate was agreed). The exchange ends there, giving
    /// the connection's shell its parts back.
    pub fn upgrade(
        &mut self,
        token: usize,
        exchange: Box<Exchange>,
        headers: &[(&[u8], &[u8])],
        deflate: Option<tines_proto::websocket::deflate::Agreement>,
    ) -> (io::Result<()>, WsSession) {
        let (result, parts, raw, mut ctx) = exchange.switch_to_websocket(headers);
        let mut conn = self.shell(token);
        ctx.vacant = Some(conn.restore(parts));
        self.spare.push(ctx);
        self.driver.websockets += 1;
        let session = WsSession::new(
            conn,
            raw.start,
            raw.end,
            deflate,
            self.shared.config.ws_max_message_size,
        );
        (result, session)
    }

    /// Ends a WebSocket: the reactor writes what is queued and closes the connection. True
    /// when it is the first given back since the last turn (as [`AsyncReactor::complete`]).
    pub fn complete_websocket(&mut self, token: usize, session: WsSession) -> bool {
        self.return_websocket(token, Some(session.into_connection()))
    }

    /// Ends a WebSocket whose client is gone (or read nothing for `send_timeout`): its fd is
    /// closed now and what is queued for it dropped, as nothing more can reach the client.
    pub fn drop_websocket(&mut self, token: usize, session: WsSession) -> bool {
        drop(session);
        self.return_websocket(token, None)
    }

    fn return_websocket(&mut self, token: usize, conn: Option<Box<Connection>>) -> bool {
        self.shared.request_finished(true);
        self.driver.websockets -= 1;
        let first = self.driver.returned.is_empty();
        self.driver.returned.push((token, conn));
        first
    }

    /// Asks for [`AsyncEvent::Written`] once what the session has queued now is written.
    /// False, and nothing asked, when nothing is queued.
    pub fn watch_session_written(&self, token: usize, session: &mut WsSession) -> bool {
        if session.unsent() == 0 {
            return false;
        }
        let written = Arc::clone(&self.written);
        session.when_written(Box::new(move |_| lock(&written).push(token)));
        true
    }

    /// The worker's settings.
    pub fn config(&self) -> &crate::config::WorkerConfig {
        &self.shared.config
    }

    /// Flushes the access log (the worker is stopping).
    pub fn finish(&self) {
        if let Some(log) = &self.shared.access_log {
            log.flush();
        }
    }
}
