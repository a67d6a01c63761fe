//! An ASGI `websocket` connection in flight: the handshake (`websocket.accept`, or a denial
//! answered as HTTP), then messages both ways over the reactor's `WsSession`, with reading
//! paused while the app or the client is behind or the worker's receive budget is spent
//! (`limits`), the keep-alive pings, and the close.
//!
//! Every way a WebSocket closes goes through `closing` (ADR 0023).

use std::collections::VecDeque;
use std::time::Instant;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};
use tines_proto::websocket::deflate::negotiate;
use tines_proto::websocket::{accept_key, MessageKind};
use tines_server::websocket::{ReadOutcome, WsIncoming, WsSession};
use tines_server::Exchange;

mod closing;

use super::waiter::{ready, Waiter};
use super::ws_limits::Charge;
use super::{body_of, header_pairs, status_line, AsgiWorker, ClientDisconnected};

mod limits;

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
    /// Its connection in the worker, and what its `receive` and `send` wait on.
    waiter: Waiter,
    /// The handshake's request, until accepted or denied.
    exchange: Option<Box<Exchange>>,
    session: Option<WsSession>,
    scope: Py<PyDict>,
    state: WsState,
    key: Vec<u8>,
    offers: Vec<Vec<u8>>,
    connect_delivered: bool,
    inbox: VecDeque<(Py<PyAny>, usize)>,
    /// How the connection ended (code, reason), once it has; delivered as
    /// `websocket.disconnect` when the inbox is empty.
    closed: Option<(u16, String)>,
    /// Bytes of the messages waiting in `inbox`.
    inbox_bytes: usize,
    /// Reading from the client is paused: the app is behind (`inbox` is full) or the client
    /// reads nothing (pongs and echoes pile up); resumed by `receive` and by written output.
    paused: bool,
    /// The denial response's status and headers (`websocket.http.response.start`).
    denial: Option<(u16, Option<Py<PyAny>>)>,
    /// The reactor saw the client close its side or the socket fail: what it sent before is
    /// read to the end even while reading is paused (a client behind on reading would
    /// otherwise never be seen gone).
    gone: bool,
    /// What it holds of the worker's receive budget (`ws_limits`).
    charge: Charge,
    /// When a data message last went either way (`ws_idle_timeout`).
    last_message: Instant,
}

impl WebSocket {
    /// The WebSocket whose handshake `exchange` holds (checked, not yet answered), on the
    /// connection `token`; `key` and `offers` are the handshake's key and the
    /// `Sec-WebSocket-Extensions` offers.
    pub(super) fn new(
        token: usize,
        worker: Py<AsgiWorker>,
        exchange: Box<Exchange>,
        scope: Bound<'_, PyDict>,
        key: Vec<u8>,
        offers: Vec<Vec<u8>>,
    ) -> WebSocket {
        WebSocket {
            waiter: Waiter::new(token, worker),
            exchange: Some(exchange),
            session: None,
            scope: scope.unbind(),
            state: WsState::Connecting,
            key,
            offers,
            connect_delivered: false,
            inbox: VecDeque::new(),
            closed: None,
            inbox_bytes: 0,
            paused: false,
            denial: None,
            gone: false,
            charge: Charge::default(),
            last_message: tines_server::clock::recent(),
        }
    }
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
        self.waiter.wait_receive(py)
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
                self.waiter.done(py)
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
                    // The write failed: the client is gone (let go now, 1006).
                    if self.closed.is_none() {
                        self.closed = Some((1006, err.to_string()));
                    }
                    self.hand_back(py, true)?;
                    return Err(ClientDisconnected::new_err(err.to_string()));
                }
                self.last_message = tines_server::clock::recent();
                self.wait_written(py)
            }
            ("websocket.send", WsState::Closed) => {
                Err(ClientDisconnected::new_err("the WebSocket is closed"))
            }
            ("websocket.close", WsState::Connecting) => {
                // Closed before accepting: the handshake is refused (403).
                self.deny(py, 403, None, b"")?;
                self.waiter.done(py)
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
                // Closed by the app: what the client sent and the app did not take is dropped;
                // `receive` now returns `websocket.disconnect`, and the reactor writes the
                // close frame and lingers until the client closes (or `linger_timeout`).
                self.inbox.clear();
                self.inbox_bytes = 0;
                self.recharge(py)?;
                if self.closed.is_none() {
                    self.closed = Some((code, reason));
                }
                self.hand_back(py, false)?;
                self.waiter.done(py)
            }
            ("websocket.close", WsState::Closed) => self.waiter.done(py),
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
                self.waiter.done(py)
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
                self.waiter.done(py)
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
    pub(super) fn fail(&mut self, py: Python<'_>) -> PyResult<()> {
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
        let closed = &self.closed;
        self.waiter.answer_receive(py, || {
            let (code, reason) = closed
                .as_ref()
                .map_or((1000, ""), |(c, r)| (*c, r.as_str()));
            disconnect_ws(py, code, reason)
        })?;
        self.waiter.release_send(py)?;
        let token = self.waiter.token;
        let mut worker = self.waiter.worker.borrow_mut(py);
        // Given back when it closed (`hand_back`): the token may be another connection's now.
        let handed_back = self.session.is_none() && self.exchange.is_none();
        if !handed_back {
            worker.requests.remove(&token);
        }
        worker.websocket_ended(py, &mut self.charge)?;
        let first = match (self.session.take(), self.exchange.take()) {
            (Some(mut session), _) => {
                if !session.close_sent() {
                    let _ = session.send_close(1000, "");
                }
                worker.reactor.complete_websocket(token, session)
            }
            (None, Some(exchange)) => worker.reactor.complete(token, exchange),
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
            self.recharge(py)?;
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
        if self.waiter.receiving(py)? {
            if let Some(message) = self.next_message(py)? {
                self.waiter
                    .answer_receive(py, || Ok(message.into_bound(py)))?;
                self.resume_reading(py)?;
            }
        }
        Ok(())
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
            let worker = self.waiter.worker.borrow(py);
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
            let mut worker = self.waiter.worker.borrow_mut(py);
            worker
                .reactor
                .upgrade(self.waiter.token, exchange, &headers, deflate)
        };
        self.session = Some(session);
        self.state = WsState::Open;
        if let Err(err) = result {
            self.closed = Some((1006, err.to_string()));
            return self.hand_back(py, true);
        }
        // A worker that began stopping while the app decided: closed at once (1001), as the
        // others were.
        if self.waiter.worker.borrow(py).reactor.is_stopping() {
            return self.going_away(py);
        }
        // Frames the client sent with its handshake raise no edge of their own.
        self.on_readable(py)
    }

    /// Reads and decodes what the client sent; wakes a waiting `receive`.
    pub(super) fn on_readable(&mut self, py: Python<'_>) -> PyResult<()> {
        if self.session.is_none() {
            return Ok(());
        }
        if self.gone && (self.waiter.worker.borrow(py).ws_budget.room() == 0 || self.inbox_full(py))
        {
            // Gone, with no room in the receive budget (or its inbox full) to read what it sent
            // last: let go now rather than wait for room, or take more than one connection's
            // share of the budget (ADR 0027).
            if self.closed.is_none() {
                self.closed = Some((1006, "the client went away".into()));
            }
            return self.hand_back(py, true);
        }
        if self.paused && !self.gone {
            // Woken by room in the receive budget (or a new edge): reads if it may now.
            return self.resume_reading(py);
        }
        let pause = if self.gone {
            self.charge.stop_waiting();
            false
        } else if self.state == WsState::Open {
            self.must_pause(py)
        } else {
            !self.budget_allows(py)
        };
        if pause {
            self.paused = true;
            return Ok(());
        }
        let allowance = self.waiter.worker.borrow(py).ws_budget.room();
        let Some(session) = self.session.as_mut() else {
            return Ok(());
        };
        let mut incoming = Vec::new();
        let outcome = session.read(&mut incoming, allowance);
        for item in incoming {
            match item {
                WsIncoming::Message { kind, data } => {
                    self.last_message = tines_server::clock::recent();
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
        self.recharge(py)?;
        if outcome == ReadOutcome::More {
            let mut worker = self.waiter.worker.borrow_mut(py);
            worker.reread.push(self.waiter.token);
            worker.schedule_turn(py)?;
        }
        if self.state == WsState::Closed {
            // The close handshake is done, the client broke a rule (the close frame with its
            // code goes out), or it went away without a close frame (1006: nothing more can
            // reach it).
            let vanished = self.closed.as_ref().is_some_and(|(code, _)| *code == 1006);
            return self.hand_back(py, vanished);
        }
        self.wake_receiver(py)
    }

    /// After a message: done at once unless the client is behind (see [`Waiter`]).
    fn wait_written(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.waiter.wait_written(py, self.session.as_mut())
    }

    /// Output was written: reading may resume, a waiting `send` may return.
    pub(super) fn on_written(&mut self, py: Python<'_>) -> PyResult<()> {
        self.resume_reading(py)?;
        self.waiter.on_written(py, self.session.as_mut())?;
        Ok(())
    }

    /// The worker is stopping: close with 1001 (the app gets `websocket.disconnect`).
    pub(super) fn going_away(&mut self, py: Python<'_>) -> PyResult<()> {
        if self.state != WsState::Open {
            return Ok(());
        }
        if let Some(session) = self.session.as_mut() {
            let _ = session.send_close(1001, "server shutting down");
        }
        if self.closed.is_none() {
            self.closed = Some((1001, "server shutting down".into()));
        }
        // The reactor writes the close frame (and what was queued before it) and lingers, all
        // within the stop's start plus `linger_timeout`.
        self.hand_back(py, false)
    }
}
