//! The bridge to an event loop on another thread (ASGI, ADR 0014): the worker's reactor runs
//! on a thread of its own, as with the app-thread pool, and owns every socket (accept, heads,
//! request bodies read before dispatch, idle keep-alive, response output the socket did not
//! take); complete requests go to the async side, the thread that runs the app's event loop
//! (asyncio), which serves many at once and gives each connection back when its request is
//! over.
//!
//! One eventfd tells the async side that something waits for it, and one queue holds what:
//! new requests, "the output you waited for is written" and "the client is gone" notes, and
//! finally the reactor's stop. The reactor queues a whole epoll wake-up's worth under one lock
//! and writes the eventfd only when the async side has not been told yet since it last took
//! the queue, so a busy loop sees one wake-up per batch, not one per message (what
//! `call_soon_threadsafe` per request would cost). Connections go back the way the pool's do:
//! one queue, and the reactor's own eventfd rung once until it collects.
//!
//! The async side never waits for a client: a response's bytes the socket does not take are
//! queued for the reactor to write (ADR 0009), beyond every budget if need be (the app's
//! `send` then waits, on its loop, until they are written: [`AsyncSide::watch_written`]), so
//! one slow client never stops the loop that serves the others.
//!
//! It decides who runs a request (the async side) and when connections move; it must not know
//! ASGI (the Python crate does) nor how HTTP works.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::connection::Connection;
use crate::control::StopReason;
use crate::exchange::{Exchange, SlotContext};
use crate::mpm::app_threads::lock;
use crate::poller::Waker;
use crate::reactor::{Dispatch, Driver, Reactor};
use crate::shared::WorkerShared;

/// What waits for the async side.
#[derive(Default)]
struct Incoming {
    requests: Vec<(usize, Box<Connection>)>,
    /// Connections whose queued output (waited for by the app) is all written.
    written: Vec<usize>,
    /// Handed-out connections whose client closed its side (or whose socket failed).
    gone: Vec<usize>,
    /// The reactor ended: why, or the error it ended with.
    stopped: Option<Result<StopReason, String>>,
    /// The eventfd was written since the async side last took the queue.
    told: bool,
}

struct Returned {
    conns: Vec<(usize, Option<Box<Connection>>)>,
    /// The reactor's waker was rung since it last collected.
    rung: bool,
}

struct Bridge {
    incoming: Mutex<Incoming>,
    /// The async side watches this one.
    notify: Waker,
    returned: Mutex<Returned>,
    has_returns: AtomicBool,
    /// The reactor watches this one.
    waker: Waker,
}

impl Bridge {
    /// Adds to the queue under one lock and tells the async side unless it was told already.
    fn tell(&self, add: impl FnOnce(&mut Incoming)) {
        let mut incoming = lock(&self.incoming);
        add(&mut incoming);
        if !incoming.told {
            incoming.told = true;
            self.notify.wake();
        }
    }
}

/// The reactor's driver: hands complete requests to the async side.
struct AsyncDriver {
    bridge: Arc<Bridge>,
    /// Requests found ready in this loop turn, queued together by `flush`.
    batch: Vec<(usize, Box<Connection>)>,
    gone: Vec<usize>,
    in_flight: usize,
    max_concurrency: usize,
}

impl Driver for AsyncDriver {
    fn dispatch(&mut self, token: usize, conn: Box<Connection>, _now: Option<Instant>) -> Dispatch {
        if self.max_concurrency > 0 && self.in_flight >= self.max_concurrency {
            return Dispatch::Refused(conn);
        }
        self.batch.push((token, conn));
        self.in_flight += 1;
        Dispatch::Handed
    }

    fn flush(&mut self) {
        if self.batch.is_empty() && self.gone.is_empty() {
            return;
        }
        let (batch, gone) = (&mut self.batch, &mut self.gone);
        self.bridge.tell(|incoming| {
            incoming.requests.append(batch);
            incoming.gone.append(gone);
        });
    }

    fn collect(&mut self, into: &mut Vec<(usize, Option<Box<Connection>>)>) {
        let mut returned = lock(&self.bridge.returned);
        if returned.rung {
            self.bridge.waker.reset();
            returned.rung = false;
        }
        self.bridge.has_returns.store(false, Ordering::SeqCst);
        self.in_flight -= returned.conns.len();
        into.append(&mut returned.conns);
    }

    fn has_returns(&self) -> bool {
        self.bridge.has_returns.load(Ordering::SeqCst)
    }

    fn handed_peer_closed(&mut self, token: usize) {
        self.gone.push(token);
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }

    fn can_take_connection(&self) -> bool {
        self.max_concurrency == 0 || self.in_flight < self.max_concurrency
    }

    fn waker_fd(&self) -> Option<RawFd> {
        Some(self.bridge.waker.fd())
    }
}

/// What the async side takes from the bridge.
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
    /// The reactor ended (the worker stops): why, or its error.
    Stopped(Result<StopReason, String>),
}

/// The reactor, set up and not yet running (the app's start-up, ASGI lifespan, comes first).
pub struct AsyncLoop {
    reactor: Reactor,
    driver: AsyncDriver,
    shared: Arc<WorkerShared>,
}

/// The async side's end of the bridge (used on the event loop's thread only).
pub struct AsyncSide {
    bridge: Arc<Bridge>,
    shared: Arc<WorkerShared>,
    /// Slot contexts of finished requests, for the next ones (boxed: an exchange moves its
    /// context as a pointer).
    #[allow(clippy::vec_box)]
    spare: Vec<Box<SlotContext>>,
    /// Contexts made so far: a new one takes scoreboard sub-slot `made % threads_per_slot`.
    made: usize,
    taken: Incoming,
}

/// Sets up the bridge for a prepared worker (see [`crate::worker::prepare`]).
pub fn bridge(reactor: Reactor, shared: Arc<WorkerShared>) -> io::Result<(AsyncLoop, AsyncSide)> {
    let bridge = Arc::new(Bridge {
        incoming: Mutex::new(Incoming::default()),
        notify: Waker::new()?,
        returned: Mutex::new(Returned {
            conns: Vec::new(),
            rung: false,
        }),
        has_returns: AtomicBool::new(false),
        waker: Waker::new()?,
    });
    let driver = AsyncDriver {
        bridge: Arc::clone(&bridge),
        batch: Vec::new(),
        gone: Vec::new(),
        in_flight: 0,
        max_concurrency: shared.config.max_concurrency,
    };
    let side = AsyncSide {
        bridge,
        shared: Arc::clone(&shared),
        spare: Vec::new(),
        made: 0,
        taken: Incoming::default(),
    };
    Ok((
        AsyncLoop {
            reactor,
            driver,
            shared,
        },
        side,
    ))
}

impl AsyncLoop {
    /// Starts the reactor on a thread of its own (`tines-loop`); it announces the worker
    /// ready, serves until the worker must stop, and then queues [`AsyncEvent::Stopped`].
    pub fn spawn(self) -> io::Result<JoinHandle<()>> {
        std::thread::Builder::new()
            .name("tines-loop".into())
            .spawn(move || {
                let AsyncLoop {
                    mut reactor,
                    mut driver,
                    shared,
                } = self;
                let result = reactor.run(&mut driver);
                if let Some(log) = &shared.access_log {
                    log.flush();
                }
                // The listeners and every parked connection close now, not at the process's
                // exit after the app's shutdown.
                drop(reactor);
                let stopped = result.map_err(|err| err.to_string());
                driver
                    .bridge
                    .tell(|incoming| incoming.stopped = Some(stopped));
            })
    }
}

impl AsyncSide {
    /// The eventfd that is readable while something waits in [`AsyncSide::take`].
    pub fn notify_fd(&self) -> RawFd {
        self.bridge.notify.fd()
    }

    /// Marks the event loop alive in the scoreboard ([`crate::scoreboard::Slot::loop_heartbeat_ms`]).
    pub fn loop_alive(&self) {
        self.shared
            .slot()
            .loop_heartbeat_ms
            .store(crate::scoreboard::now_ms(), Ordering::Relaxed);
    }

    /// Moves everything waiting into `out`: notes first (they concern requests the async side
    /// holds already), then new requests, as exchanges ready to serve, then the stop.
    pub fn take(&mut self, out: &mut Vec<AsyncEvent>) {
        {
            let mut incoming = lock(&self.bridge.incoming);
            if incoming.told {
                self.bridge.notify.reset();
                incoming.told = false;
            }
            std::mem::swap(&mut incoming.requests, &mut self.taken.requests);
            std::mem::swap(&mut incoming.written, &mut self.taken.written);
            std::mem::swap(&mut incoming.gone, &mut self.taken.gone);
            self.taken.stopped = incoming.stopped.take();
        }
        out.extend(self.taken.written.drain(..).map(AsyncEvent::Written));
        out.extend(self.taken.gone.drain(..).map(AsyncEvent::Gone));
        let mut requests = std::mem::take(&mut self.taken.requests);
        for (token, conn) in requests.drain(..) {
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
                now,
            );
            let mut exchange = Exchange::new(conn, ctx, Arc::clone(&self.shared), now);
            if exchange.body_too_large() {
                // RFC 9110 15.5.14: refused before the app sees it.
                exchange.fail(413);
                self.complete(token, exchange);
                continue;
            }
            out.push(AsyncEvent::Request { token, exchange });
        }
        self.taken.requests = requests;
        if let Some(stopped) = self.taken.stopped.take() {
            out.push(AsyncEvent::Stopped(stopped));
        }
    }

    /// Ends a request: completes its exchange (an unfinished response is finished, or a 500
    /// when none started) and gives the connection back to the reactor.
    pub fn complete(&mut self, token: usize, exchange: Box<Exchange>) {
        let (kept, ctx) = exchange.complete();
        self.shared.request_finished();
        self.spare.push(ctx);
        let mut returned = lock(&self.bridge.returned);
        returned.conns.push((token, kept));
        self.bridge.has_returns.store(true, Ordering::SeqCst);
        if !returned.rung {
            returned.rung = true;
            self.bridge.waker.wake();
        }
    }

    /// Asks for [`AsyncEvent::Written`] once what the exchange's connection has queued now
    /// is written (or dropped). False, and nothing asked, when nothing is queued.
    pub fn watch_written(&self, token: usize, exchange: &mut Exchange) -> bool {
        if exchange.unsent() == 0 {
            return false;
        }
        let bridge = Arc::clone(&self.bridge);
        exchange.when_written(Box::new(move |_| {
            bridge.tell(|incoming| incoming.written.push(token));
        }));
        true
    }
}
