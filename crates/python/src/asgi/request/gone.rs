//! A request's client gone (seen by the reactor, a block that cannot reach it, a `send` past
//! `send_timeout`), and the request's connection let go to the reactor.
//!
//! It must not write to the client: what is queued for a gone client is dropped.

use std::time::{Duration, Instant};

use pyo3::prelude::*;
use tines_server::Exchange;

use super::{disconnect_message, Request, Response};

impl Request {
    /// The client went away: a waiting `receive` gets `http.disconnect`, a waiting `send`
    /// raises `ClientDisconnected`, as every later one does (ADR 0023). A response cut short
    /// by it drops what it queued now (its memory and disk back, the connection closes when
    /// the app returns): a client that only shut its side and reads nothing would otherwise
    /// hold it for `send_timeout`, for a response that cannot be whole anyway.
    pub(in crate::asgi) fn on_gone(&mut self, py: Python<'_>) -> PyResult<()> {
        self.gone = true;
        // A block in the pool is dropped when it comes back (its serial no longer awaited).
        let block_out = self.loan.take().is_some();
        self.backlog = None;
        if block_out
            || matches!(
                self.response,
                Response::Started | Response::Body | Response::Trailers
            )
        {
            if let Some(exchange) = self.exchange.as_mut() {
                exchange.abandon();
            }
            self.response = Response::Complete;
        }
        self.waiter
            .answer_receive(py, || Ok(disconnect_message(py)?.into_any()))?;
        self.waiter
            .fail_send(py, "the client closed the connection")?;
        if self.returned {
            // The app returned already: nothing else ends the request.
            if let Some(exchange) = self.exchange.take() {
                self.let_go(py, exchange)?;
            }
        }
        Ok(())
    }

    /// The request is over: its connection goes back to the reactor with `exchange`.
    pub(super) fn let_go(&mut self, py: Python<'_>, exchange: Box<Exchange>) -> PyResult<()> {
        self.response = Response::Complete;
        self.waiter
            .answer_receive(py, || Ok(disconnect_message(py)?.into_any()))?;
        self.waiter.release_send(py)?;
        let token = self.waiter.token;
        let mut worker = self.waiter.worker.borrow_mut(py);
        worker.requests.remove(&token);
        if worker.reactor.complete(token, exchange) {
            worker.schedule_turn(py)?;
        }
        Ok(())
    }

    /// "METHOD target: `problem`", for the error log.
    pub(super) fn complaint(&self, problem: &str) -> String {
        format!("{}: {problem}", self.describe())
    }

    /// A `send` that waited `timeout` with the client taking nothing: the response is cut
    /// (what is queued dropped, the connection closes when the app returns) and the client
    /// is treated as gone.
    pub(in crate::asgi) fn expire_send(
        &mut self,
        py: Python<'_>,
        now: Instant,
        timeout: Duration,
    ) -> PyResult<()> {
        // A block in the pool is the server's time, not the client's.
        if self.loan.is_some() {
            return Ok(());
        }
        if !self
            .waiter
            .send_overdue(self.exchange.as_deref_mut(), now, timeout)
        {
            return Ok(());
        }
        // Cut short even when complete: what is queued cannot reach a client that reads nothing.
        if let Some(exchange) = self.exchange.as_mut() {
            exchange.abandon();
        }
        self.response = Response::Complete;
        self.on_gone(py)
    }
}
