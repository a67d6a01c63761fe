//! The app-thread pool that the `thread` and `event` MPMs both run (one machine under two
//! names, ADR 0010): one loop thread per process owns every socket: accept, reading and
//! parsing heads, reading request bodies before dispatch (as every MPM's loop does), idle
//! keep-alive, and finishing response output that an app thread could not write at once
//! (`max_response_buffer`, sendfile). App threads only run the app: a complete request goes
//! to a bounded queue, an app thread serves it (and any pipelined request already buffered)
//! and hands the connection back.
//!
//! The hand-off is batched: the loop queues every request it found ready in one epoll wake-up
//! under one lock and wakes only as many idle app threads as there are new requests (no
//! futex call when none sleeps); an app thread hands an idle connection back without ringing
//! the loop while more requests wait for it, and rings the loop's eventfd at most once per
//! burst; the loop thread runs under `SCHED_BATCH`, so its wake-ups never preempt a running
//! app thread (`loop_yields_to_app_threads`). Admission counts requests, not connections:
//! when `max_queued_requests` wait for an app thread, a new request is answered 503 at once
//! by the loop. An app thread writes its small finished responses in batches (ADR 0011): it
//! holds them until it would wait for work (or a request would make the oldest wait past
//! `response_batch_delay`), writes them back to back and hands their connections back
//! together.
//!
//! What differs between the two names is only `threads = 0`: with `event` the app then runs
//! on the loop thread itself (prefork's inline driver): no hand-off at all, but the loop stops
//! while the app runs; the response is still finished by the loop when the client reads
//! slowly. `thread` always has at least one app thread.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::batch::BatchClock;
use crate::connection::{Connection, Linger, Next};
use crate::control::StopReason;
use crate::exchange::SlotContext;
use crate::mpm::app_threads::{self, lock};
use crate::poller::Waker;
use crate::reactor::{Dispatch, Driver, Reactor};
use crate::shared::WorkerShared;
use crate::slot::serve_connection;
use crate::{App, Mpm};

struct Queue {
    jobs: VecDeque<(usize, Box<Connection>)>,
    /// App threads waiting on the condition variable.
    idle: usize,
    shutdown: bool,
}

struct Returned {
    conns: Vec<(usize, Option<Box<Connection>>)>,
    /// How many of `conns` are open connections (the others were closed by their app
    /// thread, and only their tokens wait to be freed).
    open: usize,
    /// The waker was rung since the loop last collected.
    rung: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
    /// App threads serving a request (for admission: the others take queued requests at
    /// once).
    busy: AtomicUsize,
    returned: Mutex<Returned>,
    /// Connections wait in `returned` (read by the loop without a lock each iteration).
    has_returns: AtomicBool,
    /// Handed-out connections whose socket became readable meanwhile (the loop saw the edge
    /// and can act on it only once the connection is back): an app thread returning any
    /// connection then rings the loop. With `has_returns` this is a Dekker pair (both
    /// `SeqCst`): the app thread stores `has_returns` then loads `edges`, the loop adds to
    /// `edges` then loads `has_returns` before it sleeps, so one of them always sees the
    /// other and no returned connection waits for the heartbeat.
    edges: AtomicUsize,
    /// The loop watches the listeners (as of its last turn). While it does, tokens of closed
    /// connections go back without a wake-up: the loop frees them at its next turn, which
    /// the next connection or request starts anyway. While it does not (saturated, at
    /// `max_connections`, throttled, stopping), a return may be what lets it listen again,
    /// and rings. A Dekker pair with `has_returns`, as `edges` is: the loop stores this then
    /// loads `has_returns` before it sleeps; an app thread stores `has_returns` then loads
    /// this.
    loop_listening: AtomicBool,
    waker: Waker,
}

struct Pool {
    shared: Arc<Shared>,
    /// The worker: its scoreboard slot holds the count of queued requests (`Slot::queued`,
    /// read by the loop without a lock, and by the status output).
    worker: Arc<WorkerShared>,
    threads: Vec<JoinHandle<()>>,
    in_flight: usize,
    /// Requests found ready in this loop iteration, queued together by `flush`.
    batch: Vec<(usize, Box<Connection>)>,
    max_queued: usize,
    /// What `loop_listening` last told the app threads (stored only when it changes).
    listening: bool,
    /// The read time of the request last published as the oldest waiting for a busy app
    /// thread (`Slot::queued_since_ns`; `None`: 0, none waits). Only the loop publishes it,
    /// from `flush` and `collect` (see `note_oldest`): an app thread's pop touches no clock.
    oldest: Option<Instant>,
}

impl Driver for Pool {
    fn dispatch(&mut self, token: usize, conn: Box<Connection>, _now: Option<Instant>) -> Dispatch {
        // Requests that free app threads (not serving a request) are about to take are not
        // waiting.
        let free = self
            .threads
            .len()
            .saturating_sub(self.shared.busy.load(Ordering::Relaxed));
        let queued = self.worker.slot().queued.load(Ordering::Relaxed) as usize;
        let waiting = (queued + self.batch.len()).saturating_sub(free);
        if self.max_queued > 0 && waiting >= self.max_queued {
            return Dispatch::Refused(conn);
        }
        self.batch.push((token, conn));
        self.in_flight += 1;
        Dispatch::Handed
    }

    fn flush(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let count = self.batch.len();
        let mut queue = lock(&self.shared.queue);
        queue.jobs.extend(self.batch.drain(..));
        let slot = self.worker.slot();
        slot.queued.fetch_add(count as u64, Ordering::Relaxed);
        let wake = queue.idle.min(count);
        // Under the lock taken anyway: no store while app threads are free.
        note_oldest(slot, &mut self.oldest, &queue);
        drop(queue);
        for _ in 0..wake {
            self.shared.ready.notify_one();
        }
    }

    fn collect(&mut self, into: &mut Vec<(usize, Option<Box<Connection>>)>) {
        let mut returned = lock(&self.shared.returned);
        if returned.rung {
            self.shared.waker.reset();
            returned.rung = false;
        }
        self.shared.has_returns.store(false, Ordering::SeqCst);
        returned.open = 0;
        self.in_flight -= returned.conns.len();
        into.append(&mut returned.conns);
        drop(returned);
        // App threads took requests since the last turn: the oldest one waiting may have
        // changed. Only while one waited (a lock per turn under a backlog, nothing else); after
        // `returned`'s lock, never under it (an app thread going idle takes `returned` under
        // the queue's lock).
        if self.oldest.is_some() {
            let queue = lock(&self.shared.queue);
            note_oldest(self.worker.slot(), &mut self.oldest, &queue);
        }
    }

    fn has_returns(&self) -> bool {
        self.shared.has_returns.load(Ordering::SeqCst)
    }

    fn note_listening(&mut self, listening: bool) {
        if listening != self.listening {
            self.listening = listening;
            self.shared
                .loop_listening
                .store(listening, Ordering::SeqCst);
        }
    }

    fn handed_edge(&mut self, seen: bool) {
        if seen {
            self.shared.edges.fetch_add(1, Ordering::SeqCst);
        } else {
            self.shared.edges.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }

    fn can_take_connection(&self) -> bool {
        // Connections handed out (queued, served, or back but not yet collected) fewer than
        // the app threads: one of them is free, or about to be.
        self.in_flight < self.threads.len()
    }

    fn waker_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.shared.waker.fd())
    }

    fn take_stranded(&mut self, stuck: usize, into: &mut Vec<(usize, Box<Connection>)>) {
        // Every app thread is stuck: what waits in the queue would wait for the worker's end.
        if stuck < self.threads.len() {
            return;
        }
        let mut queue = lock(&self.shared.queue);
        let count = queue.jobs.len();
        into.extend(queue.jobs.drain(..));
        let slot = self.worker.slot();
        note_oldest(slot, &mut self.oldest, &queue);
        drop(queue);
        slot.queued.fetch_sub(count as u64, Ordering::Relaxed);
        self.in_flight -= count;
    }

    fn watches_lazily(&self) -> bool {
        true
    }
}

/// An app thread: takes requests from the loop's queue and serves them. It keeps the GIL
/// from one request to the next while requests wait (as prefork's loop does, ADR 0012) and
/// releases it only to sleep for the next one ([`App::wait`]): the app's own threads run
/// whenever it idles, and at Python's switch interval while it is busy.
///
/// Why: taking the GIL back per request (`PyGILState_Ensure`, its mutex and condition
/// variable) and releasing it cost about 560 of an event hello-world request's 13,300
/// instructions and six of its locked instructions (callgrind).
fn app_thread(index: usize, app: Arc<dyn App>, worker: Arc<WorkerShared>, pool: Arc<Shared>) {
    let app_ref = Arc::clone(&app);
    let slot = worker.slot();
    app.run_loop_thread(&mut || {
        let mut batch = BatchClock::new(worker.config.response_batch_delay);
        let mut ctx = Box::new(SlotContext {
            batch_responses: batch.enabled(),
            ..SlotContext::for_thread(index)
        });
        // This thread's batch of responses (ADR 0011): connections whose small response
        // waits, queued, until the batch is written; and connections on their way back.
        let mut held: Vec<(usize, Option<Box<Connection>>)> = Vec::new();
        let mut back: Vec<(usize, Option<Box<Connection>>)> = Vec::new();
        // This thread slept for its last request (its clock reading is old).
        let mut woke = true;
        loop {
            let job = {
                let mut queue = lock(&pool.queue);
                loop {
                    if let Some(job) = queue.jobs.pop_front() {
                        pool.busy.fetch_add(1, Ordering::Relaxed);
                        // The pool's count, in the slot for the status output. The oldest
                        // waiting request's time is the loop's to update (`note_oldest`).
                        slot.queued.fetch_sub(1, Ordering::Relaxed);
                        break Some(job);
                    }
                    if !held.is_empty() {
                        // The batch ends before this thread waits (or stops).
                        drop(queue);
                        write_batch(&mut held, &mut batch, &pool, &worker);
                        queue = lock(&pool.queue);
                        continue;
                    }
                    if queue.shutdown {
                        break None;
                    }
                    // Going idle: a connection this thread handed back without ringing (more
                    // requests waited then, and another thread took them) must not stay
                    // uncollected, or a loop that stopped watching the listener while every
                    // thread was taken would not learn that one is free.
                    // Tokens of closed connections alone need no wake-up while the loop listens
                    // (see `Shared::loop_listening`).
                    if pool.has_returns.load(Ordering::SeqCst) {
                        let mut back = lock(&pool.returned);
                        if !back.conns.is_empty()
                            && !back.rung
                            && (back.open > 0 || !pool.loop_listening.load(Ordering::SeqCst))
                        {
                            back.rung = true;
                            pool.waker.wake();
                        }
                    }
                    queue.idle += 1;
                    // Asleep with the GIL released. The queue's lock is let go before the GIL
                    // is taken back: a thread that holds the GIL may be waiting for that lock.
                    let mut sleeping = Some(queue);
                    app_ref.wait(&mut || {
                        if let Some(queue) = sleeping.take() {
                            let mut queue = pool
                                .ready
                                .wait(queue)
                                .unwrap_or_else(|poison| poison.into_inner());
                            queue.idle -= 1;
                        }
                    });
                    woke = true;
                    queue = lock(&pool.queue);
                }
            };
            let Some((token, conn)) = job else { return };
            let started = batch.enabled().then(|| {
                // After a sleep the clock is read; else the last response's write was just now.
                let now = if std::mem::take(&mut woke) {
                    crate::clock::now()
                } else {
                    crate::clock::recent()
                };
                if !held.is_empty() && batch.due(now) {
                    write_batch(&mut held, &mut batch, &pool, &worker);
                    return crate::clock::now();
                }
                now
            });
            let (kept, returned) = serve_connection(conn, ctx, &*app_ref, &worker, started);
            ctx = returned;
            // Free for the next request from here on: admission must not count a request that
            // this thread takes as soon as it has handed this connection back.
            pool.busy.fetch_sub(1, Ordering::Relaxed);
            match (started, kept) {
                // Its response waits for the rest of the batch; a stopping worker hands it
                // back at once (the loop writes it).
                (Some(started), Some(conn))
                    if conn.has_pending_output() && !worker.is_stopping() =>
                {
                    // The response's last write read the clock.
                    batch.deferred(started, crate::clock::recent());
                    held.push((token, Some(conn)));
                }
                (_, kept) => {
                    back.push((token, kept));
                    hand_back(&mut back, &pool, &worker);
                }
            }
        }
    });
}

/// Publishes, in the worker's slot, when the oldest queued request that waits for a busy app
/// thread was read ([`crate::scoreboard::Slot::queued_since_ns`], 0 for none): the first one
/// past those the sleeping app threads will take. The loop's alone, under the queue's lock,
/// from `flush` (requests queued), `collect` (app threads took some since) and
/// `take_stranded`; `noted` is what it last published, so an unchanged oldest costs a
/// comparison and no store or clock conversion.
///
/// Why not in the app threads' pop: that is the per-request hand-off; the figure is a gauge
/// for people, and the loop turns at least once a heartbeat while app threads hand
/// connections back, so it lags the pops by at most that (an over-statement: the real
/// oldest came later), and readers show no wait once the count is 0.
fn note_oldest(slot: &crate::scoreboard::Slot, noted: &mut Option<Instant>, queue: &Queue) {
    let oldest = queue
        .jobs
        .get(queue.idle)
        .and_then(|(_, conn)| conn.ready_at);
    if oldest != *noted {
        *noted = oldest;
        let since = oldest.map_or(0, crate::scoreboard::thread::monotonic_ns_of);
        slot.queued_since_ns.store(since, Ordering::Relaxed);
    }
}

/// Ends an app thread's batch: writes each held response, back to back, then hands the
/// connections back together (one that the socket could not take whole goes back with its
/// output pending, for the loop to finish; a write error is met again there, and closes it).
fn write_batch(
    held: &mut Vec<(usize, Option<Box<Connection>>)>,
    batch: &mut BatchClock,
    pool: &Shared,
    worker: &WorkerShared,
) {
    batch.flushed();
    for (_, conn) in held.iter_mut() {
        if let Some(conn) = conn {
            let _ = conn.output().write_some();
        }
    }
    hand_back(held, pool, worker);
}

/// Hands `conns` back to the loop (all of them, under one lock), ringing it only when needed.
fn hand_back(
    conns: &mut Vec<(usize, Option<Box<Connection>>)>,
    pool: &Shared,
    worker: &WorkerShared,
) {
    // While more requests wait for this thread, a connection that only goes back to idle
    // needs nothing from the loop until its next bytes arrive, and those wake the loop
    // anyway: it is collected then, without a wake-up of its own. This halves the context
    // switches per request on a busy worker (docs/mpm.md). One that has output to finish or
    // bytes buffered, a stopping worker, a loop that saw bytes arrive for a handed-out
    // connection (`edges`), or the end of a burst, rings the loop.
    for (_, kept) in conns.iter_mut() {
        if kept.as_ref().is_some_and(|conn| closes_now(conn)) {
            // Closed here, by this thread (dropping it closes the socket, which leaves the
            // loop's epoll set with it): only its token goes back.
            *kept = None;
        }
    }
    let open = conns.iter().filter(|(_, kept)| kept.is_some()).count();
    let urgent = worker.is_stopping()
        || conns.iter().any(|(_, kept)| {
            kept.as_ref()
                .is_some_and(|conn| conn.has_pending_output() || !conn.drained())
        });
    let mut back = lock(&pool.returned);
    back.conns.append(conns);
    back.open += open;
    pool.has_returns.store(true, Ordering::SeqCst);
    let edges = pool.edges.load(Ordering::SeqCst);
    // The last return before this thread goes idle rings too, so that connections returned
    // during a burst start their keep-alive timers promptly; tokens of closed connections
    // alone need no wake-up while the loop listens (see `Shared::loop_listening`).
    let idle_next = worker.slot().queued.load(Ordering::Relaxed) == 0
        && (back.open > 0 || !pool.loop_listening.load(Ordering::SeqCst));
    if (urgent || edges > 0 || idle_next) && !back.rung {
        // Under the lock, so that `rung` always means the eventfd is set: `collect` resets it
        // under the same lock (else a reset could land before this write and leave a set
        // eventfd that nothing resets: a spinning loop).
        back.rung = true;
        pool.waker.wake();
    }
}

/// Whether an app thread closes `conn` itself instead of handing it back open: its response
/// is written whole and it closes without lingering, which is all the loop would do with it.
///
/// Why: under `Connection: close` load each such return rang the loop (an eventfd write and
/// read, and the loop's wake-up) only for it to close the socket; a closed connection's token
/// goes back without one (see `Shared::loop_listening`).
fn closes_now(conn: &Connection) -> bool {
    conn.next() == Next::Close(Linger::No)
}

/// Puts the calling (loop) thread under `SCHED_BATCH`: it then never preempts a running app
/// thread when it wakes up, and runs once the app thread blocks (the GIL released for I/O, no
/// more work queued) or its time slice ends.
///
/// Why: when the loop and an app thread share a CPU (always, once the worker's CPUs are busy),
/// every packet that arrives for any connection wakes the loop, and the scheduler's wake-up
/// preemption let it interrupt the app thread at once, read one request, queue it and sleep
/// again: two context switches per request, which made a hand-off cost more than the thread
/// MPM's whole request. Without wake-up preemption the loop runs later and finds every ready
/// connection at once, so one pair of switches serves a batch. Measured on hello keep-alive,
/// 50 connections, one CPU: 0.54 to 0.05 context switches per request and +50% requests per
/// second; on the blog, as cheap per request as prefork (docs/mpm.md). App threads stay
/// `SCHED_OTHER` (making them batch too measured worse: the loop's wake-up of an idle app
/// thread then waits for the tick). A loop woken while another CPU idles still runs at once
/// there; the policy only orders the loop behind work already running on its CPU. The
/// change only lowers the thread's claim, so it needs no privilege; if it fails (a kernel
/// without the policy) the loop runs as before.
fn loop_yields_to_app_threads() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
    if rc != 0 {
        crate::log::debug(&format!(
            "loop: SCHED_BATCH not set: {}",
            io::Error::last_os_error()
        ));
    }
}

/// Runs the thread or event MPM: the calling thread is the loop; `threads` app threads serve
/// (none, with `event`: the loop runs the app inline; `thread` runs at least one).
pub fn run(
    mut reactor: Reactor,
    app: Arc<dyn App>,
    worker: Arc<WorkerShared>,
) -> io::Result<StopReason> {
    let threads = match worker.config.mpm {
        Mpm::Event if worker.config.threads == 0 => {
            return crate::mpm::prefork::run(reactor, app, worker)
        }
        _ => worker.config.threads.max(1),
    };
    let shared = Arc::new(Shared {
        queue: Mutex::new(Queue {
            jobs: VecDeque::new(),
            idle: 0,
            shutdown: false,
        }),
        ready: Condvar::new(),
        busy: AtomicUsize::new(0),
        returned: Mutex::new(Returned {
            conns: Vec::new(),
            open: 0,
            rung: false,
        }),
        has_returns: AtomicBool::new(false),
        edges: AtomicUsize::new(0),
        loop_listening: AtomicBool::new(true),
        waker: Waker::new()?,
    });
    let threads = app_threads::spawn(threads, &app, &worker, &shared, app_thread)?;
    let mut pool = Pool {
        shared,
        worker: Arc::clone(&worker),
        threads,
        in_flight: 0,
        batch: Vec::new(),
        oldest: None,
        max_queued: worker.config.max_queued_requests,
        listening: true,
    };
    loop_yields_to_app_threads();
    reactor.pay_timeouts_in_loop(Some(&app));
    let result = reactor.run(&mut pool);
    reactor.pay_timeouts_in_loop(None);
    lock(&pool.shared.queue).shutdown = true;
    pool.shared.ready.notify_all();
    let stuck = reactor.abandoned();
    if stuck > 0 {
        exit_past_stuck_threads(stuck, &worker);
    }
    app_threads::join(&mut pool.threads, &result);
    result
}

/// Ends the process once a drain after `request_timeout` is done while `stuck` app threads
/// still run their timed-out requests: nothing else of the worker is left to wait for.
///
/// Why here, in Rust, and not by returning to Python: a stuck thread cannot be joined, and
/// one stuck in C code holding the GIL would make the return into Python (and its
/// interpreter teardown) hang until the master's kill at `graceful_timeout`. The access log
/// (the loop's) is flushed and the error log's lines are written as they come; what is lost
/// is Python's own teardown (the `worker_exit` hook, `atexit` callbacks, buffers of the app's
/// own log handlers), as with the kill it replaces. Exit status 0: the master recorded the
/// exit reason (`request_timeout`) when it sent the dump.
fn exit_past_stuck_threads(stuck: usize, worker: &WorkerShared) -> ! {
    crate::log::info(&format!(
        "drained after request_timeout: exiting without waiting for {stuck} stuck app \
         thread(s)"
    ));
    if let Some(log) = &worker.access_log {
        log.flush();
    }
    // SAFETY: _exit ends the process at once; nothing of this process runs after it.
    unsafe { libc::_exit(0) }
}
