//! The worker's limits on its WebSockets as a whole (issue 41, items 4 and 5; ADR 0027): the
//! ceiling on how many it holds (`ws_max_connections`: a handshake beyond it is answered 503
//! before the app sees it), and the receive budget (`ws_receive_buffer_total`): the bytes its
//! clients sent that no app has received yet, the messages being gathered or inflated and the
//! ones waiting in the inboxes, charged together. Past the budget every WebSocket that has more
//! to read waits, its reading paused, until an app receives (or a WebSocket ends) and room
//! opens; one that waits `ws_receive_buffer_timeout` is closed with 1013 (Try Again Later).
//! What an app has received is the app's memory and is not charged.
//!
//! It decides whether to read and whom to wake; the WebSocket (`websocket`) reads, closes and
//! settles the app's futures. The worker runs on one thread (the asyncio loop's): no lock.

use std::time::{Duration, Instant};

use pyo3::prelude::*;
use tines_server::Exchange;

use super::AsgiWorker;

/// The receive budget of one worker.
pub(super) struct WsBudget {
    /// `ws_receive_buffer_total`.
    limit: usize,
    /// `ws_receive_buffer_timeout`.
    timeout: Duration,
    /// Bytes every WebSocket's [`Charge`] holds, together.
    charged: usize,
    /// Tokens of the WebSockets that wait for room, since the last wake-up (each once).
    waiting: Vec<usize>,
    /// Wake-ups so far: a [`Charge`] listed in an earlier one is listed again when it waits.
    round: u64,
}

/// What one WebSocket holds against the budget, and whether it waits for room.
#[derive(Default)]
pub(super) struct Charge {
    bytes: usize,
    /// Since when it waits for room (its reading paused), if it does.
    waiting_since: Option<Instant>,
    /// The wake-up round it is listed for, plus one (0: not listed).
    listed: u64,
}

impl Charge {
    /// True while its WebSocket waits for room (its wait bounded by the budget's timeout).
    pub(super) fn waits(&self) -> bool {
        self.waiting_since.is_some()
    }

    /// Its WebSocket no longer waits for room: it reads (a client gone: what it sent last), or
    /// it is paused for a reason of its own (the app's inbox, a client that reads nothing),
    /// which the budget's timeout is not to judge.
    pub(super) fn stop_waiting(&mut self) {
        self.waiting_since = None;
    }
}

impl WsBudget {
    /// A budget of `limit` bytes; a WebSocket waits at most `timeout` for room.
    pub(super) fn new(limit: u64, timeout: Duration) -> WsBudget {
        WsBudget {
            limit: usize::try_from(limit).unwrap_or(usize::MAX),
            timeout,
            charged: 0,
            waiting: Vec::new(),
            round: 0,
        }
    }

    /// The bytes a read may decode now (0: none, the reader waits).
    pub(super) fn room(&self) -> usize {
        self.limit.saturating_sub(self.charged)
    }

    /// Sets what `charge` holds to `bytes`.
    pub(super) fn recharge(&mut self, charge: &mut Charge, bytes: usize) {
        self.charged = self.charged - charge.bytes + bytes;
        charge.bytes = bytes;
    }

    /// True when the WebSocket `token` may read now; else it is listed to be woken when room
    /// opens, and its wait (for the timeout) begins unless it had begun.
    pub(super) fn may_read(&mut self, token: usize, charge: &mut Charge, now: Instant) -> bool {
        if self.room() > 0 {
            charge.waiting_since = None;
            return true;
        }
        if charge.waiting_since.is_none() {
            charge.waiting_since = Some(now);
            tines_server::log::debug(&format!(
                "a WebSocket waits for room in ws_receive_buffer_total ({} of {} bytes held)",
                self.charged, self.limit
            ));
        }
        if charge.listed != self.round + 1 {
            charge.listed = self.round + 1;
            self.waiting.push(token);
        }
        false
    }

    /// The WebSockets to wake (they look again whether they may read) once there is room:
    /// every one listed, appended to `into`.
    pub(super) fn wake(&mut self, into: &mut Vec<usize>) -> bool {
        if self.waiting.is_empty() || self.room() == 0 {
            return false;
        }
        into.append(&mut self.waiting);
        self.round += 1;
        true
    }

    /// True when `charge` has waited for room longer than the timeout.
    pub(super) fn overdue(&self, charge: &Charge, now: Instant) -> bool {
        charge
            .waiting_since
            .is_some_and(|since| now.duration_since(since) >= self.timeout)
    }
}

impl AsgiWorker {
    /// Sets what a WebSocket's `charge` holds to `bytes`, and wakes the WebSockets that waited
    /// for room if there is some now (they read again in the next turn).
    pub(super) fn recharge(
        &mut self,
        py: Python<'_>,
        charge: &mut Charge,
        bytes: usize,
    ) -> PyResult<()> {
        self.ws_budget.recharge(charge, bytes);
        if self.ws_budget.wake(&mut self.reread) {
            self.schedule_turn(py)?;
        }
        Ok(())
    }

    /// A WebSocket ends (the app returned): it leaves the ceiling's count and frees what it
    /// held of the budget.
    pub(super) fn websocket_ended(&mut self, py: Python<'_>, charge: &mut Charge) -> PyResult<()> {
        self.websockets = self.websockets.saturating_sub(1);
        self.recharge(py, charge, 0)
    }

    /// True when a new handshake must be refused: the worker holds `ws_max_connections`
    /// WebSockets already. Else it is counted from now until [`AsgiWorker::websocket_ended`].
    pub(super) fn admit_websocket(&mut self) -> bool {
        if self.websockets >= self.reactor.config().ws_max_connections {
            return false;
        }
        self.websockets += 1;
        true
    }
}

/// Answers a handshake over the ceiling: 503 with `Retry-After` (RFC 9110 15.6.4), before the
/// app sees it. The kernel spreads new connections over the workers, so a retry may reach one
/// with room.
pub(super) fn refuse_over_ceiling(exchange: &mut Exchange) {
    let body = b"this worker holds as many WebSockets as it may (ws_max_connections)\n";
    let headers: [(&[u8], &[u8]); 2] = [
        (b"Content-Type", b"text/plain; charset=utf-8"),
        (b"Retry-After", b"1"),
    ];
    if exchange
        .begin_response(b"503 Service Unavailable", headers, Some(body.len() as u64))
        .is_ok()
    {
        let _ = exchange.write_body(body).and_then(|()| exchange.finish());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_waits_once_the_budget_is_spent_and_is_woken_once_room_opens() {
        let now = Instant::now();
        let mut budget = WsBudget::new(100, Duration::from_secs(30));
        let (mut first, mut second) = (Charge::default(), Charge::default());
        assert!(budget.may_read(1, &mut first, now));
        budget.recharge(&mut first, 100);
        assert_eq!(budget.room(), 0);
        // Waiting, listed once however often it looks.
        assert!(!budget.may_read(2, &mut second, now));
        assert!(!budget.may_read(2, &mut second, now));
        let mut woken = Vec::new();
        assert!(!budget.wake(&mut woken), "no room yet");
        budget.recharge(&mut first, 40);
        assert!(budget.wake(&mut woken));
        assert_eq!(woken, [2]);
        assert!(!budget.wake(&mut woken), "nobody left to wake");
        assert!(budget.may_read(2, &mut second, now));
        assert_eq!(budget.room(), 60);
    }

    #[test]
    fn a_wait_is_overdue_after_the_timeout_from_its_start_however_often_it_is_woken() {
        let start = Instant::now();
        let mut budget = WsBudget::new(10, Duration::from_secs(30));
        let (mut holder, mut waiter) = (Charge::default(), Charge::default());
        budget.recharge(&mut holder, 10);
        assert!(!budget.may_read(7, &mut waiter, start));
        // Woken by a little room that another reader takes again: it waits on, listed again.
        budget.recharge(&mut holder, 9);
        let mut woken = Vec::new();
        assert!(budget.wake(&mut woken));
        budget.recharge(&mut holder, 10);
        assert!(!budget.may_read(7, &mut waiter, start + Duration::from_secs(20)));
        assert!(!budget.overdue(&waiter, start + Duration::from_secs(29)));
        assert!(budget.overdue(&waiter, start + Duration::from_secs(30)));
        woken.clear();
        budget.recharge(&mut holder, 0);
        assert!(budget.wake(&mut woken));
        assert_eq!(woken, [7]);
        // Reading again ends the wait.
        assert!(budget.may_read(7, &mut waiter, start + Duration::from_secs(31)));
        assert!(!budget.overdue(&waiter, start + Duration::from_secs(99)));
    }
}
