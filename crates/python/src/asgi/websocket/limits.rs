//! The WebSocket's side of its worker's limits (`ws_limits`, ADR 0027): when its reading pauses
//! (a message's worth in the app's inbox, a client that reads nothing, no room in the receive
//! budget) and resumes, charging the budget with what it holds, and the closes the tick
//! decides: 1011 after a keep-alive ping goes unanswered for `ws_ping_timeout`, 1001 after
//! `ws_idle_timeout` without a data message, 1013 after waiting `ws_receive_buffer_timeout`
//! for room.
//!
//! Kept apart from `websocket` (the app's protocol) so that the limits read as one piece; it
//! settles the app's futures through the same `Waiter`.

use std::time::{Duration, Instant};

use pyo3::prelude::*;

use super::{WebSocket, WsState};

impl WebSocket {
    /// Reads again if reading was paused and the app (or the client) caught up. Bytes that
    /// arrived meanwhile raised their edge already: they are read now, not on an event.
    pub(super) fn resume_reading(&mut self, py: Python<'_>) -> PyResult<()> {
        if self.paused && !self.must_pause(py) {
            self.paused = false;
            self.on_readable(py)?;
        }
        Ok(())
    }

    /// True when the app has a message's worth waiting in its inbox.
    pub(super) fn inbox_full(&self, py: Python<'_>) -> bool {
        let limit = self
            .waiter
            .worker
            .borrow(py)
            .reactor
            .config()
            .ws_max_message_size
            .max(1 << 20);
        self.inbox_bytes >= limit as usize
    }

    /// True when reading must wait: the app has a message's worth waiting in its inbox, or
    /// the client reads nothing and more than `max_response_buffer` (pongs, echoes) waits,
    /// or the worker's receive budget has no room.
    pub(super) fn must_pause(&mut self, py: Python<'_>) -> bool {
        let limit = self.waiter.worker.borrow(py).max_response_buffer;
        if self.inbox_full(py)
            || self
                .session
                .as_mut()
                .is_some_and(|session| session.unsent() > limit)
        {
            self.charge.stop_waiting();
            return true;
        }
        !self.budget_allows(py)
    }

    /// True when the worker's receive budget has room for this WebSocket's reading; else it
    /// waits, woken when room opens (closed with 1013 if it waits too long).
    pub(super) fn budget_allows(&mut self, py: Python<'_>) -> bool {
        let now = tines_server::clock::recent();
        let mut worker = self.waiter.worker.borrow_mut(py);
        worker
            .ws_budget
            .may_read(self.waiter.token, &mut self.charge, now)
    }

    /// Charges the worker's receive budget with what this WebSocket holds now: the message
    /// being gathered, the bytes not decoded, and the inbox.
    pub(super) fn recharge(&mut self, py: Python<'_>) -> PyResult<()> {
        let held = self
            .session
            .as_ref()
            .map_or(0, tines_server::websocket::WsSession::buffered)
            + self.inbox_bytes;
        self.waiter
            .worker
            .borrow_mut(py)
            .recharge(py, &mut self.charge, held)
    }

    /// The worker's limits (each tick): closed with 1001 after `ws_idle_timeout` without a
    /// data message either way (pings and pongs do not count), or with 1013 after waiting
    /// `ws_receive_buffer_timeout` for room in the receive budget (then dropping what it
    /// holds of it).
    pub(in crate::asgi) fn enforce_limits(
        &mut self,
        py: Python<'_>,
        now: Instant,
        idle_timeout: Duration,
    ) -> PyResult<()> {
        if self.session.is_none() {
            // Closed and given back already.
            return Ok(());
        }
        if self.state == WsState::Open
            && !idle_timeout.is_zero()
            && now.saturating_duration_since(self.last_message) >= idle_timeout
        {
            return self.close_for_limit(py, 1001, "idle timeout", false);
        }
        if self
            .waiter
            .worker
            .borrow(py)
            .ws_budget
            .overdue(&self.charge, now)
        {
            tines_server::log::debug(&format!(
                "{}: closed with 1013, no room in ws_receive_buffer_total for its timeout",
                self.describe(py)
            ));
            return self.close_for_limit(py, 1013, "receive buffer full", true);
        }
        Ok(())
    }

    /// Closes from the server's side for a limit: the close frame goes out and the connection
    /// goes back to the reactor (`hand_back`, ADR 0023); the app's waiting `receive` gets
    /// `websocket.disconnect` with `code`. `abandon`: nothing more is read, and the message
    /// being gathered and the inbox are dropped (their room freed).
    fn close_for_limit(
        &mut self,
        py: Python<'_>,
        code: u16,
        reason: &str,
        abandon: bool,
    ) -> PyResult<()> {
        if let Some(session) = self.session.as_mut() {
            if abandon {
                session.abandon(code, reason);
            } else {
                let _ = session.send_close(code, reason);
            }
        }
        if abandon {
            self.inbox.clear();
            self.inbox_bytes = 0;
        }
        if self.closed.is_none() {
            self.closed = Some((code, reason.into()));
        }
        self.hand_back(py, false)
    }

    /// The keep-alive: a ping after `interval` of silence; closed (1011) when one goes
    /// unanswered for `timeout`.
    pub(in crate::asgi) fn keepalive(
        &mut self,
        py: Python<'_>,
        interval: Duration,
        timeout: Duration,
    ) -> PyResult<()> {
        if self.state != WsState::Open || interval.is_zero() {
            return Ok(());
        }
        let Some(session) = self.session.as_mut() else {
            return Ok(());
        };
        let now = Instant::now();
        match session.ping_outstanding {
            // Waiting for room in the receive budget, its reading paused, the pong may sit
            // unread: that wait has its own bound (`ws_receive_buffer_timeout`, then 1013).
            Some(_) if self.charge.waits() => {}
            Some(sent) if now.duration_since(sent) >= timeout => {
                let _ = session.send_close(1011, "keepalive ping timeout");
                self.closed = Some((1011, "keepalive ping timeout".into()));
                self.hand_back(py, false)?;
            }
            None if now.duration_since(session.last_seen) >= interval => {
                let _ = session.send_ping();
            }
            _ => {}
        }
        Ok(())
    }
}
