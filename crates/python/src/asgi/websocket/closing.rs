//! How a WebSocket ends (ADR 0023): whichever way it closes (either side's close frame, the
//! client gone, the ping timeout, the stop, `send_timeout`), its connection goes back to the
//! reactor at once ([`WebSocket::hand_back`]), not when the app returns, and a waiting `send`
//! raises.

use std::time::{Duration, Instant};

use pyo3::prelude::*;

use super::{WebSocket, WsState};

impl WebSocket {
    /// The reactor saw the client close its side (or the socket fail): read what it sent
    /// before, paused or not, to the close frame, the EOF or the error (the kernel holds no
    /// more than its receive buffer once the client stopped sending).
    pub(in crate::asgi) fn on_gone(&mut self, py: Python<'_>) -> PyResult<()> {
        self.gone = true;
        self.on_readable(py)
    }

    /// A `send` that waited `timeout` with the client taking nothing: the client is treated
    /// as gone (1006; its fd closed, what is queued dropped).
    pub(in crate::asgi) fn expire_send(
        &mut self,
        py: Python<'_>,
        now: Instant,
        timeout: Duration,
    ) -> PyResult<()> {
        if !self
            .waiter
            .send_overdue(self.session.as_mut(), now, timeout)
        {
            return Ok(());
        }
        if self.closed.is_none() {
            self.closed = Some((1006, "send_timeout: the client read nothing".into()));
        }
        self.hand_back(py, true)
    }

    /// The server failed on this WebSocket (a note's handling raised): closed with 1011 and let
    /// go as every other close is, so no waiting `send` or `receive` is left behind and no fd
    /// is kept for a client that then says nothing.
    pub(in crate::asgi) fn fail_and_let_go(&mut self, py: Python<'_>) -> PyResult<()> {
        self.fail(py)?;
        if self.closed.is_none() {
            self.closed = Some((1011, "internal error".into()));
        }
        self.hand_back(py, false)
    }

    /// The WebSocket is closed: its connection goes back to the reactor now, whatever the app
    /// does next. `vanished`: nothing more can reach the client (gone, or past
    /// `send_timeout`), so the fd closes at once and what is queued is dropped; else the
    /// reactor writes what is queued (the close frame last) and lingers until the client
    /// closes. A waiting `send` raises `ClientDisconnected`; a waiting `receive` gets what is
    /// left in the inbox, then `websocket.disconnect`.
    pub(super) fn hand_back(&mut self, py: Python<'_>, vanished: bool) -> PyResult<()> {
        self.state = WsState::Closed;
        self.paused = false;
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        let token = self.waiter.token;
        {
            let mut worker = self.waiter.worker.borrow_mut(py);
            // The token may be another connection's from the next turn on.
            worker.requests.remove(&token);
            let first = if vanished {
                worker.reactor.drop_websocket(token, session)
            } else {
                worker.reactor.complete_websocket(token, session)
            };
            if first {
                worker.schedule_turn(py)?;
            }
        }
        // What it held of the receive budget but the inbox goes with the session.
        self.recharge(py)?;
        let reason = match &self.closed {
            Some((code, reason)) => format!("the WebSocket is closed ({code} {reason})"),
            None => "the WebSocket is closed".to_owned(),
        };
        self.waiter.fail_send(py, &reason)?;
        self.wake_receiver(py)
    }
}
