//! What a request and a WebSocket share: the awaitables their `receive` and `send` return.
//! An answer known at once is a [`Ready`] (no event-loop round trip); a `receive` that waits
//! for the client, or a `send` whose output waits for a slow reader beyond
//! `max_response_buffer`, gets a future of the loop that a later turn settles ([`Waiter`]).
//!
//! The rules of a waiting `send` (ADR 0014 as amended by ADR 0023): it returns once the client
//! has read enough; it raises `ClientDisconnected` once its bytes can no longer reach the
//! client (the client went away, the connection was closed under it, or the client read
//! nothing for `send_timeout`: [`Waiter::send_overdue`], per wait, renewed by every byte the
//! client takes, as the reactor's own writing is).

use std::time::{Duration, Instant};

use pyo3::exceptions::PyStopIteration;
use pyo3::intern;
use pyo3::prelude::*;
use tines_server::mpm::bridge::AsyncReactor;
use tines_server::websocket::WsSession;
use tines_server::Exchange;

use super::{AsgiWorker, ClientDisconnected};

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

impl Ready {
    /// The awaitable that returns None, shared by every `send` that need not wait.
    pub(super) fn none() -> Ready {
        Ready { value: None }
    }
}

/// An already-done awaitable holding `value`.
pub(super) fn ready(py: Python<'_>, value: Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    Ok(Py::new(
        py,
        Ready {
            value: Some(value.unbind()),
        },
    )?
    .into_any())
}

/// Settles `future` with `value` unless it is done already (cancelled, say).
pub(super) fn settle(py: Python<'_>, future: &Py<PyAny>, value: Bound<'_, PyAny>) -> PyResult<()> {
    let future = future.bind(py);
    if !future.call_method0(intern!(py, "done"))?.is_truthy()? {
        future.call_method1(intern!(py, "set_result"), (value,))?;
    }
    Ok(())
}

/// Fails `future` with `ClientDisconnected(reason)` unless it is done already.
fn fail(py: Python<'_>, future: &Py<PyAny>, reason: &str) -> PyResult<()> {
    let future = future.bind(py);
    if !future.call_method0(intern!(py, "done"))?.is_truthy()? {
        let error = ClientDisconnected::new_err(reason.to_owned()).into_value(py);
        future.call_method1(intern!(py, "set_exception"), (error,))?;
    }
    Ok(())
}

/// Output a `send` may wait on: what the reactor writes for a connection while the app goes
/// on (an HTTP response, a WebSocket's frames).
pub(super) trait Output {
    /// Bytes handed over and not yet written to the socket.
    fn unsent(&mut self) -> u64;
    /// Bytes written to the socket so far (what the client took: a waiting `send`'s progress).
    fn written(&mut self) -> u64;
    /// Writes what the socket takes now (before a deadline ends the wait).
    fn write_pending(&mut self);
    /// Asks the reactor for a `Written` note once this output is written; false when nothing
    /// is left to wait for.
    fn watch_written(&mut self, reactor: &AsyncReactor, token: usize) -> bool;
}

impl Output for Exchange {
    fn unsent(&mut self) -> u64 {
        Exchange::unsent(self)
    }

    fn written(&mut self) -> u64 {
        Exchange::written_out(self)
    }

    fn write_pending(&mut self) {
        Exchange::write_pending(self)
    }

    fn watch_written(&mut self, reactor: &AsyncReactor, token: usize) -> bool {
        reactor.watch_written(token, self)
    }
}

impl Output for WsSession {
    fn unsent(&mut self) -> u64 {
        WsSession::unsent(self)
    }

    fn written(&mut self) -> u64 {
        WsSession::written(self)
    }

    fn write_pending(&mut self) {
        WsSession::write_pending(self)
    }

    fn watch_written(&mut self, reactor: &AsyncReactor, token: usize) -> bool {
        reactor.watch_session_written(token, self)
    }
}

/// A request's or a WebSocket's place in the worker (its connection's token), and the
/// futures of its `receive` and `send` while they wait.
pub(super) struct Waiter {
    /// The connection's token in the reactor.
    pub(super) token: usize,
    /// The worker that serves it.
    pub(super) worker: Py<AsgiWorker>,
    /// The future of a `receive` waiting for the client (a message, or the disconnect).
    receive: Option<Py<PyAny>>,
    /// The future of a `send` waiting for its output to be written (slow client).
    send: Option<Py<PyAny>>,
    /// While a `send` waits: when the client last took bytes (or the wait began), and the
    /// output's written count then.
    progress: (Instant, u64),
}

impl Waiter {
    /// A waiter for the connection `token` of `worker`, with nothing waiting.
    pub(super) fn new(token: usize, worker: Py<AsgiWorker>) -> Waiter {
        Waiter {
            token,
            worker,
            receive: None,
            send: None,
            progress: (Instant::now(), 0),
        }
    }

    /// The awaitable that is done already (what a `send` returns when nothing waits).
    pub(super) fn done(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.worker.borrow(py).done(py)
    }

    /// A `receive` that must wait: a new future, settled by [`Waiter::answer_receive`].
    pub(super) fn wait_receive(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let future = self.worker.borrow(py).new_future(py)?;
        self.receive = Some(future.clone_ref(py));
        Ok(future)
    }

    /// Whether a `receive` waits. One the app cancelled (a timeout around it) left a done
    /// future: it no longer counts, and nothing may be taken from an inbox for it.
    pub(super) fn receiving(&mut self, py: Python<'_>) -> PyResult<bool> {
        drop_if_done(py, &mut self.receive)?;
        Ok(self.receive.is_some())
    }

    /// Settles a waiting `receive` with the message `make` builds (only when one waits).
    pub(super) fn answer_receive<'py>(
        &mut self,
        py: Python<'py>,
        make: impl FnOnce() -> PyResult<Bound<'py, PyAny>>,
    ) -> PyResult<()> {
        match self.receive.take() {
            Some(future) => settle(py, &future, make()?),
            None => Ok(()),
        }
    }

    /// Whether a `send` waits for the client.
    pub(super) fn sending(&self) -> bool {
        self.send.is_some()
    }

    /// Lets a waiting `send` return (its output was written, the app's end); true when one
    /// waited.
    pub(super) fn release_send(&mut self, py: Python<'_>) -> PyResult<bool> {
        match self.send.take() {
            Some(future) => settle(py, &future, py.None().into_bound(py)).map(|()| true),
            None => Ok(false),
        }
    }

    /// Makes a waiting `send` raise `ClientDisconnected` (`reason`): its bytes will never reach
    /// the client (gone, closed under it, past `send_timeout`).
    pub(super) fn fail_send(&mut self, py: Python<'_>, reason: &str) -> PyResult<()> {
        match self.send.take() {
            Some(future) => fail(py, &future, reason),
            None => Ok(()),
        }
    }

    /// True when a `send` has waited `timeout` without the client taking a byte of `output`
    /// (checked at each tick of the loop, so up to a tick late). Every byte taken renews the
    /// wait, as the reactor's `send_timeout` is renewed for what it writes itself; at expiry
    /// the output is written to once first, as the reactor's sweep does (ADR 0022).
    pub(super) fn send_overdue<O: Output>(
        &mut self,
        output: Option<&mut O>,
        now: Instant,
        timeout: Duration,
    ) -> bool {
        let (Some(_), Some(output)) = (&self.send, output) else {
            return false;
        };
        let mut written = output.written();
        if written == self.progress.1 && now.duration_since(self.progress.0) >= timeout {
            output.write_pending();
            written = output.written();
            if written == self.progress.1 {
                return true;
            }
        }
        if written != self.progress.1 {
            self.progress = (now, written);
        }
        false
    }

    /// The future of a `send` that waits, to share. One the app cancelled (a timeout around
    /// its `send`, a cancel scope) is done: it is dropped, so that the next `send` gets a new
    /// one, not the cancellation (what the cancelled `send` handed over is sent all the same).
    fn send_waiting(&mut self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        drop_if_done(py, &mut self.send)?;
        Ok(self.send.as_ref().map(|future| future.clone_ref(py)))
    }

    /// A `send` whose compressed block is in the pool: a future, released once the block is
    /// back and sent ([`Waiter::on_written`]); the one already waiting, if any (the block
    /// follows that send's).
    pub(super) fn wait_block<O: Output>(
        &mut self,
        py: Python<'_>,
        output: Option<&mut O>,
    ) -> PyResult<Py<PyAny>> {
        if let Some(waiting) = self.send_waiting(py)? {
            return Ok(waiting);
        }
        let future = self.worker.borrow(py).new_future(py)?;
        self.send = Some(future.clone_ref(py));
        self.progress = (Instant::now(), output.map_or(0, |output| output.written()));
        Ok(future)
    }

    /// After a `send` handed `output` over: done at once unless more than
    /// `max_response_buffer` waits for the client; then a future settled once it is written
    /// ([`Waiter::on_written`]).
    pub(super) fn wait_written<O: Output>(
        &mut self,
        py: Python<'_>,
        output: Option<&mut O>,
    ) -> PyResult<Py<PyAny>> {
        if let Some(waiting) = self.send_waiting(py)? {
            // Another task's `send` already waits on this connection (a broadcaster beside the
            // handler): this one waits for the same release or failure, and the wait's
            // progress mark is not renewed by a send the client took nothing of.
            return Ok(waiting);
        }
        let worker = self.worker.borrow(py);
        let Some(output) = output else {
            return worker.done(py);
        };
        if output.unsent() <= worker.max_response_buffer
            || !output.watch_written(&worker.reactor, self.token)
        {
            return worker.done(py);
        }
        let future = worker.new_future(py)?;
        self.send = Some(future.clone_ref(py));
        self.progress = (Instant::now(), output.written());
        Ok(future)
    }

    /// Output the app waited for was written: its `send` returns once what is left is within
    /// `max_response_buffer` (a note may come from an earlier watch: checked again). True when
    /// the `send` was let go.
    pub(super) fn on_written<O: Output>(
        &mut self,
        py: Python<'_>,
        output: Option<&mut O>,
    ) -> PyResult<bool> {
        if self.send.is_none() {
            return Ok(false);
        }
        if let Some(output) = output {
            let worker = self.worker.borrow(py);
            if output.unsent() > worker.max_response_buffer
                && output.watch_written(&worker.reactor, self.token)
            {
                return Ok(false);
            }
        }
        self.release_send(py)
    }
}

/// Empties `slot` when its future is done: one the app cancelled (a timeout around its
/// `receive` or `send`) no longer counts as waiting.
fn drop_if_done(py: Python<'_>, slot: &mut Option<Py<PyAny>>) -> PyResult<()> {
    if let Some(future) = slot {
        if future
            .bind(py)
            .call_method0(intern!(py, "done"))?
            .is_truthy()?
        {
            *slot = None;
        }
    }
    Ok(())
}
