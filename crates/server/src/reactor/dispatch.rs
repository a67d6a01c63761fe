//! Dispatch: the MPM's part of the loop (`Driver`: who serves a connection whose head is
//! complete), reading and parsing until a head is complete (a TLS connection's handshake
//! first, its reads off the app's interpreter: `Driver::off_interpreter`; then the body,
//! `body`), handing
//! the connection out, and taking it back when the slot is done with it; and, after the dump
//! signal, answering the handed-out connections whose request timed out, leaving them to
//! their stuck threads, and probing once whether the interpreter lock is free
//! (docs/signals.md, "A stuck request").
//!
//! It decides where a connection goes next (served, parked, written, lingering, closed); it
//! must not serve a request itself.

use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Instant;

use super::body::BodyStep;
use super::error_response::{refuse_rate_limited, reject, write_error, write_error_with};
use super::{Entry, Reactor};
use crate::connection::{Connection, Linger, Next, Readiness};
use crate::control::StopReason;
use crate::pending::Output;
use crate::transport::Link;

/// What a driver did with a ready connection.
pub(crate) enum Dispatch {
    /// Served inline: the connection if it stays open (or has output left to write).
    Served(Option<Box<Connection>>),
    /// Handed to another thread; it comes back through [`Driver::collect`].
    Handed,
    /// Refused: `max_queued_requests` requests already wait for an app thread (503).
    Refused(Box<Connection>),
}

/// The MPM-specific part: who serves a connection whose head is complete.
pub(crate) trait Driver {
    /// Serves or hands off the connection registered under `token`; `now` is the time the
    /// loop read just before, if it did (an inline slot starts the request with it instead
    /// of reading the clock again).
    fn dispatch(&mut self, token: usize, conn: Box<Connection>, now: Option<Instant>) -> Dispatch;
    /// Moves connections handed back since the last call into `into`.
    fn collect(&mut self, into: &mut Vec<(usize, Option<Box<Connection>>)>);
    /// Connections currently handed off.
    fn in_flight(&self) -> usize;
    /// The fd that wakes the poller when connections come back, if any.
    fn waker_fd(&self) -> Option<RawFd>;
    /// Called once per loop iteration after the events were handled: a driver that batches
    /// hand-offs passes them on here (one lock and one wake-up per batch).
    fn flush(&mut self) {}
    /// True when connections were handed back without ringing the waker (they are collected
    /// at the start of the next loop iteration).
    fn has_returns(&self) -> bool {
        false
    }
    /// Whether the loop watches the listeners, told before each sleep: a driver that hands
    /// closed connections back without a wake-up rings while the loop does not (a freed slot
    /// or connection may be what lets it listen again).
    fn note_listening(&mut self, _listening: bool) {}
    /// The loop saw a handed-out connection's socket become readable (`true`), or got such a
    /// connection back (`false`): see `mpm::pool` for why a driver counts these.
    fn handed_edge(&mut self, _seen: bool) {}
    /// The loop saw a handed-out connection's client close its side, or its socket fail
    /// (once per hand-off): a driver whose requests run concurrently tells the app (ASGI's
    /// `http.disconnect`).
    fn handed_peer_closed(&mut self, _token: usize) {}
    /// The loop saw a handed-out connection's socket become readable (every edge): a driver
    /// whose handed-out connections are read by their holder (a WebSocket on the event
    /// loop) tells it.
    fn handed_readable(&mut self, _token: usize) {}
    /// Whether a new connection could start being served now. With more than one worker the
    /// loop takes new connections only while this holds, so a busy worker leaves them in the
    /// shared listener for an idle one instead of hoarding them. Prefork's loop runs only
    /// while its one slot is free, hence the default.
    fn can_take_connection(&self) -> bool {
        true
    }
    /// Whether a connection not watched by the poller yet may be handed to this driver as it
    /// is: the driver needs no poller event for it while it holds it, and its slot has the
    /// poller watch it before it leaves output pending (`Connection::watch`). A driver that
    /// reads its connections' events while it holds them (ASGI's disconnects and WebSocket
    /// frames) keeps the default.
    fn watches_lazily(&self) -> bool {
        false
    }
    /// True when `dispatch` serves the connection on the loop's own thread (prefork): the
    /// loop cannot help write a response while it is being produced, so the handed-out
    /// entry keeps no reference to the connection's output.
    fn serves_inline(&self) -> bool {
        false
    }
    /// Takes back the requests queued for app threads when `stuck` app threads are stuck past
    /// `request_timeout` and no other is left to take them (the drain must not wait for them;
    /// the loop refuses them). A driver without a queue has none.
    fn take_stranded(&mut self, _stuck: usize, _into: &mut Vec<(usize, Box<Connection>)>) {}
    /// Runs `wait`, the loop's sleep in its poller: a driver that serves inline lets the app
    /// release what it holds while the loop works ([`crate::App::wait`]).
    fn wait(&mut self, wait: &mut dyn FnMut()) {
        wait()
    }
    /// Runs `work`, a step of the loop that needs no interpreter and may take long (a TLS
    /// handshake's crypto): a driver whose loop holds the app's interpreter (prefork) lets it
    /// go meanwhile, as for [`Driver::wait`], so the app's own threads run.
    fn off_interpreter(&mut self, work: &mut dyn FnMut()) {
        work()
    }
}

impl Reactor {
    /// Reads and parses; reads the body before dispatch (`body`); dispatches complete requests
    /// (again and again while a prefork slot serves pipelined requests inline); parks, writes
    /// or closes the connection otherwise.
    pub(super) fn advance(
        &mut self,
        token: usize,
        mut conn: Box<Connection>,
        driver: &mut dyn Driver,
    ) {
        loop {
            if conn.buf.is_empty() {
                if let Some(buf) = self.spare_buffers.pop() {
                    conn.give_buffer(buf);
                }
            }
            // A head whose body the loop goes on reading was counted when it completed.
            let resumed = conn.reads_body();
            let readiness = if resumed {
                Readiness::HeadComplete
            } else if conn.tls_handshaking() {
                // The handshake's crypto (a signature, the key exchange) runs in this read:
                // off the interpreter, where the loop holds it (prefork, ADR 0012).
                let mut readiness = Readiness::Closed;
                let limits = &self.shared.config.limits;
                driver.off_interpreter(&mut || readiness = conn.on_readable(limits));
                readiness
            } else {
                conn.on_readable(&self.shared.config.limits)
            };
            // `max_connections_per_client` by the PROXY header's client, as soon as the header
            // is read (whatever follows: a head, part of one, a handshake, nothing), so that
            // idle and slow connections count too.
            if self.shared.config.proxy_protocol
                && !conn.awaits_proxy_header()
                && !conn.link().is_h2()
                && self.client_unchecked(token)
                && !self.client_admitted(token, conn.peer)
            {
                return self.close(token);
            }
            match readiness {
                Readiness::HeadComplete => {
                    // The rate limits, once per head, before its body is read (ADR 0038).
                    if !resumed {
                        if let Some(refusal) =
                            self.shared.rate_refusal(&mut conn, crate::clock::recent())
                        {
                            refuse_rate_limited(&mut conn, &refusal, &self.shared, &mut self.ctx);
                            return self.linger(token, conn, Linger::UntilEof);
                        }
                    }
                    match self.read_body_before_dispatch(&mut conn) {
                        BodyStep::Dispatch => {}
                        BodyStep::Park => return self.park(token, conn),
                        BodyStep::WaitDisk(needed) => {
                            self.wait_for_disk(token, &mut conn, needed);
                            return self.park(token, conn);
                        }
                        BodyStep::Close => return self.close(token),
                        BodyStep::Refuse(status) => {
                            write_error(
                                &mut conn,
                                status,
                                &self.shared,
                                &mut self.ctx.date,
                                &mut self.ctx.out,
                            );
                            return self.linger(token, conn, Linger::UntilEof);
                        }
                    }
                    if !driver.watches_lazily() && !self.watch(token, &mut conn) {
                        return;
                    }
                    // A slot on another thread may leave output pending while it still
                    // produces the response: the loop helps write it (ADR 0009).
                    let output = (!driver.serves_inline()).then(|| Arc::clone(conn.output()));
                    if driver.serves_inline() && self.batch.enabled() {
                        self.before_inline_dispatch(driver);
                    }
                    // The queue wait (scoreboard histogram, access log) starts now.
                    if !driver.serves_inline() {
                        conn.ready_at = Some(crate::clock::recent());
                    }
                    match driver.dispatch(token, conn, self.dispatch_started) {
                        Dispatch::Handed => {
                            self.entries[token] = Entry::Dispatched {
                                readable: false,
                                peer_closed: false,
                                output,
                            };
                            return;
                        }
                        // Served inline: any bytes that arrive from now on raise a new event.
                        Dispatch::Served(kept) => {
                            match self.after_served(token, kept, false, driver) {
                                Some(kept) => conn = kept,
                                None => return,
                            }
                        }
                        Dispatch::Refused(mut refused) => {
                            // RFC 9110 15.6.4: overloaded; the client may retry shortly.
                            write_error_with(
                                &mut refused,
                                503,
                                &[(b"Retry-After", b"1")],
                                &self.shared,
                                &mut self.ctx.date,
                                &mut self.ctx.out,
                            );
                            crate::log::debug("max_queued_requests reached: 503");
                            return self.linger(token, refused, Linger::UntilEof);
                        }
                    }
                }
                Readiness::Pending => return self.park(token, conn),
                Readiness::Closed => return self.close(token),
                Readiness::Rejected(err) => {
                    reject(&mut conn, &err, &self.shared, &mut self.ctx);
                    return self.linger(token, conn, Linger::UntilEof);
                }
                Readiness::BadProxyHeader(err) => {
                    crate::log::info(&format!(
                        "proxy_protocol: closed a connection from {}: {err}",
                        conn.peer
                    ));
                    return self.close(token);
                }
                Readiness::PlainHttpOnTls => return self.answer_plain_http(token, conn),
                Readiness::HandshakeFailed(err) => return self.handshake_failed(token, &conn, err),
                Readiness::Http2 => return self.start_h2(token, *conn, driver),
            }
        }
    }

    /// What follows a served request, the one place the loop decides it (a connection a
    /// slot served inline or gave back, or whose output the loop finished writing; `None`
    /// when the slot closed it), by [`Connection::next`]: output left pending is written
    /// first, a connection that ends closes (lingering when it must), a drained one is
    /// parked. `readable`: an edge came while someone else held it, which the poller cannot
    /// repeat. Returns the connection when it must be read further: the caller advances it
    /// (in a loop, not by recursion, however many requests a client pipelines).
    pub(super) fn after_served(
        &mut self,
        token: usize,
        conn: Option<Box<Connection>>,
        readable: bool,
        driver: &mut dyn Driver,
    ) -> Option<Box<Connection>> {
        let Some(mut conn) = conn else {
            self.close(token);
            return None;
        };
        if readable {
            // The edge is used up here: if the buffer still holds whole requests, they are
            // served from it first, and the bytes that raised the edge must still be read
            // before the connection is parked.
            conn.note_arrival();
        }
        match conn.next() {
            Next::Write => self.start_writing(token, conn, readable, driver),
            Next::Close(Linger::No) => self.close(token),
            Next::Close(how) => self.linger(token, conn, how),
            Next::Park => self.park(token, conn),
            Next::Parse | Next::Read => return Some(conn),
        }
        None
    }

    /// Makes the loop pay what timed-out requests are owed when the dump signal comes, and
    /// probe `app`'s interpreter lock then (`Some`: a driver whose app threads are not the
    /// loop's), or gives that back to the signal handler (`None`: before the loop's control
    /// fds close).
    pub(crate) fn pay_timeouts_in_loop(&mut self, app: Option<&Arc<dyn crate::App>>) {
        crate::dump_signal::set_loop_wake(app.is_some().then(|| self.control.wake_fd()));
        self.interpreter_probe = app.map(Arc::clone);
    }

    /// Handed-out connections whose request timed out and whose thread has not given them
    /// back: the drain ended without them (their threads cannot be joined).
    pub(crate) fn abandoned(&self) -> usize {
        self.abandoned.len()
    }

    /// The dump signal came: for each app thread whose request the master judged timed out,
    /// pays its client what is owed (a 503, or a shutdown once its response began) through
    /// the connection's output, which the loop holds a reference to while the thread holds
    /// the connection (`exchange::timeout`), then drains the worker: the other requests
    /// finish, the master starts the replacement at once (`draining` message), and the drain
    /// does not wait for the stuck connections.
    pub(super) fn pay_timed_out(&mut self) {
        for thread in 0..self.shared.scoreboard().threads_per_slot() {
            let Some(thread_slot) = self.shared.thread_slot(thread) else {
                continue;
            };
            let Some((request, owed)) = thread_slot.owed() else {
                continue;
            };
            let fd = thread_slot.read().fd;
            // Streams of one HTTP/2 connection share its fd: the stream id tells them apart.
            let stream = thread_slot.stream();
            let mut handed =
                self.entries
                    .iter()
                    .enumerate()
                    .filter_map(|(token, entry)| match entry {
                        Entry::Dispatched {
                            output: Some(output),
                            ..
                        } if output.fd() == fd
                            && !self.abandoned.contains(&token)
                            && (stream == 0 || stream_id(output) == Some(stream)) =>
                        {
                            Some((token, output))
                        }
                        _ => None,
                    });
            let found = handed.next();
            // Exactly one: a second would be a connection the fd and stream id do not tell
            // apart (never expected; then none is answered, and the drain still begins).
            let (Some((token, output)), None) = (found, handed.next()) else {
                continue;
            };
            let output = Arc::clone(output);
            if crate::exchange::pay_owed(&output, thread_slot, request, owed, &self.shared) {
                crate::log::info(&format!(
                    "request_timeout: app thread {thread}'s request answered ({}); draining \
                     while the other requests finish",
                    match owed {
                        crate::scoreboard::Owed::Response => "503",
                        crate::scoreboard::Owed::Shutdown => "its response cut short",
                    }
                ));
                self.abandoned.push(token);
            }
        }
        if let Some(app) = self.interpreter_probe.take() {
            probe_interpreter(app, Arc::clone(&self.shared));
        }
        self.shared
            .propose_exit_reason(crate::scoreboard::ExitReason::RequestTimeout);
        self.begin_stop(StopReason::RequestTimeout);
    }

    /// While stuck connections are abandoned: refuses the requests no app thread is left to
    /// take (`Driver::take_stranded`) with `503` and `Retry-After` (RFC 9110 15.6.4), as when
    /// `max_queued_requests` is reached, so the client retries on another worker at once
    /// instead of waiting for this one's end.
    pub(super) fn refuse_stranded(&mut self, driver: &mut dyn Driver) {
        let mut stranded = Vec::new();
        driver.take_stranded(self.abandoned.len(), &mut stranded);
        for (token, mut conn) in stranded {
            if let Some(Entry::Dispatched { readable: true, .. }) = self.entries.get(token) {
                driver.handed_edge(false);
            }
            write_error_with(
                &mut conn,
                503,
                &[(b"Retry-After", b"1")],
                &self.shared,
                &mut self.ctx.date,
                &mut self.ctx.out,
            );
            self.linger(token, conn, Linger::UntilEof);
        }
    }

    pub(super) fn on_returned(&mut self, driver: &mut dyn Driver) {
        let mut returned = std::mem::take(&mut self.returned);
        driver.collect(&mut returned);
        for (token, mut conn) in returned.drain(..) {
            if !self.abandoned.is_empty() {
                // A stuck thread returned after all: the drain waits for nothing more of it.
                self.abandoned.retain(|&stuck| stuck != token);
            }
            let (edge_seen, peer_closed) = match self.entries.get(token) {
                Some(Entry::Dispatched {
                    readable,
                    peer_closed,
                    ..
                }) => (*readable, *peer_closed),
                _ => (false, false),
            };
            if peer_closed {
                if let Some(conn) = conn.as_mut() {
                    conn.note_peer_closed();
                }
            }
            if edge_seen {
                driver.handed_edge(false);
            }
            if let Some(conn) = self.after_served(token, conn, edge_seen, driver) {
                self.advance(token, conn, driver);
            }
        }
        self.returned = returned;
        // Returns collected outside the event pass (before sleeping) may have dispatched.
        driver.flush();
        // An app slot came free: watch the listener again before sleeping.
        self.manage_saturation(driver);
    }
}

/// The HTTP/2 stream id of a handed-out connection's output (`None`: not a stream, or
/// closed). Asked only of outputs on the fd of a timed-out stream.
fn stream_id(output: &Output) -> Option<u32> {
    output
        .with_open_link(|link| match link {
            Link::H2(link) => Some(link.stream().id()),
            _ => None,
        })
        .flatten()
}

/// The interpreter probe, started when the loop first pays a timed-out request: a thread of
/// its own takes `app`'s interpreter lock and lets it go ([`crate::App::touch_interpreter`]),
/// records when in the worker's slot (`interpreter_seen_ns`), and does it again every
/// [`PROBE_EVERY`] for the rest of the worker's short life. A stuck request that holds the GIL
/// (C code), at once or after the first reports, keeps it blocked, and every app thread with
/// it, idle ones too (they need the GIL to start a request): the master sees the record go
/// stale and kills the worker rather than wait for a drain that cannot end
/// (`watchdog.drain_verdict`, ADR 0020). Probing again is what tells a neighbour that is merely
/// slow (it makes no visible progress, yet the GIL is free) from one the stuck thread stopped.
/// A thread blocked for good is harmless: the process ends soon after, by its own exit or the
/// kill (a worker never finalizes its interpreter, so no probe meets a finalizing one). One
/// that cannot start is logged; the master then kills the worker on the same ground.
fn probe_interpreter(app: Arc<dyn crate::App>, shared: Arc<crate::shared::WorkerShared>) {
    let started = std::thread::Builder::new()
        .name("tines-gil-probe".into())
        .spawn(move || loop {
            app.touch_interpreter();
            shared.slot().interpreter_seen_ns.store(
                crate::scoreboard::monotonic_ns(),
                std::sync::atomic::Ordering::Release,
            );
            std::thread::sleep(PROBE_EVERY);
        });
    if let Err(err) = started {
        crate::log::error(&format!(
            "request_timeout: cannot start the interpreter probe ({err}): the master will take \
             the GIL for held"
        ));
    }
}

/// How often the interpreter probe takes the GIL again: well inside the master's `GIL_WAIT`
/// (3 s), so a free GIL is always seen fresh, and rare enough to cost nothing.
const PROBE_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::WorkerConfig;
    use crate::listener::Local;
    use crate::scoreboard::{monotonic_ns, Scoreboard};
    use crate::shared::WorkerShared;
    use std::sync::atomic::Ordering;
    use std::sync::{Barrier, Mutex};
    use std::time::Duration;

    /// An app whose interpreter lock is a mutex the test holds.
    struct Locked {
        lock: Mutex<()>,
        probing: Barrier,
    }

    impl crate::App for Locked {
        fn serve(&self, exchange: Box<crate::Exchange>) -> Box<crate::Exchange> {
            exchange
        }

        fn touch_interpreter(&self) {
            self.probing.wait();
            drop(self.lock.lock());
        }
    }

    #[test]
    fn the_probe_records_only_while_the_interpreter_lock_is_free_and_again_after() {
        let shared = Arc::new(WorkerShared::new(
            WorkerConfig::default(),
            vec![Local::Unix(String::new())],
            None,
            Arc::new(Scoreboard::new(1, 1).unwrap()),
            0,
            u64::MAX,
            None,
        ));
        let app = Arc::new(Locked {
            lock: Mutex::new(()),
            probing: Barrier::new(2),
        });
        let held = app.lock.lock().unwrap();
        probe_interpreter(app.clone(), Arc::clone(&shared));
        app.probing.wait();
        let seen = &shared.slot().interpreter_seen_ns;
        assert_eq!(seen.load(Ordering::Acquire), 0, "recorded while held");
        let released = monotonic_ns();
        drop(held);
        let give_up = Instant::now() + Duration::from_secs(30);
        while seen.load(Ordering::Acquire) == 0 && Instant::now() < give_up {
            std::thread::yield_now();
        }
        let first = seen.load(Ordering::Acquire);
        assert!(first >= released);
        // Held again (a stuck thread that took the GIL back): the record stays where it was
        // until the lock is free, then moves on.
        let held = app.lock.lock().unwrap();
        app.probing.wait();
        let at_hold = seen.load(Ordering::Acquire);
        let released = monotonic_ns();
        drop(held);
        while seen.load(Ordering::Acquire) == at_hold && Instant::now() < give_up {
            std::thread::yield_now();
        }
        assert_eq!(at_hold, first, "recorded while held again");
        assert!(
            seen.load(Ordering::Acquire) >= released,
            "the probe reports again"
        );
    }
}
