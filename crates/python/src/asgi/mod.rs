//! ASGI 3 (`http` and `websocket` scopes) on the bridge of `tines_server::mpm::bridge`
//! (ADR 0014).
//!
//! `AsgiWorker` (here) holds the worker's reactor, run turn by turn on the thread of the
//! asyncio loop: the loop watches the reactor's epoll fd (`fileno`) and calls `turn`, which
//! handles every socket event, turns the complete requests into [`Request`] objects and the
//! WebSocket handshakes into [`WebSocket`] objects (their scope built in Rust: `scope`), and
//! settles the futures that waited for a written output or a client that went away. Their
//! `receive` and `send` return awaitables (`waiter`): an already-done one (`Ready`, no
//! event-loop round trip) whenever the answer is known at once, which is every time for a
//! request whose body is buffered (all of them, ADR 0008) and a response the socket or the
//! response store takes; an asyncio future only to wait for the client (a slow reader:
//! backpressure; or `http.disconnect`). Sends never block the loop (`never_wait` exchanges):
//! the reactor writes what the socket did not take. CPU and disk work is not the loop's either
//! (issue 39's follow-up): a compressed body's blocks are compressed, and cold static lookups
//! made, on the worker's pool (`tines_server::work_pool`), whose eventfd the loop watches
//! (`pool_fileno`, `pool_done`); a compressed `send` waits for its block as for a slow reader.
//!
//! The Python side (`tines.asgi`) owns the loop, lifespan, the task per request, timeouts and
//! logging; this module owns the per-request objects and every byte.

mod request;
mod scope;
mod waiter;
mod websocket;
mod ws_limits;

use std::collections::HashMap;

use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use tines_proto::websocket::Handshake;
use tines_server::exchange::{BlockEnd, EncoderLoan};
use tines_server::mpm::bridge::{AsyncEvent, AsyncReactor};
use tines_server::work_pool::WorkPool;
use tines_server::Exchange;

pub use request::Request;
pub use waiter::Ready;
pub use websocket::WebSocket;

use crate::worker::PythonSpec;
use scope::ScopeCache;
use waiter::ready;
use ws_limits::WsBudget;

pyo3::create_exception!(
    _core,
    ClientDisconnected,
    PyOSError,
    "The client of this request is gone: what is sent cannot reach it (ASGI: a send on a \
     closed connection raises a subclass of OSError)."
);

/// A request or a WebSocket in flight, by its connection's token.
enum InFlight {
    Http(Py<Request>),
    Ws(Py<WebSocket>),
}

/// What a turn has for a request in flight.
enum Note {
    Written,
    Gone,
    Readable,
    GoingAway,
}

/// The worker's end of the bridge.
#[pyclass(module = "tines._core", unsendable)]
pub struct AsgiWorker {
    reactor: AsyncReactor,
    requests: HashMap<usize, InFlight>,
    /// WebSockets whose last read stopped at its budget, or that waited for room in the
    /// receive budget: read again next turn.
    reread: Vec<usize>,
    /// WebSockets held, from the handshake until the app returns (`ws_max_connections`).
    websockets: usize,
    /// What the WebSockets' clients sent and the apps have not received (`ws_limits`).
    ws_budget: WsBudget,
    /// The WebSockets were told the worker is stopping (closed with 1001).
    stopping_told: bool,
    events: Vec<AsyncEvent>,
    create_future: Option<Py<PyAny>>,
    /// The loop's `call_soon` and the callback that runs a turn: scheduled once when the
    /// first request since the last turn gives its connection back.
    schedule_turn: Option<(Py<PyAny>, Py<PyAny>)>,
    turn_scheduled: bool,
    state: Option<Py<PyDict>>,
    done: Option<Py<Ready>>,
    max_response_buffer: u64,
    /// Parts of the scope made once and reused (see [`ScopeCache`]).
    cache: ScopeCache,
    /// The threads that compress blocks (lanes, compression on) and warm cold static lookups
    /// (apart, a static mount) off the loop (ADRs 0036, 0037): made by `start` when either is
    /// set, else never. Results are keyed by token.
    pool: Option<WorkPool<Back>>,
    /// Requests under a static mount whose lookups the pool warms, by token.
    parked: HashMap<usize, Box<Exchange>>,
    /// The last loan's serial: a result is taken back only by the request that lent it (a
    /// token is reused by the next connection once a request ends).
    loans: std::cell::Cell<u64>,
}

/// What the pool gives back.
enum Back {
    /// A compressed block: the serial of its loan, and the loan.
    Block(u64, EncoderLoan),
    /// The lookups of the parked request on this token ran.
    Warmed,
}

/// The pool's lanes (compression on; a loop rarely streams more compressed responses at once
/// than cores to spare) and apart threads (a static mount: cold lookups, apart so that one
/// that hangs delays no compressed block; two, so that it does not hold every other lookup).
const POOL_LANES: usize = 2;
const POOL_LOOKUPS: usize = 2;

#[pymethods]
impl AsgiWorker {
    /// Sets the worker up as `run_worker` does (the same spec, without an app) without
    /// serving: `start` serves, once the app's start-up (lifespan) is done.
    #[new]
    fn new(spec: PythonSpec<'_>) -> PyResult<Self> {
        let spec = spec.into_spec()?;
        let max_response_buffer = spec.config.max_response_buffer as u64;
        let root_path = spec.config.root_path.clone();
        let ws_budget = WsBudget::new(
            spec.config.ws_receive_buffer_total,
            spec.config.ws_receive_buffer_timeout,
        );
        let (reactor, shared) = tines_server::worker::prepare(spec)
            .map_err(|err| PyOSError::new_err(format!("worker failed: {err}")))?;
        let mut reactor = AsyncReactor::new(reactor, shared);
        // The turn runs on the event loop's thread, with the GIL: a TLS handshake's crypto
        // lets the app's other threads run.
        reactor.release_interpreter_with(crate::wsgi::detached);
        Ok(AsgiWorker {
            reactor,
            requests: HashMap::new(),
            reread: Vec::new(),
            websockets: 0,
            ws_budget,
            stopping_told: false,
            events: Vec::new(),
            create_future: None,
            schedule_turn: None,
            turn_scheduled: false,
            state: None,
            done: None,
            max_response_buffer,
            cache: ScopeCache::new(root_path),
            pool: None,
            parked: HashMap::new(),
            loans: std::cell::Cell::new(0),
        })
    }

    /// The fd the asyncio loop watches: readable while the reactor has events.
    fn fileno(&self) -> i32 {
        self.reactor.fd()
    }

    /// Starts serving: the worker tells the master it is ready. `create_future` is the loop's
    /// `create_future`; `call_soon` its `call_soon` and `turn` the callback that calls
    /// [`AsgiWorker::turn`]; `state` the lifespan state (copied into each request's scope),
    /// if any.
    #[pyo3(signature = (create_future, call_soon, turn, state=None))]
    fn start(
        &mut self,
        py: Python<'_>,
        create_future: Py<PyAny>,
        call_soon: Py<PyAny>,
        turn: Py<PyAny>,
        state: Option<Py<PyDict>>,
    ) -> PyResult<()> {
        self.create_future = Some(create_future);
        self.schedule_turn = Some((call_soon, turn));
        self.state = state;
        self.done = Some(Py::new(py, Ready::none())?);
        let statics = !self.reactor.config().statics.mounts.is_empty();
        let compression = self.reactor.config().compression.is_on();
        if (compression || statics) && self.pool.is_none() {
            let lanes = if compression { POOL_LANES } else { 0 };
            let lookups = if statics { POOL_LOOKUPS } else { 0 };
            self.pool = Some(
                WorkPool::new(lanes, lookups, "tines-pool")
                    .map_err(|err| PyOSError::new_err(format!("worker failed: {err}")))?,
            );
            if statics {
                self.reactor.hand_cold_opens();
            }
        }
        self.reactor
            .start()
            .map_err(|err| PyOSError::new_err(format!("worker failed: {err}")))
    }

    /// The fd the loop watches for results of the pool (then it calls `pool_done`); None when
    /// there is no pool (compression off and no static mount).
    fn pool_fileno(&self) -> Option<i32> {
        self.pool.as_ref().map(WorkPool::fd)
    }

    /// Takes back the blocks the pool compressed (each goes out, its `send` returns unless a
    /// slow client holds it), and routes again the requests whose lookups it warmed.
    fn pool_done(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let back: Vec<(Py<Request>, u64, EncoderLoan)> = {
            let mut this = slf.borrow_mut();
            let mut done = Vec::new();
            if let Some(pool) = &this.pool {
                pool.take_done(&mut done);
            }
            let mut blocks = Vec::new();
            let mut turn = false;
            for (token, back) in done {
                let token = token as usize;
                match back {
                    Back::Block(serial, loan) => {
                        // A request that ended meanwhile: its encoder is dropped.
                        if let Some(InFlight::Http(request)) = this.requests.get(&token) {
                            blocks.push((request.clone_ref(py), serial, loan));
                        }
                    }
                    Back::Warmed => {
                        if let Some(exchange) = this.parked.remove(&token) {
                            turn |= this.reactor.route_warmed(token, exchange);
                        }
                    }
                }
            }
            if turn {
                this.schedule_turn(py)?;
            }
            blocks
        };
        for (request, serial, loan) in back {
            // One connection's failure ends that connection only.
            let result = request.borrow_mut(py).loan_back(py, serial, loan);
            if let Err(err) = result {
                err.print(py);
                request.borrow_mut(py).on_gone(py)?;
            }
        }
        Ok(())
    }

    /// Seconds the loop may wait before the next turn if the fd stays quiet.
    fn timeout(&self) -> f64 {
        self.reactor.timeout().as_secs_f64()
    }

    /// Marks the event loop alive in the scoreboard (the master's watchdog kills an async
    /// worker whose loop stops marking for `request_timeout`); runs the WebSockets'
    /// keep-alive, and ends the `send`s that waited `send_timeout` for a client that took
    /// nothing (per wait, renewed by every byte taken, as the reactor's own writing is).
    fn tick(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let (in_flight, interval, timeout, send_timeout, idle_timeout) = {
            let this = slf.borrow();
            this.reactor.loop_alive();
            let config = this.reactor.config();
            let in_flight: Vec<InFlight> = this
                .requests
                .values()
                .map(|in_flight| match in_flight {
                    InFlight::Ws(socket) => InFlight::Ws(socket.clone_ref(py)),
                    InFlight::Http(request) => InFlight::Http(request.clone_ref(py)),
                })
                .collect();
            (
                in_flight,
                config.ws_ping_interval,
                config.ws_ping_timeout,
                config.send_timeout,
                config.ws_idle_timeout,
            )
        };
        let now = std::time::Instant::now();
        for in_flight in in_flight {
            // One connection's failure is logged and ends that connection only, never the tick
            // (the others' deadlines, and the ticks after it: the loop schedules the next one
            // only once this returns).
            let result = match &in_flight {
                InFlight::Ws(socket) => {
                    let mut socket = socket.borrow_mut(py);
                    socket
                        .expire_send(py, now, send_timeout)
                        .and_then(|()| socket.keepalive(py, interval, timeout))
                        .and_then(|()| socket.enforce_limits(py, now, idle_timeout))
                }
                InFlight::Http(request) => {
                    request.borrow_mut(py).expire_send(py, now, send_timeout)
                }
            };
            if let Err(err) = result {
                err.print(py);
                match &in_flight {
                    InFlight::Http(request) => request.borrow_mut(py).on_gone(py)?,
                    InFlight::Ws(socket) => socket.borrow_mut(py).fail_and_let_go(py)?,
                }
            }
        }
        Ok(())
    }

    /// Requests in flight.
    fn in_flight(&self) -> usize {
        self.requests.len()
    }

    /// Runs a turn of the reactor: returns the new requests, the new WebSockets and, once the
    /// worker must stop (it has drained, or a quick stop), why (`"graceful"`, `"quick"`, ...),
    /// else None. Settles the futures of requests whose output was written or whose client
    /// went away, and reads the WebSockets whose sockets became readable.
    #[allow(clippy::type_complexity)]
    fn turn(
        slf: &Bound<'_, Self>,
    ) -> PyResult<(Vec<Py<Request>>, Vec<Py<WebSocket>>, Option<&'static str>)> {
        let py = slf.py();
        let mut this = slf.borrow_mut();
        this.turn_scheduled = false;
        let mut events = std::mem::take(&mut this.events);
        let stopped = this
            .reactor
            .turn(&mut events)
            .map_err(|err| PyOSError::new_err(format!("worker failed: {err}")))?;
        let mut new = Vec::new();
        let mut sockets = Vec::new();
        let mut notes = Vec::new();
        let reread = std::mem::take(&mut this.reread);
        for token in reread {
            notes.push((token, Note::Readable));
        }
        for event in events.drain(..) {
            match event {
                AsyncEvent::Request { token, exchange } => {
                    // An HTTP/2 stream is never a WebSocket (no extended CONNECT: RFC 8441 is
                    // not offered, and its connection cannot switch protocols): an `http`
                    // request whatever its fields say.
                    let handshake = if exchange.is_h2() {
                        Ok(None)
                    } else {
                        Handshake::from_head(exchange.head(), exchange.buffer()).map(|found| {
                            found.map(|hs| {
                                (
                                    hs.key.to_vec(),
                                    hs.protocols
                                        .iter()
                                        .map(|p| String::from_utf8_lossy(p).into_owned())
                                        .collect::<Vec<_>>(),
                                    hs.extensions.iter().map(|e| e.to_vec()).collect::<Vec<_>>(),
                                )
                            })
                        })
                    };
                    match handshake {
                        Ok(None) => {
                            let scope = this.scope(py, &exchange, None)?;
                            let request = Py::new(
                                py,
                                Request::new(token, slf.clone().unbind(), exchange, scope),
                            )?;
                            this.requests
                                .insert(token, InFlight::Http(request.clone_ref(py)));
                            new.push(request);
                        }
                        Ok(Some(_)) if !this.admit_websocket() => {
                            let mut exchange = exchange;
                            ws_limits::refuse_over_ceiling(&mut exchange);
                            this.reactor.complete(token, exchange);
                        }
                        Ok(Some((key, protocols, offers))) => {
                            let scope = this.scope(py, &exchange, Some(&protocols))?;
                            let socket = Py::new(
                                py,
                                WebSocket::new(
                                    token,
                                    slf.clone().unbind(),
                                    exchange,
                                    scope,
                                    key,
                                    offers,
                                ),
                            )?;
                            this.requests
                                .insert(token, InFlight::Ws(socket.clone_ref(py)));
                            sockets.push(socket);
                        }
                        Err(refusal) => {
                            // A handshake that breaks RFC 6455 4.2.1: answered without the app.
                            let mut exchange = exchange;
                            let body = format!("{}\n", refusal.reason);
                            let status = format!(
                                "{} {}",
                                refusal.status,
                                tines_proto::status::reason_phrase(refusal.status)
                            );
                            let mut headers: Vec<(&[u8], &[u8])> =
                                vec![(b"Content-Type", b"text/plain; charset=utf-8")];
                            if refusal.status == 426 {
                                headers.push((b"Sec-WebSocket-Version", b"13"));
                            }
                            if exchange
                                .begin_response(status.as_bytes(), headers, Some(body.len() as u64))
                                .is_ok()
                            {
                                let _ = exchange
                                    .write_body(body.as_bytes())
                                    .and_then(|()| exchange.finish());
                            }
                            this.reactor.complete(token, exchange);
                        }
                    }
                }
                AsyncEvent::Cold {
                    token,
                    exchange,
                    warm,
                } => {
                    // Only with a static mount (`hand_cold_opens`): a hung lookup holds no lane.
                    let worker = &mut *this;
                    if let Some(pool) = &worker.pool {
                        worker.parked.insert(token, exchange);
                        pool.submit_apart(token as u64, move || {
                            warm.run();
                            Back::Warmed
                        });
                    }
                }
                AsyncEvent::Written(token) => notes.push((token, Note::Written)),
                AsyncEvent::Gone(token) => notes.push((token, Note::Gone)),
                AsyncEvent::Readable(token) => notes.push((token, Note::Readable)),
            }
        }
        this.events = events;
        if this.reactor.is_stopping() && !this.stopping_told {
            this.stopping_told = true;
            for (token, in_flight) in &this.requests {
                if matches!(in_flight, InFlight::Ws(_)) {
                    notes.push((*token, Note::GoingAway));
                }
            }
        }
        let settle_now: Vec<(InFlight, Note)> = notes
            .into_iter()
            .filter_map(|(token, note)| {
                this.requests.get(&token).map(|in_flight| {
                    let in_flight = match in_flight {
                        InFlight::Http(request) => InFlight::Http(request.clone_ref(py)),
                        InFlight::Ws(socket) => InFlight::Ws(socket.clone_ref(py)),
                    };
                    (in_flight, note)
                })
            })
            .collect();
        if stopped.is_some() {
            this.reactor.finish();
        } else if this.reactor.has_returns() {
            // Given back during the turn (a 413, a refused handshake: answered without the app).
            this.schedule_turn(py)?;
        }
        drop(this);
        for (in_flight, note) in settle_now {
            // One connection's failure (settling a future, building a message) is logged and
            // ends that connection only, never the turn.
            let result = match (&in_flight, note) {
                (InFlight::Http(request), Note::Gone) => request.borrow_mut(py).on_gone(py),
                (InFlight::Http(request), Note::Written) => request.borrow_mut(py).on_written(py),
                (InFlight::Http(_), _) => Ok(()),
                (InFlight::Ws(socket), Note::Written) => socket.borrow_mut(py).on_written(py),
                (InFlight::Ws(socket), Note::GoingAway) => socket.borrow_mut(py).going_away(py),
                (InFlight::Ws(socket), Note::Gone) => socket.borrow_mut(py).on_gone(py),
                (InFlight::Ws(socket), Note::Readable) => socket.borrow_mut(py).on_readable(py),
            };
            if let Err(err) = result {
                err.print(py);
                match &in_flight {
                    InFlight::Http(request) => request.borrow_mut(py).on_gone(py)?,
                    InFlight::Ws(socket) => socket.borrow_mut(py).fail_and_let_go(py)?,
                }
            }
        }
        Ok((new, sockets, stopped.map(|reason| reason.name())))
    }
}

impl AsgiWorker {
    /// Runs a turn soon (once: until it runs, asking again does nothing).
    fn schedule_turn(&mut self, py: Python<'_>) -> PyResult<()> {
        if !self.turn_scheduled {
            self.turn_scheduled = true;
            if let Some((call_soon, turn)) = &self.schedule_turn {
                call_soon.bind(py).call1((turn.bind(py),))?;
            }
        }
        Ok(())
    }

    /// The awaitable that is done already (what `send` returns when nothing waits).
    fn done(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match &self.done {
            Some(done) => Ok(done.clone_ref(py).into_any()),
            None => ready(py, py.None().into_bound(py)),
        }
    }

    /// Lends the encoder of `exchange`'s compressed response, with its next block (`data`
    /// ended by `end`), to the pool: on the lane of `token`, after its earlier blocks.
    /// Returns the loan's serial; None when nothing was lent (no pool; or the exchange writes
    /// it itself, `Exchange::lend_block`: always with compression off, when it has no lanes).
    fn lend(
        &self,
        token: usize,
        exchange: &mut Exchange,
        data: &[u8],
        end: BlockEnd,
    ) -> Option<u64> {
        let pool = self.pool.as_ref()?;
        let mut loan = exchange.lend_block(data, end)?;
        let serial = self.loans.get() + 1;
        self.loans.set(serial);
        pool.submit(token as u64, move || {
            loan.run();
            Back::Block(serial, loan)
        });
        Some(serial)
    }

    /// A new future of the loop (for a `receive` or a `send` that must wait).
    fn new_future(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let create = self
            .create_future
            .as_ref()
            .ok_or_else(|| PyRuntimeError::new_err("the worker is not started"))?;
        Ok(create.bind(py).call0()?.unbind())
    }
}

/// The `body` (bytes; None when left out: empty) and `more_body` (default False) of a body
/// message.
fn body_of<'py>(message: &Bound<'py, PyDict>) -> PyResult<(Option<Bound<'py, PyBytes>>, bool)> {
    let py = message.py();
    let more = match message.get_item(intern!(py, "more_body"))? {
        Some(value) => value.is_truthy()?,
        None => false,
    };
    let body = match message.get_item(intern!(py, "body"))? {
        None => None,
        Some(value) => Some(
            value
                .cast_into::<PyBytes>()
                .map_err(|_| PyValueError::new_err("'body' must be bytes"))?,
        ),
    };
    Ok((body, more))
}

/// An ASGI header list: `[name, value]` pairs of bytes.
#[allow(clippy::type_complexity)]
fn header_pairs<'py>(
    headers: &Bound<'py, PyAny>,
) -> PyResult<Vec<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>> {
    let mut fields = Vec::new();
    for item in headers.try_iter()? {
        let item = item?;
        let mut pair = item.try_iter()?;
        let (Some(name), Some(value), None) = (pair.next(), pair.next(), pair.next()) else {
            return Err(PyValueError::new_err(
                "each header must be a [name, value] pair of bytes",
            ));
        };
        fields.push((header_bytes(name)?, header_bytes(value)?));
    }
    Ok(fields)
}

/// `CODE REASON` for a status line, written into `buf` (no allocation per response).
fn status_line(buf: &mut [u8; 64], code: u16) -> &[u8] {
    use std::io::Write;
    let mut cursor = std::io::Cursor::new(&mut buf[..]);
    let _ = write!(
        cursor,
        "{code} {}",
        tines_proto::status::reason_phrase(code)
    );
    let end = cursor.position() as usize;
    &buf[..end]
}

/// A header name or value: bytes.
fn header_bytes(value: PyResult<Bound<'_, PyAny>>) -> PyResult<Bound<'_, PyBytes>> {
    value?
        .cast_into::<PyBytes>()
        .map_err(|_| PyValueError::new_err("header names and values must be bytes"))
}
