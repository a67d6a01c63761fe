//! ASGI 3 (`http` scope) on the bridge of `tines_server::mpm::bridge` (ADR 0014).
//!
//! `AsgiWorker` holds the worker's reactor, run turn by turn on the thread of the asyncio
//! loop: the loop watches the reactor's epoll fd (`fileno`) and calls `turn`, which handles
//! every socket event and turns the complete requests into `Request` objects (their `scope`
//! built here, in Rust), and settles the futures that waited for a written output or a client
//! that went away. `Request.receive` and
//! `Request.send` return awaitables: an already-done one (`Ready`, no event-loop round trip)
//! whenever the answer is known at once, which is every time for a request whose body is
//! buffered (all of them, ADR 0008) and a response the socket or the response store takes;
//! an asyncio future only to wait for the client (a slow reader: backpressure; or
//! `http.disconnect`). Sends never block the loop (`never_wait` exchanges): the reactor writes
//! what the socket did not take.
//!
//! The Python side (`tines.asgi`) owns the loop, lifespan, the task per request, timeouts and
//! logging; this module owns the per-request objects and every byte.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyOSError, PyRuntimeError, PyStopIteration, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use tines_proto::websocket::deflate::negotiate;
use tines_proto::websocket::{accept_key, Handshake, MessageKind};
use tines_proto::Version;
use tines_server::mpm::bridge::{AsyncEvent, AsyncReactor};
use tines_server::websocket::{ReadOutcome, WsIncoming, WsSession};
use tines_server::{Exchange, Local, Peer};

use crate::scoreboard::PyScoreboard;
use crate::settings::worker_config;
use crate::wsgi::environ::{percent_decode, split_target};

pyo3::create_exception!(
    _core,
    ClientDisconnected,
    PyOSError,
    "The client of this request is gone: what is sent cannot reach it (ASGI: a send on a \
     closed connection raises a subclass of OSError)."
);

/// Body bytes given to the app in one `http.request` message, at most.
const BODY_MESSAGE: usize = 1024 * 1024;

/// An awaitable that is done already: awaiting it returns its value without suspending.
#[pyclass(module = "tines._core", unsendable)]
pub struct Ready {
    value: Option<Py<PyAny>>,
}

#[pymethods]
impl Ready {
    fn __await__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self) -> PyResult<Option<Py<PyAny>>> {
        match self.value.take() {
            // Awaiting it returns None (`await send(...)`).
            None => Ok(None),
            Some(value) => Err(PyStopIteration::new_err((value,))),
        }
    }
}

/// How far the response has gone.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Response {
    /// No `http.response.start` yet.
    None,
    /// `http.response.start` received, kept until the first body message (its length may
    /// then be known).
    Started,
    /// The head is encoded; more body may follow.
    Body,
    /// The last body message was sent (or the response was failed or aborted).
    Complete,
}

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
    /// WebSockets whose last read stopped at its budget: read again next turn.
    reread: Vec<usize>,
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
}

/// What a scope shares with the last one, kept to be copied or reused instead of rebuilt (an
/// IP address formatted into a string, and a dict grown key by key, were a quarter of a hello
/// request's instructions).
#[derive(Default)]
struct ScopeCache {
    /// An `http` scope's constant keys (`type`, `http_version`, `root_path`, `scheme`),
    /// copied (one allocation, no growth) for each scope.
    template: Option<Py<PyDict>>,
    /// The `asgi` dict, copied for each scope (an app may write to its own).
    asgi: Option<Py<PyDict>>,
    /// The last `server` tuple and the listening address it shows.
    server: Option<(std::net::SocketAddr, Py<PyTuple>)>,
    /// The last client address and its text.
    client: Option<(std::net::IpAddr, Py<PyString>)>,
}

#[pymethods]
impl AsgiWorker {
    /// Sets the worker up as `run_worker` does (same arguments, less the app) without
    /// serving: `start` serves, once the app's start-up (lifespan) is done.
    #[new]
    #[pyo3(signature = (settings, listeners, scoreboard, slot, life_fd=None, ready=None, draining=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        settings: &Bound<'_, PyDict>,
        listeners: Vec<i32>,
        scoreboard: &Bound<'_, PyScoreboard>,
        slot: usize,
        life_fd: Option<i32>,
        ready: Option<(i32, Vec<u8>)>,
        draining: Option<(i32, HashMap<String, Vec<u8>>)>,
    ) -> PyResult<Self> {
        let config = worker_config(settings)?;
        let max_response_buffer = config.max_response_buffer as u64;
        let spec = crate::worker::spec(
            config, listeners, scoreboard, slot, life_fd, ready, draining,
        );
        let (reactor, shared) = tines_server::worker::prepare(spec)
            .map_err(|err| PyOSError::new_err(format!("worker failed: {err}")))?;
        Ok(AsgiWorker {
            reactor: AsyncReactor::new(reactor, shared),
            requests: HashMap::new(),
            reread: Vec::new(),
            stopping_told: false,
            events: Vec::new(),
            create_future: None,
            schedule_turn: None,
            turn_scheduled: false,
            state: None,
            done: None,
            max_response_buffer,
            cache: ScopeCache::default(),
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
        self.done = Some(Py::new(py, Ready { value: None })?);
        self.reactor
            .start()
            .map_err(|err| PyOSError::new_err(format!("worker failed: {err}")))
    }

    /// Seconds the loop may wait before the next turn if the fd stays quiet.
    fn timeout(&self) -> f64 {
        self.reactor.timeout().as_secs_f64()
    }

    /// Marks the event loop alive in the scoreboard (the master's watchdog kills an async
    /// worker whose loop stops marking for `request_timeout`).
    fn tick(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let (sockets, interval, timeout) = {
            let this = slf.borrow();
            this.reactor.loop_alive();
            let config = this.reactor.config();
            let sockets: Vec<Py<WebSocket>> = this
                .requests
                .values()
                .filter_map(|in_flight| match in_flight {
                    InFlight::Ws(socket) => Some(socket.clone_ref(py)),
                    InFlight::Http(_) => None,
                })
                .collect();
            (sockets, config.ws_ping_interval, config.ws_ping_timeout)
        };
        for socket in sockets {
            socket.borrow_mut(py).keepalive(py, interval, timeout)?;
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
                    let handshake =
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
                        });
                    match handshake {
                        Ok(None) => {
                            let scope = this.scope(py, &exchange, None)?;
                            let request = Py::new(
                                py,
                                Request {
                                    token,
                                    worker: slf.clone().unbind(),
                                    exchange: Some(exchange),
                                    scope: scope.unbind(),
                                    body_done: false,
                                    response: Response::None,
                                    status: 0,
                                    headers: None,
                                    gone: false,
                                    progress: Instant::now(),
                                    recv_waiter: None,
                                    send_waiter: None,
                                },
                            )?;
                            this.requests
                                .insert(token, InFlight::Http(request.clone_ref(py)));
                            new.push(request);
                        }
                        Ok(Some((key, protocols, offers))) => {
                            let scope = this.scope(py, &exchange, Some(&protocols))?;
                            let socket = Py::new(
                                py,
                                WebSocket {
                                    token,
                                    worker: slf.clone().unbind(),
                                    exchange: Some(exchange),
                                    session: None,
                                    scope: scope.unbind(),
                                    state: WsState::Connecting,
                                    key,
                                    offers,
                                    connect_delivered: false,
                                    inbox: std::collections::VecDeque::new(),
                                    closed: None,
                                    recv_waiter: None,
                                    send_waiter: None,
                                    inbox_bytes: 0,
                                    paused: false,
                                    denial: None,
                                },
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
                (InFlight::Ws(socket), Note::Gone | Note::Readable) => {
                    socket.borrow_mut(py).on_readable(py)
                }
            };
            if let Err(err) = result {
                err.print(py);
                match &in_flight {
                    InFlight::Http(request) => request.borrow_mut(py).on_gone(py)?,
                    InFlight::Ws(socket) => socket.borrow_mut(py).fail(py)?,
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

    /// A new future of the loop (for a `receive` or a `send` that must wait).
    fn new_future(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let create = self
            .create_future
            .as_ref()
            .ok_or_else(|| PyRuntimeError::new_err("the worker is not started"))?;
        Ok(create.bind(py).call0()?.unbind())
    }

    /// The request's scope: `http`, or `websocket` with the subprotocols offered.
    fn scope<'py>(
        &mut self,
        py: Python<'py>,
        exchange: &Exchange,
        websocket: Option<&[String]>,
    ) -> PyResult<Bound<'py, PyDict>> {
        if self.cache.template.is_none() {
            let template = PyDict::new(py);
            template.set_item(intern!(py, "type"), intern!(py, "http"))?;
            template.set_item(intern!(py, "http_version"), intern!(py, "1.1"))?;
            template.set_item(intern!(py, "root_path"), intern!(py, ""))?;
            template.set_item(intern!(py, "scheme"), intern!(py, "http"))?;
            let asgi = PyDict::new(py);
            asgi.set_item(intern!(py, "version"), intern!(py, "3.0"))?;
            asgi.set_item(intern!(py, "spec_version"), intern!(py, "2.4"))?;
            self.cache.template = Some(template.unbind());
            self.cache.asgi = Some(asgi.unbind());
        }
        let (Some(template), Some(asgi)) = (&self.cache.template, &self.cache.asgi) else {
            unreachable!("made above")
        };
        let scope = template.bind(py).copy()?;
        if websocket.is_some() {
            scope.set_item(intern!(py, "type"), intern!(py, "websocket"))?;
        }
        scope.set_item(intern!(py, "asgi"), asgi.bind(py).copy()?)?;
        if exchange.version() == Version::Http10 {
            scope.set_item(intern!(py, "http_version"), intern!(py, "1.0"))?;
        }
        let method = exchange.method();
        scope.set_item(
            intern!(py, "method"),
            match method {
                b"GET" => intern!(py, "GET").clone(),
                b"POST" => intern!(py, "POST").clone(),
                other => PyString::new(py, &String::from_utf8_lossy(other)),
            },
        )?;
        let (raw_path, query) = split_target(exchange.target());
        let decoded = percent_decode(raw_path);
        scope.set_item(
            intern!(py, "path"),
            PyString::new(py, &String::from_utf8_lossy(&decoded)),
        )?;
        scope.set_item(intern!(py, "raw_path"), PyBytes::new(py, raw_path))?;
        scope.set_item(intern!(py, "query_string"), PyBytes::new(py, query))?;
        let mut https = false;
        let headers = PyList::empty(py);
        for (name, value) in exchange.headers() {
            if name.eq_ignore_ascii_case(b"x-forwarded-proto") && exchange.peer_is_trusted_proxy() {
                let proto = value
                    .split(|&b| b == b',')
                    .next()
                    .unwrap_or(b"")
                    .trim_ascii();
                https = proto.eq_ignore_ascii_case(b"https");
            }
            let mut lower = [0u8; 64];
            let name = if !name.iter().any(u8::is_ascii_uppercase) {
                PyBytes::new(py, name)
            } else if name.len() <= lower.len() {
                // Lower-cased on the stack: no allocation for a usual header name.
                let lower = &mut lower[..name.len()];
                lower.copy_from_slice(name);
                lower.make_ascii_lowercase();
                PyBytes::new(py, lower)
            } else {
                PyBytes::new(py, &name.to_ascii_lowercase())
            };
            headers.append(PyTuple::new(py, [name, PyBytes::new(py, value)])?)?;
        }
        scope.set_item(intern!(py, "headers"), headers)?;
        match (https, websocket.is_some()) {
            // The template's.
            (false, false) => {}
            (true, false) => scope.set_item(intern!(py, "scheme"), intern!(py, "https"))?,
            (true, true) => scope.set_item(intern!(py, "scheme"), intern!(py, "wss"))?,
            (false, true) => scope.set_item(intern!(py, "scheme"), intern!(py, "ws"))?,
        }
        match exchange.local() {
            Local::Tcp(addr) => {
                let cached = match &self.cache.server {
                    Some((at, tuple)) if at == addr => tuple.clone_ref(py),
                    _ => {
                        let tuple = PyTuple::new(
                            py,
                            [
                                PyString::new(py, &addr.ip().to_string()).into_any(),
                                addr.port().into_pyobject(py)?.into_any(),
                            ],
                        )?
                        .unbind();
                        self.cache.server = Some((*addr, tuple.clone_ref(py)));
                        tuple
                    }
                };
                scope.set_item(intern!(py, "server"), cached)?
            }
            Local::Unix(path) => {
                scope.set_item(intern!(py, "server"), (path.as_str(), py.None()))?
            }
        }
        match (exchange.client_ip(), exchange.peer()) {
            (Some(ip), Peer::Tcp(addr)) => {
                let text = match &self.cache.client {
                    Some((last, text)) if *last == ip => text.clone_ref(py),
                    _ => {
                        let text = PyString::new(py, &ip.to_string()).unbind();
                        self.cache.client = Some((ip, text.clone_ref(py)));
                        text
                    }
                };
                scope.set_item(intern!(py, "client"), (text, addr.port()))?
            }
            _ => scope.set_item(intern!(py, "client"), py.None())?,
        }
        let extensions = PyDict::new(py);
        if let Some(protocols) = websocket {
            scope.set_item(intern!(py, "subprotocols"), protocols.to_vec())?;
            extensions.set_item(intern!(py, "websocket.http.response"), PyDict::new(py))?;
        }
        scope.set_item(intern!(py, "extensions"), extensions)?;
        if let Some(state) = &self.state {
            scope.set_item(intern!(py, "state"), state.bind(py).copy()?)?;
        }
        Ok(scope)
    }
}

/// One request in flight: its scope, `receive`, `send`, and its end.
#[pyclass(module = "tines._core", unsendable)]
pub struct Request {
    token: usize,
    worker: Py<AsgiWorker>,
    exchange: Option<Box<Exchange>>,
    scope: Py<PyDict>,
    body_done: bool,
    response: Response,
    status: u16,
    headers: Option<Py<PyAny>>,
    gone: bool,
    /// The last progress: dispatch, or the app's last `receive` or `send` (for
    /// `request_timeout`, which counts time without progress, as for WSGI).
    progress: Instant,
    /// The future of a `receive` waiting for `http.disconnect`.
    recv_waiter: Option<Py<PyAny>>,
    /// The future of a `send` waiting for its output to be written (slow client).
    send_waiter: Option<Py<PyAny>>,
}

fn disconnect_message(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let message = PyDict::new(py);
    message.set_item(intern!(py, "type"), intern!(py, "http.disconnect"))?;
    Ok(message)
}

#[pymethods]
impl Request {
    /// The ASGI scope.
    #[getter]
    fn scope(&self, py: Python<'_>) -> Py<PyDict> {
        self.scope.clone_ref(py)
    }

    /// "METHOD target", for log lines.
    fn describe(&self) -> String {
        match &self.exchange {
            Some(exchange) => format!(
                "{} {}",
                String::from_utf8_lossy(exchange.method()),
                String::from_utf8_lossy(exchange.target())
            ),
            None => String::new(),
        }
    }

    /// Seconds since the request last made progress (dispatch, a `receive`, a `send`); 0
    /// while a `send` waits for the client to read (the client's time, not the app's).
    fn idle_seconds(&self) -> f64 {
        if self.send_waiter.is_some() {
            return 0.0;
        }
        self.progress.elapsed().as_secs_f64()
    }

    /// ASGI `receive`: the body in `http.request` messages (at most 1 MiB each), then
    /// `http.disconnect` once the client is gone or the response is complete.
    fn receive(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.progress = Instant::now();
        if !self.body_done && !self.gone {
            if let Some(exchange) = self.exchange.as_mut() {
                let mut body = Vec::new();
                let mut more = true;
                while body.len() < BODY_MESSAGE {
                    let chunk = exchange
                        .fill_body()
                        .map_err(|err| ClientDisconnected::new_err(err.to_string()))?;
                    if chunk.is_empty() {
                        more = false;
                        break;
                    }
                    let take = chunk.len().min(BODY_MESSAGE - body.len());
                    body.extend_from_slice(&chunk[..take]);
                    exchange.consume_body(take);
                }
                self.body_done = !more;
                let message = PyDict::new(py);
                message.set_item(intern!(py, "type"), intern!(py, "http.request"))?;
                message.set_item(intern!(py, "body"), PyBytes::new(py, &body))?;
                message.set_item(intern!(py, "more_body"), more)?;
                return ready(py, message.into_any());
            }
        }
        if self.gone || self.response == Response::Complete || self.exchange.is_none() {
            return ready(py, disconnect_message(py)?.into_any());
        }
        let future = self.new_future(py)?;
        self.recv_waiter = Some(future.clone_ref(py));
        Ok(future)
    }

    /// ASGI `send`: `http.response.start` then `http.response.body` messages.
    fn send(&mut self, py: Python<'_>, message: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.progress = Instant::now();
        let message = message
            .cast::<PyDict>()
            .map_err(|_| PyValueError::new_err("an ASGI message must be a dict"))?;
        let kind = message
            .get_item(intern!(py, "type"))?
            .ok_or_else(|| PyValueError::new_err("an ASGI message needs a 'type'"))?;
        let kind = kind.cast::<PyString>()?.to_str()?;
        if self.gone {
            return Err(ClientDisconnected::new_err(
                "the client closed the connection",
            ));
        }
        match kind {
            "http.response.start" => {
                if self.response != Response::None {
                    return Err(PyRuntimeError::new_err(
                        "http.response.start sent twice (the response has started)",
                    ));
                }
                let status = message
                    .get_item(intern!(py, "status"))?
                    .ok_or_else(|| PyValueError::new_err("http.response.start needs 'status'"))?
                    .extract::<u16>()
                    .map_err(|_| {
                        PyValueError::new_err("'status' must be an int from 100 to 999")
                    })?;
                if !(100..=999).contains(&status) {
                    return Err(PyValueError::new_err(format!(
                        "'status' must be from 100 to 999, got {status}"
                    )));
                }
                self.status = status;
                self.headers = message.get_item(intern!(py, "headers"))?.map(Bound::unbind);
                self.response = Response::Started;
                self.done(py)
            }
            "http.response.body" => {
                let (body, more) = body_of(message)?;
                let body: &[u8] = body.as_ref().map_or(b"", |body| body.as_bytes());
                match self.response {
                    Response::None => {
                        return Err(PyRuntimeError::new_err(
                            "http.response.body before http.response.start",
                        ))
                    }
                    Response::Complete => {
                        return Err(PyRuntimeError::new_err(
                            "http.response.body after the response's last body message",
                        ))
                    }
                    Response::Started => {
                        let length = (!more).then_some(body.len() as u64);
                        self.begin(py, length)?;
                    }
                    Response::Body => {}
                }
                let exchange = self.exchange_mut()?;
                let written = exchange.write_body(body).and_then(|()| {
                    if more {
                        exchange.flush()
                    } else {
                        exchange.finish()
                    }
                });
                if !more {
                    self.response = Response::Complete;
                }
                if let Err(err) = written {
                    self.gone = true;
                    return Err(ClientDisconnected::new_err(err.to_string()));
                }
                self.wait_written(py)
            }
            other => Err(PyValueError::new_err(format!(
                "unknown ASGI message type {other:?} for an http scope"
            ))),
        }
    }

    /// The app raised: a 500 (closing) when no byte of the response was sent, else the
    /// connection closes.
    fn fail(&mut self) {
        self.fail_with(500);
    }

    /// The request overran `request_timeout` (its task is being cancelled): a 503 (closing)
    /// when no byte of the response was sent, else the connection closes.
    fn fail_timeout(&mut self) {
        self.fail_with(503);
    }

    /// The app returned (or failed): the request ends and its connection goes back to the
    /// reactor. Returns what was wrong with the response, for the error log ("METHOD target:
    /// what"), if anything: none started (a 500 is sent), or it stopped before its last body
    /// message (the connection closes).
    fn end(&mut self, py: Python<'_>) -> PyResult<Option<String>> {
        let Some(mut exchange) = self.exchange.take() else {
            return Ok(None);
        };
        let problem = match self.response {
            Response::Complete => None,
            Response::None => {
                exchange.fail(500);
                Some("the app returned without starting a response (500 sent)")
            }
            Response::Started | Response::Body => {
                if exchange.response_committed() || self.response == Response::Body {
                    exchange.abort();
                } else {
                    exchange.fail(500);
                }
                Some("the app returned before its response's last body message (connection closed)")
            }
        };
        let complaint = problem.map(|problem| {
            format!(
                "{} {}: {problem}",
                String::from_utf8_lossy(exchange.method()),
                String::from_utf8_lossy(exchange.target())
            )
        });
        self.response = Response::Complete;
        if let Some(future) = self.recv_waiter.take() {
            settle(py, &future, disconnect_message(py)?.into_any())?;
        }
        if let Some(future) = self.send_waiter.take() {
            settle(py, &future, py.None().into_bound(py))?;
        }
        let mut worker = self.worker.borrow_mut(py);
        worker.requests.remove(&self.token);
        if worker.reactor.complete(self.token, exchange) {
            worker.schedule_turn(py)?;
        }
        Ok(complaint)
    }
}

/// An already-done awaitable holding `value`.
fn ready(py: Python<'_>, value: Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    Ok(Py::new(
        py,
        Ready {
            value: Some(value.unbind()),
        },
    )?
    .into_any())
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

/// Settles `future` with `value` unless it is done already (cancelled, say).
fn settle(py: Python<'_>, future: &Py<PyAny>, value: Bound<'_, PyAny>) -> PyResult<()> {
    let future = future.bind(py);
    if !future.call_method0(intern!(py, "done"))?.is_truthy()? {
        future.call_method1(intern!(py, "set_result"), (value,))?;
    }
    Ok(())
}

impl Request {
    fn fail_with(&mut self, status: u16) {
        if self.response == Response::Complete {
            return;
        }
        if let Some(exchange) = self.exchange.as_mut() {
            if exchange.response_committed() {
                exchange.abort();
            } else {
                exchange.fail(exchange.fault().unwrap_or(status));
            }
        }
        self.response = Response::Complete;
    }

    fn exchange_mut(&mut self) -> PyResult<&mut Box<Exchange>> {
        self.exchange
            .as_mut()
            .ok_or_else(|| PyRuntimeError::new_err("the request is over"))
    }

    fn done(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.worker.borrow(py).done(py)
    }

    fn new_future(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.worker.borrow(py).new_future(py)
    }

    /// Encodes the head kept from `http.response.start`; `length` is the body's when the
    /// first body message is also the last.
    fn begin(&mut self, py: Python<'_>, length: Option<u64>) -> PyResult<()> {
        let fields = match &self.headers {
            Some(headers) => header_pairs(headers.bind(py))?,
            None => Vec::new(),
        };
        let mut line = [0u8; 64];
        let status = status_line(&mut line, self.status);
        let exchange = self.exchange_mut()?;
        exchange
            .begin_response(
                status,
                fields
                    .iter()
                    .map(|(name, value)| (name.as_bytes(), value.as_bytes())),
                length,
            )
            .map_err(|err| PyValueError::new_err(format!("bad response head: {err}")))?;
        self.response = Response::Body;
        Ok(())
    }

    /// After a body message: done at once unless more than `max_response_buffer` waits for
    /// the client; then a future settled when it is written.
    fn wait_written(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let limit = self.worker.borrow(py).max_response_buffer;
        let token = self.token;
        let exchange = self.exchange_mut()?;
        if exchange.unsent() <= limit {
            return self.done(py);
        }
        let watched = {
            let worker = self.worker.borrow(py);
            let exchange = self.exchange.as_mut().expect("checked above");
            worker.reactor.watch_written(token, exchange)
        };
        if !watched {
            return self.done(py);
        }
        let future = self.new_future(py)?;
        self.send_waiter = Some(future.clone_ref(py));
        Ok(future)
    }

    /// The client went away: a waiting `receive` gets `http.disconnect`, a waiting `send`
    /// returns (the next one raises).
    fn on_gone(&mut self, py: Python<'_>) -> PyResult<()> {
        self.gone = true;
        if let Some(future) = self.recv_waiter.take() {
            settle(py, &future, disconnect_message(py)?.into_any())?;
        }
        if let Some(future) = self.send_waiter.take() {
            settle(py, &future, py.None().into_bound(py))?;
        }
        Ok(())
    }

    /// Output the app waited for was written: its `send` returns once what is left is within
    /// `max_response_buffer` (a note may come from an earlier watch: checked again).
    fn on_written(&mut self, py: Python<'_>) -> PyResult<()> {
        if self.send_waiter.is_none() {
            return Ok(());
        }
        let limit = self.worker.borrow(py).max_response_buffer;
        let token = self.token;
        let Some(exchange) = self.exchange.as_mut() else {
            return Ok(());
        };
        if exchange.unsent() > limit {
            let worker = self.worker.borrow(py);
            if worker.reactor.watch_written(token, exchange) {
                return Ok(());
            }
        }
        if let Some(future) = self.send_waiter.take() {
            // The client's wait is over: the app's time counts again from now.
            self.progress = Instant::now();
            settle(py, &future, py.None().into_bound(py))?;
        }
        Ok(())
    }
}

// --------------------------------------------------------------------------- WebSocket

/// Where a WebSocket stands, as the app drives it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum WsState {
    /// The handshake waits for `websocket.accept` (or a denial).
    Connecting,
    /// A denial response was started (`websocket.http.response.start`): its body follows.
    Denying,
    /// Accepted: messages flow.
    Open,
    /// Closed (or denied): nothing more is sent.
    Closed,
}

/// One WebSocket in flight: its scope, `receive`, `send`, and its end.
#[pyclass(module = "tines._core", unsendable)]
pub struct WebSocket {
    token: usize,
    worker: Py<AsgiWorker>,
    /// The handshake's request, until accepted or denied.
    exchange: Option<Box<Exchange>>,
    session: Option<WsSession>,
    scope: Py<PyDict>,
    state: WsState,
    key: Vec<u8>,
    offers: Vec<Vec<u8>>,
    connect_delivered: bool,
    inbox: std::collections::VecDeque<(Py<PyAny>, usize)>,
    /// How the connection ended (code, reason), once it has; delivered as
    /// `websocket.disconnect` when the inbox is empty.
    closed: Option<(u16, String)>,
    /// The future of a `receive` waiting for a message.
    recv_waiter: Option<Py<PyAny>>,
    /// The future of a `send` waiting for its output to be written (slow client).
    send_waiter: Option<Py<PyAny>>,
    /// Bytes of the messages waiting in `inbox`.
    inbox_bytes: usize,
    /// Reading from the client is paused: the app is behind (`inbox` is full) or the client
    /// reads nothing (pongs and echoes pile up); resumed by `receive` and by written output.
    paused: bool,
    /// The denial response's status and headers (`websocket.http.response.start`).
    denial: Option<(u16, Option<Py<PyAny>>)>,
}

fn disconnect_ws<'py>(py: Python<'py>, code: u16, reason: &str) -> PyResult<Bound<'py, PyAny>> {
    let message = PyDict::new(py);
    message.set_item(intern!(py, "type"), intern!(py, "websocket.disconnect"))?;
    message.set_item(intern!(py, "code"), code)?;
    message.set_item(intern!(py, "reason"), reason)?;
    Ok(message.into_any())
}

#[pymethods]
impl WebSocket {
    /// The ASGI scope.
    #[getter]
    fn scope(&self, py: Python<'_>) -> Py<PyDict> {
        self.scope.clone_ref(py)
    }

    /// "WEBSOCKET path", for log lines.
    fn describe(&self, py: Python<'_>) -> String {
        let scope = self.scope.bind(py);
        let path = scope
            .get_item(intern!(py, "path"))
            .ok()
            .flatten()
            .map(|path| path.to_string())
            .unwrap_or_default();
        format!("WEBSOCKET {path}")
    }

    /// ASGI `receive`: `websocket.connect`, then the client's messages, then
    /// `websocket.disconnect`.
    fn receive(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        if let Some(message) = self.next_message(py)? {
            self.resume_reading(py)?;
            return ready(py, message.into_bound(py));
        }
        let future = self.new_future(py)?;
        self.recv_waiter = Some(future.clone_ref(py));
        Ok(future)
    }

    /// ASGI `send`: `websocket.accept`, `websocket.send`, `websocket.close`, and the denial
    /// response (`websocket.http.response.start` / `.body`).
    fn send(&mut self, py: Python<'_>, message: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let message = message
            .cast::<PyDict>()
            .map_err(|_| PyValueError::new_err("an ASGI message must be a dict"))?;
        let kind = message
            .get_item(intern!(py, "type"))?
            .ok_or_else(|| PyValueError::new_err("an ASGI message needs a 'type'"))?;
        let kind = kind.cast::<PyString>()?.to_str()?.to_owned();
        match (kind.as_str(), self.state) {
            ("websocket.accept", WsState::Connecting) => {
                self.accept(py, message)?;
                self.done(py)
            }
            ("websocket.send", WsState::Open) => {
                let text = message
                    .get_item(intern!(py, "text"))?
                    .filter(|v| !v.is_none());
                let bytes = message
                    .get_item(intern!(py, "bytes"))?
                    .filter(|v| !v.is_none());
                let session = self.session.as_mut().expect("open");
                let sent = match (text, bytes) {
                    (Some(text), None) => {
                        let text = text.cast::<PyString>().map_err(|_| {
                            PyValueError::new_err("websocket.send 'text' must be a str")
                        })?;
                        session.send(MessageKind::Text, text.to_str()?.as_bytes())
                    }
                    (None, Some(bytes)) => {
                        let bytes = bytes.cast::<PyBytes>().map_err(|_| {
                            PyValueError::new_err("websocket.send 'bytes' must be bytes")
                        })?;
                        session.send(MessageKind::Binary, bytes.as_bytes())
                    }
                    _ => {
                        return Err(PyValueError::new_err(
                            "websocket.send needs exactly one of 'text' and 'bytes'",
                        ))
                    }
                };
                if let Err(err) = sent {
                    return Err(ClientDisconnected::new_err(err.to_string()));
                }
                self.wait_written(py)
            }
            ("websocket.send", WsState::Closed) => {
                Err(ClientDisconnected::new_err("the WebSocket is closed"))
            }
            ("websocket.close", WsState::Connecting) => {
                // Closed before accepting: the handshake is refused (403).
                self.deny(py, 403, None, b"")?;
                self.done(py)
            }
            ("websocket.close", WsState::Open) => {
                let code = match message.get_item(intern!(py, "code"))? {
                    Some(code) if !code.is_none() => code.extract::<u16>()?,
                    _ => 1000,
                };
                if !tines_proto::websocket::is_valid_close_code(code) {
                    return Err(PyValueError::new_err(format!(
                        "websocket.close code {code} may not be sent (RFC 6455 7.4: 1000-1003, \
                         1007-1014 or 3000-4999)"
                    )));
                }
                let reason = match message.get_item(intern!(py, "reason"))? {
                    Some(reason) if !reason.is_none() => reason.extract::<String>()?,
                    _ => String::new(),
                };
                let session = self.session.as_mut().expect("open");
                let _ = session.send_close(code, &reason);
                self.state = WsState::Closed;
                // Closed by the app: what the client sent and the app did not take is dropped;
                // `receive` now returns `websocket.disconnect` (the connection ends when the
                // app returns, after the client's close or the linger).
                self.inbox.clear();
                self.inbox_bytes = 0;
                if self.closed.is_none() {
                    self.closed = Some((code, reason));
                }
                self.done(py)
            }
            ("websocket.close", WsState::Closed) => self.done(py),
            ("websocket.http.response.start", WsState::Connecting) => {
                let status = message
                    .get_item(intern!(py, "status"))?
                    .ok_or_else(|| {
                        PyValueError::new_err("websocket.http.response.start needs 'status'")
                    })?
                    .extract::<u16>()?;
                let headers = message.get_item(intern!(py, "headers"))?.map(Bound::unbind);
                self.denial = Some((status, headers));
                self.state = WsState::Denying;
                self.done(py)
            }
            ("websocket.http.response.body", WsState::Denying) => {
                let (body, more) = body_of(message)?;
                let body: &[u8] = body.as_ref().map_or(b"", |body| body.as_bytes());
                if more {
                    return Err(PyValueError::new_err(
                        "a denial response's body must come in one message (more_body is not supported)",
                    ));
                }
                let (status, headers) = self.denial.take().expect("denying");
                self.deny(py, status, headers, body)?;
                self.done(py)
            }
            (other, state) => Err(PyRuntimeError::new_err(format!(
                "unexpected ASGI message {other:?} {}",
                match state {
                    WsState::Connecting => "before websocket.accept",
                    WsState::Denying => "during the denial response",
                    WsState::Open => "on an open WebSocket",
                    WsState::Closed => "after the WebSocket closed",
                }
            ))),
        }
    }

    /// The app raised: a 500 before the handshake was answered, else close with 1011.
    fn fail(&mut self, py: Python<'_>) -> PyResult<()> {
        match self.state {
            WsState::Connecting | WsState::Denying => self.deny(py, 500, None, b"")?,
            WsState::Open => {
                if let Some(session) = self.session.as_mut() {
                    let _ = session.send_close(1011, "");
                }
                self.state = WsState::Closed;
            }
            WsState::Closed => {}
        }
        Ok(())
    }

    /// As `fail` (WebSockets are exempt from `request_timeout`; kept for one interface).
    fn fail_timeout(&mut self, py: Python<'_>) -> PyResult<()> {
        self.fail(py)
    }

    /// The app returned: the connection ends (closed with 1000 if the app did not close it;
    /// a 500 if it never answered the handshake). Returns what was wrong, for the log.
    fn end(&mut self, py: Python<'_>) -> PyResult<Option<String>> {
        let mut complaint = None;
        if matches!(self.state, WsState::Connecting | WsState::Denying) {
            complaint = Some(format!(
                "{}: the app returned without accepting or denying the WebSocket (500 sent)",
                self.describe(py)
            ));
            self.deny(py, 500, None, b"")?;
        }
        if let Some(future) = self.recv_waiter.take() {
            let (code, reason) = self.closed.clone().unwrap_or((1000, String::new()));
            settle(py, &future, disconnect_ws(py, code, &reason)?)?;
        }
        if let Some(future) = self.send_waiter.take() {
            settle(py, &future, py.None().into_bound(py))?;
        }
        let mut worker = self.worker.borrow_mut(py);
        worker.requests.remove(&self.token);
        let first = match (self.session.take(), self.exchange.take()) {
            (Some(mut session), _) => {
                if !session.close_sent() {
                    let _ = session.send_close(1000, "");
                }
                worker.reactor.complete_websocket(self.token, session)
            }
            (None, Some(exchange)) => worker.reactor.complete(self.token, exchange),
            (None, None) => false,
        };
        self.state = WsState::Closed;
        if first {
            worker.schedule_turn(py)?;
        }
        Ok(complaint)
    }
}

impl WebSocket {
    fn done(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.worker.borrow(py).done(py)
    }

    fn new_future(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.worker.borrow(py).new_future(py)
    }

    /// The next message `receive` gives, if one is ready.
    fn next_message(&mut self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        if !self.connect_delivered {
            self.connect_delivered = true;
            let message = PyDict::new(py);
            message.set_item(intern!(py, "type"), intern!(py, "websocket.connect"))?;
            return Ok(Some(message.into_any().unbind()));
        }
        if let Some((message, size)) = self.inbox.pop_front() {
            self.inbox_bytes -= size;
            return Ok(Some(message));
        }
        if let Some((code, reason)) = &self.closed {
            return Ok(Some(disconnect_ws(py, *code, reason)?.unbind()));
        }
        if self.state == WsState::Closed {
            return Ok(Some(disconnect_ws(py, 1000, "")?.unbind()));
        }
        Ok(None)
    }

    /// Settles a waiting `receive` if a message is ready.
    fn wake_receiver(&mut self, py: Python<'_>) -> PyResult<()> {
        // A `receive` the app cancelled (a timeout around it) left a done future: no message
        // may be taken from the inbox for it.
        if let Some(future) = &self.recv_waiter {
            if future
                .bind(py)
                .call_method0(intern!(py, "done"))?
                .is_truthy()?
            {
                self.recv_waiter = None;
            }
        }
        if self.recv_waiter.is_some() {
            if let Some(message) = self.next_message(py)? {
                if let Some(future) = self.recv_waiter.take() {
                    settle(py, &future, message.into_bound(py))?;
                }
                self.resume_reading(py)?;
            }
        }
        Ok(())
    }

    /// Reads again if reading was paused and the app (or the client) caught up. Bytes that
    /// arrived meanwhile raised their edge already: they are read now, not on an event.
    fn resume_reading(&mut self, py: Python<'_>) -> PyResult<()> {
        if self.paused && !self.must_pause(py) {
            self.paused = false;
            self.on_readable(py)?;
        }
        Ok(())
    }

    /// True when reading must wait: the app has a message's worth waiting in its inbox, or
    /// the client reads nothing and more than `max_response_buffer` (pongs, echoes) waits.
    fn must_pause(&mut self, py: Python<'_>) -> bool {
        let worker = self.worker.borrow(py);
        let limit = worker.max_response_buffer;
        let inbox_limit = worker.reactor.config().ws_max_message_size.max(1 << 20) as usize;
        drop(worker);
        self.inbox_bytes >= inbox_limit
            || self
                .session
                .as_mut()
                .is_some_and(|session| session.unsent() > limit)
    }

    /// Answers the handshake with a refusal: `status`, the app's `headers`, `body`.
    fn deny(
        &mut self,
        py: Python<'_>,
        status: u16,
        headers: Option<Py<PyAny>>,
        body: &[u8],
    ) -> PyResult<()> {
        self.state = WsState::Closed;
        let Some(exchange) = self.exchange.as_mut() else {
            return Ok(());
        };
        let fields = match &headers {
            Some(headers) => header_pairs(headers.bind(py))?,
            None => Vec::new(),
        };
        let mut line = [0u8; 64];
        if exchange
            .begin_response(
                status_line(&mut line, status),
                fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
                Some(body.len() as u64),
            )
            .is_ok()
        {
            let _ = exchange.write_body(body).and_then(|()| exchange.finish());
        } else {
            exchange.fail(500);
        }
        Ok(())
    }

    /// `websocket.accept`: the 101, with the agreed subprotocol and permessage-deflate.
    fn accept(&mut self, py: Python<'_>, message: &Bound<'_, PyDict>) -> PyResult<()> {
        let subprotocol = match message.get_item(intern!(py, "subprotocol"))? {
            Some(value) if !value.is_none() => Some(value.extract::<String>()?),
            _ => None,
        };
        let app_headers = match message.get_item(intern!(py, "headers"))? {
            Some(headers) => header_pairs(&headers)?,
            None => Vec::new(),
        };
        let accept = accept_key(&self.key);
        let (deflate, extension) = {
            let worker = self.worker.borrow(py);
            let config = worker.reactor.config();
            let offers: Vec<&[u8]> = self.offers.iter().map(Vec::as_slice).collect();
            match config
                .ws_per_message_deflate
                .then(|| negotiate(&offers, config.ws_server_max_window_bits, false))
                .flatten()
            {
                Some((agreement, named)) => {
                    let header = agreement.response_header(named);
                    (Some(agreement), Some(header))
                }
                None => (None, None),
            }
        };
        let mut headers: Vec<(&[u8], &[u8])> = vec![(b"Sec-WebSocket-Accept", accept.as_bytes())];
        if let Some(protocol) = &subprotocol {
            headers.push((b"Sec-WebSocket-Protocol", protocol.as_bytes()));
        }
        if let Some(extension) = &extension {
            headers.push((b"Sec-WebSocket-Extensions", extension.as_bytes()));
        }
        for (name, value) in &app_headers {
            headers.push((name.as_bytes(), value.as_bytes()));
        }
        let exchange = self.exchange.take().expect("connecting");
        let (result, session) = {
            let mut worker = self.worker.borrow_mut(py);
            worker.reactor.upgrade(exchange, &headers, deflate)
        };
        self.session = Some(session);
        self.state = WsState::Open;
        if let Err(err) = result {
            self.state = WsState::Closed;
            self.closed = Some((1006, err.to_string()));
            return Ok(());
        }
        // A worker that began stopping while the app decided: closed at once (1001), as the
        // others were.
        if self.worker.borrow(py).reactor.is_stopping() {
            return self.going_away(py);
        }
        // Frames the client sent with its handshake raise no edge of their own.
        self.on_readable(py)
    }

    /// Reads and decodes what the client sent; wakes a waiting `receive`.
    fn on_readable(&mut self, py: Python<'_>) -> PyResult<()> {
        if self.session.is_none() || self.paused {
            return Ok(());
        }
        if self.state == WsState::Open && self.must_pause(py) {
            self.paused = true;
            return Ok(());
        }
        let Some(session) = self.session.as_mut() else {
            return Ok(());
        };
        let mut incoming = Vec::new();
        let outcome = session.read(&mut incoming);
        for item in incoming {
            match item {
                WsIncoming::Message { kind, data } => {
                    let size = data.len();
                    let message = PyDict::new(py);
                    message.set_item(intern!(py, "type"), intern!(py, "websocket.receive"))?;
                    match kind {
                        MessageKind::Text => {
                            // Checked UTF-8 by the decoder (or after inflation).
                            let text = String::from_utf8(data).map_err(|_| {
                                PyRuntimeError::new_err("a text message is not UTF-8")
                            })?;
                            message.set_item(intern!(py, "text"), text)?;
                        }
                        MessageKind::Binary => {
                            message.set_item(intern!(py, "bytes"), PyBytes::new(py, &data))?;
                        }
                    }
                    self.inbox.push_back((message.into_any().unbind(), size));
                    self.inbox_bytes += size;
                }
                WsIncoming::Closed { code, reason } => {
                    self.state = WsState::Closed;
                    if self.closed.is_none() {
                        self.closed = Some((code, reason));
                    }
                }
            }
        }
        if outcome == ReadOutcome::More {
            let mut worker = self.worker.borrow_mut(py);
            worker.reread.push(self.token);
            worker.schedule_turn(py)?;
        }
        if self.state == WsState::Closed {
            if let Some(future) = self.send_waiter.take() {
                settle(py, &future, py.None().into_bound(py))?;
            }
        }
        self.wake_receiver(py)
    }

    /// After a message: done at once unless more than `max_response_buffer` waits for the
    /// client; then a future settled when it is written.
    fn wait_written(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let limit = self.worker.borrow(py).max_response_buffer;
        let token = self.token;
        let Some(session) = self.session.as_mut() else {
            return self.done(py);
        };
        if session.unsent() <= limit {
            return self.done(py);
        }
        let watched = {
            let worker = self.worker.borrow(py);
            let session = self.session.as_mut().expect("checked above");
            worker.reactor.watch_session_written(token, session)
        };
        if !watched {
            return self.done(py);
        }
        let future = self.new_future(py)?;
        self.send_waiter = Some(future.clone_ref(py));
        Ok(future)
    }

    fn on_written(&mut self, py: Python<'_>) -> PyResult<()> {
        self.resume_reading(py)?;
        if self.send_waiter.is_none() {
            return Ok(());
        }
        let limit = self.worker.borrow(py).max_response_buffer;
        let token = self.token;
        if let Some(session) = self.session.as_mut() {
            if session.unsent() > limit {
                let worker = self.worker.borrow(py);
                if worker.reactor.watch_session_written(token, session) {
                    return Ok(());
                }
            }
        }
        if let Some(future) = self.send_waiter.take() {
            settle(py, &future, py.None().into_bound(py))?;
        }
        Ok(())
    }

    /// The worker is stopping: close with 1001 (the app gets `websocket.disconnect`).
    fn going_away(&mut self, py: Python<'_>) -> PyResult<()> {
        if self.state != WsState::Open {
            return Ok(());
        }
        if let Some(session) = self.session.as_mut() {
            let _ = session.send_close(1001, "server shutting down");
        }
        self.state = WsState::Closed;
        if self.closed.is_none() {
            self.closed = Some((1001, "server shutting down".into()));
        }
        self.wake_receiver(py)
    }

    /// The keep-alive: a ping after `interval` of silence; closed (1011) when one goes
    /// unanswered for `timeout`.
    fn keepalive(&mut self, py: Python<'_>, interval: Duration, timeout: Duration) -> PyResult<()> {
        if self.state != WsState::Open || interval.is_zero() {
            return Ok(());
        }
        let Some(session) = self.session.as_mut() else {
            return Ok(());
        };
        let now = Instant::now();
        match session.ping_outstanding {
            Some(sent) if now.duration_since(sent) >= timeout => {
                let _ = session.send_close(1011, "keepalive ping timeout");
                self.state = WsState::Closed;
                self.closed = Some((1011, "keepalive ping timeout".into()));
                self.wake_receiver(py)?;
            }
            None if now.duration_since(session.last_seen) >= interval => {
                let _ = session.send_ping();
            }
            _ => {}
        }
        Ok(())
    }
}
