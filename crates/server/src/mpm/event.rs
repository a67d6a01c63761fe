//! `event`: one loop thread per process owns every socket: accept, reading and parsing heads,
//! reading small bodies ahead (`max_request_buffer`), idle keep-alive, and finishing response
//! output that an app thread could not write at once (`max_response_buffer`, sendfile). App
//! threads only run the app: a complete request goes to a bounded queue, an app thread serves
//! it (and any pipelined request already buffered) and hands the connection back.
//!
//! The hand-off is batched: the loop queues every request it found ready in one epoll wake-up
//! under one lock and wakes only as many idle app threads as there are new requests (no
//! futex call when none sleeps); an app thread rings the loop's eventfd only when the return
//! list was empty, so a burst of finished requests costs one wake-up. Admission counts
//! requests, not connections: when `max_queued_requests` wait for an app thread, a new request
//! is answered 503 at once by the loop.
//!
//! With `threads = 0` the app runs on the loop thread itself (prefork's inline driver): no
//! hand-off at all, but the loop stops while the app runs; the response is still finished by
//! the loop when the client reads slowly.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crate::connection::Connection;
use crate::control::StopReason;
use crate::exchange::SlotContext;
use crate::poller::Waker;
use crate::reactor::{Dispatch, Driver, Reactor};
use crate::slot::serve_connection;
use crate::worker::WorkerShared;
use crate::App;

struct Queue {
    jobs: VecDeque<(usize, Connection)>,
    /// App threads waiting on the condition variable.
    idle: usize,
    shutdown: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
    /// Requests queued and not yet taken by an app thread (read by the loop without a lock).
    queued: AtomicUsize,
    returned: Mutex<Vec<(usize, Option<Connection>)>>,
    waker: Waker,
}

struct Pool {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    in_flight: usize,
    /// Requests found ready in this loop iteration, queued together by `flush`.
    batch: Vec<(usize, Connection)>,
    max_queued: usize,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}

impl Driver for Pool {
    fn dispatch(&mut self, token: usize, conn: Connection) -> Dispatch {
        let waiting = self.shared.queued.load(Ordering::Relaxed) + self.batch.len();
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
        self.shared.queued.fetch_add(count, Ordering::Relaxed);
        let wake = queue.idle.min(count);
        drop(queue);
        for _ in 0..wake {
            self.shared.ready.notify_one();
        }
    }

    fn collect(&mut self, into: &mut Vec<(usize, Option<Connection>)>) {
        self.shared.waker.reset();
        let mut returned = lock(&self.shared.returned);
        self.in_flight -= returned.len();
        into.append(&mut returned);
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }

    fn waker_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.shared.waker.fd())
    }
}

fn app_thread(app: Arc<dyn App>, worker: Arc<WorkerShared>, pool: Arc<Shared>) {
    let app_ref = Arc::clone(&app);
    app.run_slot_thread(&mut || {
        let mut ctx = SlotContext::new();
        loop {
            let job = {
                let mut queue = lock(&pool.queue);
                loop {
                    if let Some(job) = queue.jobs.pop_front() {
                        pool.queued.fetch_sub(1, Ordering::Relaxed);
                        break Some(job);
                    }
                    if queue.shutdown {
                        break None;
                    }
                    queue.idle += 1;
                    queue = pool
                        .ready
                        .wait(queue)
                        .unwrap_or_else(|poison| poison.into_inner());
                    queue.idle -= 1;
                }
            };
            let Some((token, conn)) = job else { return };
            let (kept, returned) = serve_connection(conn, ctx, &*app_ref, &worker);
            ctx = returned;
            let mut back = lock(&pool.returned);
            let first = back.is_empty();
            back.push((token, kept));
            drop(back);
            if first {
                pool.waker.wake();
            }
        }
    });
}

/// Runs the event MPM: the calling thread is the loop; `threads` app threads serve (none:
/// the loop runs the app inline).
pub fn run(
    mut reactor: Reactor,
    app: Arc<dyn App>,
    worker: Arc<WorkerShared>,
) -> io::Result<StopReason> {
    if worker.config.threads == 0 {
        return crate::mpm::prefork::run(reactor, app, worker);
    }
    let shared = Arc::new(Shared {
        queue: Mutex::new(Queue {
            jobs: VecDeque::new(),
            idle: 0,
            shutdown: false,
        }),
        ready: Condvar::new(),
        queued: AtomicUsize::new(0),
        returned: Mutex::new(Vec::new()),
        waker: Waker::new()?,
    });
    let mut threads = Vec::new();
    for index in 0..worker.config.threads {
        let (app, worker, pool) = (Arc::clone(&app), Arc::clone(&worker), Arc::clone(&shared));
        threads.push(
            std::thread::Builder::new()
                .name(format!("tines-app-{index}"))
                .spawn(move || app_thread(app, worker, pool))?,
        );
    }
    let mut pool = Pool {
        shared,
        threads,
        in_flight: 0,
        batch: Vec::new(),
        max_queued: worker.config.max_queued_requests,
    };
    let result = reactor.run(&mut pool);
    let quick = matches!(result, Ok(StopReason::Quick));
    lock(&pool.shared.queue).shutdown = true;
    pool.shared.ready.notify_all();
    if !quick {
        for thread in pool.threads.drain(..) {
            let _ = thread.join();
        }
    }
    result
}
