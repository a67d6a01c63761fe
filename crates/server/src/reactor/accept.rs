//! Accepting connections: watching the listeners or not (level-triggered, so a paused
//! listener must be deregistered), the fair-share throttle between workers, `max_connections`,
//! and the back-off after a failed accept (how often one is logged: `log::LineThrottle`).
//!
//! It registers what it accepts in the entry table (a TLS listener's connections wrapped in a
//! session, `Transport::Tls`, whose handshake the connection's first reads run) and hands it
//! to `dispatch`; it must not read from or write to a connection.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{Driver, Entry, Reactor, LISTENER_BASE};
use crate::connection::{Connection, Http2Choice};
use crate::listener::{H2c, FAIR_SHARE_FLOOR};
use crate::poller::{Token, Trigger};
use crate::tls::conn::TlsConn;
use crate::transport::Transport;

/// A throttled worker looks again after this long: short enough not to leave connections in
/// the backlog when every worker is over its share, long enough not to spin.
const THROTTLE_PAUSE: Duration = Duration::from_millis(5);

/// How long accept pauses after a failure before trying the queue again.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// The log line of a failed accept logged with `held_back` not logged before it.
fn accept_error_line(err: &std::io::Error, held_back: u64) -> String {
    if held_back == 0 {
        format!("accept failed: {err}")
    } else {
        format!("accept failed: {err} ({held_back} more since the last such line, not logged)")
    }
}

impl Reactor {
    /// Stops watching the listeners (level-triggered: a queued connection would wake us
    /// again and again).
    pub(super) fn pause_listening(&mut self) {
        if self.listening {
            for listener in &self.listeners {
                let _ = self.poller.deregister(listener.fd());
            }
            self.listening = false;
        }
    }

    /// Stops watching the listeners and closes this worker's copy of them (the final stop,
    /// after the queue was taken, and when the reactor is dropped; `Listener::close`). An event
    /// for a listener already fetched in this turn matches no token any more and is ignored.
    pub(super) fn close_listeners(&mut self) {
        self.pause_listening();
        for listener in self.listeners.drain(..) {
            listener.close();
        }
    }

    /// Watches the listeners again unless stopping, throttled, full or saturated.
    pub(super) fn resume_listening(&mut self) {
        if self.listening
            || self.stop.is_some()
            || self.throttled_until.is_some()
            || self.full
            || self.saturated
        {
            return;
        }
        for (index, listener) in self.listeners.iter().enumerate() {
            if let Err(err) = self.poller.register(
                listener.fd(),
                Token(LISTENER_BASE - index as u64),
                Trigger::Level,
            ) {
                crate::log::error(&format!("cannot watch the listener again: {err}"));
            }
        }
        self.listening = true;
    }

    fn over_fair_share(&self) -> bool {
        let mine = self.open as u64;
        if mine < FAIR_SHARE_FLOOR as u64 {
            return false;
        }
        let (total, live) = self.shared.scoreboard().accept_totals();
        live > 1 && mine * live > 2 * total
    }

    pub(super) fn manage_throttle(&mut self) {
        if self.stop.is_some() {
            return;
        }
        if let Some(until) = self.throttled_until {
            if Instant::now() >= until && !self.over_fair_share() {
                self.throttled_until = None;
                self.resume_listening();
            } else if Instant::now() >= until {
                self.throttled_until = Some(Instant::now() + THROTTLE_PAUSE);
            }
        }
    }

    /// Whether this worker leaves new connections to the others while its app slots are all
    /// taken: only when there are others (one worker has nobody to leave them to, and the
    /// extra `epoll_ctl` calls would only cost).
    fn accepts_only_when_free(&self) -> bool {
        self.shared.config.workers > 1
    }

    /// Watches the listeners again once an app slot is free, after `on_acceptable` stopped
    /// watching them because none was (see [`Driver::can_take_connection`]). Pausing is lazy,
    /// on a listener event that finds no free slot, so a worker whose load hovers around its
    /// thread count does not pay two `epoll_ctl` calls per request. Runs after each loop
    /// iteration and after connections come back.
    pub(super) fn manage_saturation(&mut self, driver: &dyn Driver) {
        if self.saturated && driver.can_take_connection() {
            self.saturated = false;
            self.resume_listening();
        }
    }

    pub(super) fn on_acceptable(&mut self, index: usize, driver: &mut dyn Driver) {
        if !self.listening {
            return;
        }
        if self.over_fair_share() {
            // Level-triggered: stop watching the listeners for a moment, or we would spin.
            self.pause_listening();
            self.throttled_until = Some(Instant::now() + THROTTLE_PAUSE);
            return;
        }
        // One connection per readiness, served (once its head is there) before this worker
        // takes another: a worker takes no connection it cannot start serving now (prefork
        // serves inline, so a connection it took while serving another would wait behind it
        // while other workers sit idle). The listener is level-triggered, so the next turn of
        // the loop reports it again while connections are queued.
        //
        // Why not accept on until EAGAIN (or a batch): an accept that finds the queue empty
        // is not cheap on Linux, which allocates the new socket's inode, file and dentry
        // before it looks at the queue and frees them again (a deferred fput on the way back
        // to user space). With `Connection: close` load that was one empty accept for every
        // other connection, and accept cost 1.7x bjoern's (which accepts once per readiness).
        if self.shared.recycle_requested() || self.control.stop_pending() {
            // The last request of `max_requests` was served, or a stop signal came while the
            // app ran (prefork serves inline): take nothing more; the loop begins the stop
            // after this batch of events.
            return;
        }
        if self.accepts_only_when_free() && !driver.can_take_connection() {
            self.saturated = true;
            self.pause_listening();
            return;
        }
        // Left parked, not read at once: its head usually follows the handshake by a moment,
        // and a read that finds nothing costs a system call (it was one for nearly every
        // connection under `Connection: close` load). The poller reports the head (the socket
        // is registered edge-triggered, and epoll reports data already there), in the next
        // turn, before the listener (`run` handles listener events last).
        if !self.deferred.is_empty() {
            // The responses held for the batch (ADR 0011) go out before a new connection is
            // taken: its request runs inline next, and if it kills the worker (a request of
            // death: `os._exit`, a segfault) every response still held dies with it, the
            // answers of other clients already computed. A response to a kept-alive
            // connection's next request is still batched (no accept between them).
            self.flush_deferred(driver);
        }
        let deferred = self.listeners[index].deferred();
        let Some(token) = self.accept_one(index, !deferred) else {
            return;
        };
        if self.listening && self.shared.config.workers > 1 {
            // All idle workers wake for a new connection, in the order they sit in the
            // listener's wait queue, and the first one woken usually wins the accept. Moving
            // to the back of that queue after accepting gives each worker its turn (a fair
            // share of connections), at the cost of two epoll_ctl calls per accepting wake-up.
            let fd = self.listeners[index].fd();
            let token = Token(LISTENER_BASE - index as u64);
            if self.poller.deregister(fd).is_ok() {
                if let Err(err) = self.poller.register(fd, token, Trigger::Level) {
                    crate::log::error(&format!("cannot watch the listener again: {err}"));
                }
            }
        }
        if deferred {
            self.first_read(token, driver);
        }
    }

    /// Reads a connection accepted from a deferred listener at once (its first bytes are
    /// there), as for any readable connection. The poller watches it only once it must wait
    /// (parked, written to, lingering; handed to a driver that needs its events, or left
    /// output by a slot: `Connection::watch`), so a connection served and closed at once costs
    /// no `epoll_ctl` and no removal from the poller at its close (ADR 0017).
    fn first_read(&mut self, token: usize, driver: &mut dyn Driver) {
        let Some(mut conn) = self.take_parked(token) else {
            return;
        };
        conn.unwatched = Some((self.poller.fd(), token as u64));
        self.advance(token, conn, driver);
    }

    /// Has the poller watch `conn` (registered under `token`) before the loop leaves it to the
    /// poller; `false` when it cannot, after closing the connection.
    pub(super) fn watch(&mut self, token: usize, conn: &mut Connection) -> bool {
        match conn.watch() {
            Ok(()) => true,
            Err(err) => {
                // Dropping it (by the caller) closes the socket.
                self.unwatchable(token, &err);
                false
            }
        }
    }

    /// Gives up a connection the poller cannot watch (`EPOLL_CTL_ADD` failed: out of memory,
    /// or the `max_user_watches` limit): without the poller it could never be served further.
    pub(super) fn unwatchable(&mut self, token: usize, err: &std::io::Error) {
        crate::log::error(&format!("cannot watch a connection: {err}"));
        self.close(token);
    }

    /// Accepts up to `limit` connections and registers them (graceful stop: what the listener
    /// already queued).
    pub(super) fn accept_from(&mut self, index: usize, limit: usize) {
        for _ in 0..limit {
            if self.accept_one(index, true).is_none() {
                break;
            }
        }
    }

    /// Accepts one connection and registers it; its token, or `None` when there is none to
    /// take (or accept is paused: `max_connections`, or an error backs off).
    pub(super) fn accept_one(&mut self, index: usize, register: bool) -> Option<usize> {
        loop {
            if self.open >= self.shared.config.max_connections.max(1) {
                // Resumed by `close` once a connection goes (level-triggered: no spin).
                if !self.full {
                    crate::log::debug("max_connections reached: accept paused");
                }
                self.full = true;
                self.pause_listening();
                return None;
            }
            match self.listeners[index].accept() {
                Ok(Some((fd, peer))) => {
                    let transport = match &self.shared.config.tls {
                        // The handshake runs in the loop, where partial heads wait
                        // (`Connection::on_readable`), under the header deadline.
                        Some(config) if self.listeners[index].tls() => {
                            match TlsConn::new(fd, config) {
                                Ok(conn) => Transport::Tls(conn),
                                Err(err) => {
                                    crate::log::error(&format!(
                                        "cannot start a TLS session for {peer}: {err}"
                                    ));
                                    continue;
                                }
                            }
                        }
                        _ => Transport::Plain(fd),
                    };
                    let choice = match self.listeners[index].h2c() {
                        H2c::Only => Http2Choice::H2cOnly,
                        H2c::Both => Http2Choice::H2cBoth,
                        H2c::Off
                            if matches!(transport, Transport::Tls(_))
                                && self.shared.config.h2.enabled =>
                        {
                            Http2Choice::Alpn
                        }
                        H2c::Off => Http2Choice::No,
                    };
                    let mut conn = if !self.shared.config.proxy_protocol {
                        Connection::new(transport, peer, index)
                    } else if self.shared.config.trusted_proxies.trusts_peer(peer) {
                        Connection::behind_proxy(transport, peer, index)
                    } else {
                        // Only a trusted proxy may say who the client is: closed unread (the fd
                        // drops here), nothing answered.
                        crate::log::info(&format!(
                            "proxy_protocol: closed a connection from {}: not in forwarded_allow_ips",
                            peer
                        ));
                        continue;
                    };
                    if choice != Http2Choice::No {
                        conn.choose_protocol(choice);
                    }
                    let token = self.insert(conn);
                    // With the PROXY protocol the client is known once its header is read.
                    if !self.shared.config.proxy_protocol && !self.client_admitted(token, peer) {
                        self.close(token);
                        continue;
                    }
                    match &self.entries[token] {
                        Entry::Head { .. } if !register => {}
                        Entry::Head { conn, .. } => {
                            if let Err(err) = self
                                .poller
                                .register_connection(conn.fd(), Token(token as u64))
                            {
                                crate::log::error(&format!("cannot watch a new connection: {err}"));
                                self.close(token);
                                continue;
                            }
                        }
                        _ => unreachable!(),
                    }
                    self.shared.slot().accepted.fetch_add(1, Ordering::Relaxed);
                    return Some(token);
                }
                Ok(None) => return None,
                Err(err) => {
                    // EMFILE/ENFILE/ENOMEM: the connection stays queued; back off briefly by
                    // pausing accept (the throttle timer re-enables it) instead of spinning.
                    if let Some(held_back) = self.accept_errors.note(Instant::now()) {
                        crate::log::error(&accept_error_line(&err, held_back));
                    }
                    if self.listening && self.stop.is_none() {
                        self.pause_listening();
                        self.throttled_until = Some(Instant::now() + ACCEPT_RETRY);
                    }
                    return None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_accept_line_says_what_was_held_back() {
        let err = std::io::Error::from_raw_os_error(24);
        assert!(accept_error_line(&err, 0).ends_with("(os error 24)"));
        assert!(
            accept_error_line(&err, 9).ends_with("(9 more since the last such line, not logged)")
        );
    }
}
