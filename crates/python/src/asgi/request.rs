//! An ASGI `http` request in flight: its scope, `receive` (the buffered body, then
//! `http.disconnect`), `send` (`http.response.start`, then `http.response.body` messages
//! written through the exchange, then, when the start said `trailers`, the
//! `http.response.trailers` messages of the trailers extension), and its end, which gives the
//! connection back to the reactor.

use std::time::Instant;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};
use tines_proto::response::{check_app_header, AppHeader};
use tines_server::exchange::BlockEnd;
use tines_server::Exchange;

mod gone;
mod offload;

use super::waiter::{ready, Waiter};
use super::{body_of, header_pairs, status_line, AsgiWorker, ClientDisconnected};

/// Body bytes given to the app in one `http.request` message, at most.
const BODY_MESSAGE: usize = 1024 * 1024;

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
    /// The last body message was sent and the start asked for trailers: the
    /// `http.response.trailers` messages complete the response.
    Trailers,
    /// The last body message was sent (or the response was failed or aborted).
    Complete,
}

/// One request in flight: its scope, `receive`, `send`, and its end.
#[pyclass(module = "tines._core", unsendable)]
pub struct Request {
    /// Its connection in the worker, and what its `receive` and `send` wait on.
    waiter: Waiter,
    exchange: Option<Box<Exchange>>,
    scope: Py<PyDict>,
    body_done: bool,
    response: Response,
    status: u16,
    headers: Option<Py<PyAny>>,
    /// `http.response.start` said `trailers`: the body is chunked (its length not announced,
    /// so that the trailer section can follow it) and trailer messages follow it.
    trailers: bool,
    /// The trailer fields received so far (`more_trailers`), written with the last message.
    trailer_fields: Vec<(Vec<u8>, Vec<u8>)>,
    gone: bool,
    /// The last progress: dispatch, or the app's last `receive` or `send` (for
    /// `request_timeout`, which counts time without progress, as for WSGI).
    progress: Instant,
    /// The serial of this response's block out in the compression pool: the exchange is not
    /// touched for the response until it comes back ([`Request::loan_back`]).
    loan: Option<u64>,
    /// Body the app sent while a block was out (a `send` not awaited, or another task's),
    /// and how its last message ended: lent, in order, when the block comes back.
    backlog: Option<(Vec<u8>, BlockEnd)>,
    /// The app returned while its response's last block was in the pool (all of its body
    /// handed over, a `send` it did not await): the request ends once the block is back and
    /// sent ([`Request::loan_back`]), or its client is gone.
    returned: bool,
}

impl Request {
    /// The request held in `exchange`, just dispatched on the connection `token`.
    pub(super) fn new(
        token: usize,
        worker: Py<AsgiWorker>,
        exchange: Box<Exchange>,
        scope: Bound<'_, PyDict>,
    ) -> Request {
        Request {
            waiter: Waiter::new(token, worker),
            exchange: Some(exchange),
            scope: scope.unbind(),
            body_done: false,
            response: Response::None,
            status: 0,
            headers: None,
            trailers: false,
            trailer_fields: Vec::new(),
            gone: false,
            progress: Instant::now(),
            loan: None,
            backlog: None,
            returned: false,
        }
    }
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
    /// while a `send` waits for the client to read (the client's time, not the app's). A block
    /// in the compression pool is the server's time: it counts, so that `request_timeout`
    /// still ends a request whose block never comes back.
    fn idle_seconds(&self) -> f64 {
        if self.waiter.sending() && self.loan.is_none() {
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
        self.waiter.wait_receive(py)
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
                self.trailers = match message.get_item(intern!(py, "trailers"))? {
                    Some(value) => value.is_truthy()?,
                    None => false,
                };
                self.response = Response::Started;
                self.waiter.done(py)
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
                    Response::Complete | Response::Trailers => {
                        return Err(PyRuntimeError::new_err(
                            "http.response.body after the response's last body message",
                        ))
                    }
                    Response::Started => {
                        // With trailers to follow, the body is chunked whatever its length.
                        let length = (!more && !self.trailers).then_some(body.len() as u64);
                        self.begin(py, length)?;
                    }
                    Response::Body => {}
                }
                let trailers = self.trailers;
                let end = if more {
                    BlockEnd::Flush
                } else if trailers {
                    BlockEnd::Write
                } else {
                    BlockEnd::Finish
                };
                if self.loan.is_some() || self.exchange_mut()?.is_compressing() {
                    // Compressed: the block goes to the pool, off the loop (issue 39's
                    // follow-up, ADR 0037), and the send returns once it is sent.
                    if let Some(waiting) = self.send_compressed(py, body, end)? {
                        if !more {
                            self.response = if trailers {
                                Response::Trailers
                            } else {
                                Response::Complete
                            };
                        }
                        return Ok(waiting);
                    }
                }
                let written = self.write_inline(py, body, end);
                if !more {
                    self.response = if trailers {
                        Response::Trailers
                    } else {
                        Response::Complete
                    };
                }
                if let Err(err) = written {
                    self.gone = true;
                    return Err(ClientDisconnected::new_err(err.to_string()));
                }
                self.waiter.wait_written(py, self.exchange.as_deref_mut())
            }
            "http.response.trailers" => self.send_trailers(py, message),
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
    /// what"), if anything: none started (a 500 is sent; nothing said when the client was gone
    /// first), or it stopped before its last body message (the connection closes).
    fn end(&mut self, py: Python<'_>) -> PyResult<Option<String>> {
        if self.returned {
            return Ok(None);
        }
        // All of the body was handed over, its last block still in the pool (the app did not
        // await that `send`, or another task does): the response is delivered when it is back.
        // A cancelled or failed app aborted it already (`fail_with`), a gone client too.
        if self.loan.is_some() && matches!(self.response, Response::Complete | Response::Trailers) {
            self.returned = true;
            self.waiter
                .answer_receive(py, || Ok(disconnect_message(py)?.into_any()))?;
            return Ok(
                (self.response == Response::Trailers).then(|| self.complaint(TRAILERS_MISSING))
            );
        }
        let Some(mut exchange) = self.exchange.take() else {
            return Ok(None);
        };
        if self.loan.take().is_some() {
            // The app returned before its last body message, a block of it in the pool.
            self.backlog = None;
            exchange.abort();
        }
        let problem = match self.response {
            Response::Complete => None,
            Response::Trailers => {
                let _ = exchange.finish_with_trailers(&self.trailer_refs());
                Some(TRAILERS_MISSING)
            }
            Response::None => {
                exchange.fail(500);
                // A client gone before the response started hears nothing whatever the app
                // did: its `send` raised ClientDisconnected, or it saw `http.disconnect`.
                (!self.gone).then_some("the app returned without starting a response (500 sent)")
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
        self.let_go(py, exchange)?;
        Ok(complaint)
    }
}

/// What `end` says of a response whose trailers did not all come.
const TRAILERS_MISSING: &str = "the app returned before its last http.response.trailers message (the trailers sent so far end the response)";

impl Request {
    fn fail_with(&mut self, status: u16) {
        if self.loan.is_some() {
            // Cancelled (or failed) with a block in the pool: the response cannot be whole,
            // the connection closes; the block is dropped when it comes back.
            self.loan = None;
            self.backlog = None;
            if let Some(exchange) = self.exchange.as_mut() {
                exchange.abort();
            }
            self.response = Response::Complete;
            return;
        }
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

    /// `http.response.trailers`: its fields are checked as a head's are (a Content-Length,
    /// or a hop-by-hop field, is refused: RFC 9110 6.5.1) and kept; the last message (no
    /// `more_trailers`) writes them after the body's last chunk and completes the response.
    fn send_trailers(
        &mut self,
        py: Python<'_>,
        message: &Bound<'_, PyDict>,
    ) -> PyResult<Py<PyAny>> {
        match self.response {
            Response::Trailers => {}
            _ if !self.trailers => {
                return Err(PyRuntimeError::new_err(
                    "http.response.trailers without 'trailers': True in http.response.start",
                ))
            }
            Response::Complete => {
                return Err(PyRuntimeError::new_err(
                    "http.response.trailers after the response's last trailers message",
                ))
            }
            Response::None | Response::Started | Response::Body => {
                return Err(PyRuntimeError::new_err(
                    "http.response.trailers before the response's last body message",
                ))
            }
        }
        if let Some(headers) = message.get_item(intern!(py, "headers"))? {
            for (name, value) in header_pairs(&headers)? {
                let (name, value) = (name.as_bytes(), value.as_bytes());
                match check_app_header(name, value) {
                    Ok(AppHeader::Plain) => {}
                    Ok(AppHeader::ContentLength(_)) => {
                        return Err(PyValueError::new_err(
                            "bad trailer: Content-Length cannot be a trailer field",
                        ))
                    }
                    Err(err) => {
                        return Err(PyValueError::new_err(format!(
                            "bad trailer ({err}): {:?}",
                            String::from_utf8_lossy(name)
                        )))
                    }
                }
                self.trailer_fields.push((name.to_vec(), value.to_vec()));
            }
        }
        let more = match message.get_item(intern!(py, "more_trailers"))? {
            Some(value) => value.is_truthy()?,
            None => false,
        };
        if more {
            return self.waiter.done(py);
        }
        if self.loan.is_some() || self.exchange_mut()?.is_compressing() {
            // Ending a compressed stream is work: in the pool, the fields kept for its end.
            if let Some(waiting) = self.send_compressed(py, b"", BlockEnd::Finish)? {
                self.response = Response::Complete;
                return Ok(waiting);
            }
        }
        let fields = std::mem::take(&mut self.trailer_fields);
        let refs: Vec<(&[u8], &[u8])> = fields
            .iter()
            .map(|(name, value)| (name.as_slice(), value.as_slice()))
            .collect();
        let exchange = self.exchange_mut()?;
        // Ending a compressed stream is work: with the GIL released (ADR 0037).
        let written = if exchange.is_compressing() {
            py.detach(|| exchange.finish_with_trailers(&refs))
        } else {
            exchange.finish_with_trailers(&refs)
        };
        self.response = Response::Complete;
        if let Err(err) = written {
            self.gone = true;
            return Err(ClientDisconnected::new_err(err.to_string()));
        }
        self.waiter.wait_written(py, self.exchange.as_deref_mut())
    }

    /// The trailer fields kept so far, as the exchange takes them.
    fn trailer_refs(&self) -> Vec<(&[u8], &[u8])> {
        self.trailer_fields
            .iter()
            .map(|(name, value)| (name.as_slice(), value.as_slice()))
            .collect()
    }

    /// Encodes the head kept from `http.response.start`; `length` is the body's when the
    /// first body message is also the last. With trailers asked for, the app's `Trailer`
    /// field (which announces them: RFC 9110 6.6.2, a SHOULD) is left out: the exchange
    /// refuses it with the other hop-by-hop fields of PEP 3333, and HTTP/2 and chunked
    /// clients take trailers without it.
    fn begin(&mut self, py: Python<'_>, length: Option<u64>) -> PyResult<()> {
        let mut fields = match &self.headers {
            Some(headers) => header_pairs(headers.bind(py))?,
            None => Vec::new(),
        };
        if self.trailers {
            fields.retain(|(name, _)| !name.as_bytes().eq_ignore_ascii_case(b"trailer"));
        }
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

    /// Writes a block here, on the loop (with the GIL released when compressing: ADR 0037):
    /// `data`, then what `end` asks.
    fn write_inline(&mut self, py: Python<'_>, data: &[u8], end: BlockEnd) -> std::io::Result<()> {
        let fields = if end == BlockEnd::Finish && self.trailers {
            std::mem::take(&mut self.trailer_fields)
        } else {
            Vec::new()
        };
        let refs: Vec<(&[u8], &[u8])> = fields
            .iter()
            .map(|(name, value)| (name.as_slice(), value.as_slice()))
            .collect();
        let trailers = self.trailers;
        let Some(exchange) = self.exchange.as_deref_mut() else {
            return Ok(());
        };
        let compressing = exchange.is_compressing();
        let mut write = || {
            exchange.write_body(data).and_then(|()| match end {
                BlockEnd::Flush => exchange.flush(),
                // Kept (as far as the buffer holds it) for the trailers' one write.
                BlockEnd::Write => Ok(()),
                BlockEnd::Finish if trailers => exchange.finish_with_trailers(&refs),
                BlockEnd::Finish => exchange.finish(),
            })
        };
        // Compressing is CPU work: done with the GIL released (ADR 0037), so that the
        // worker's other Python threads run meanwhile; the send writes without waiting.
        if compressing {
            py.detach(write)
        } else {
            write()
        }
    }

    /// Output the app waited for was written: a waiting `send` may return.
    pub(super) fn on_written(&mut self, py: Python<'_>) -> PyResult<()> {
        if self.loan.is_some() {
            // The send waits for its block too: checked when the block is back.
            return Ok(());
        }
        if self.waiter.on_written(py, self.exchange.as_deref_mut())? {
            // The client's wait is over: the app's time counts again from now.
            self.progress = Instant::now();
        }
        Ok(())
    }
}
