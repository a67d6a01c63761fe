//! `thread`: the poller thread holds every waiting connection; `threads` app threads each
//! take one ready connection at a time, serve it (pipelined requests included) and hand it
//! back through a queue and an eventfd (the shape of gunicorn's gthread, in Rust).

use std::collections::VecDeque;
use std::io;
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

struct Jobs {
    queue: VecDeque<(usize, Connection)>,
    shutdown: bool,
}

struct Shared {
    jobs: Mutex<Jobs>,
    ready: Condvar,
    returned: Mutex<Vec<(usize, Option<Connection>)>>,
    waker: Waker,
}

struct Pool {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    in_flight: usize,
}

impl Driver for Pool {
    fn dispatch(&mut self, token: usize, conn: Connection) -> Dispatch {
        let mut jobs = self
            .shared
            .jobs
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        jobs.queue.push_back((token, conn));
        drop(jobs);
        self.shared.ready.notify_one();
        self.in_flight += 1;
        Dispatch::Handed
    }

    fn collect(&mut self, into: &mut Vec<(usize, Option<Connection>)>) {
        self.shared.waker.reset();
        let mut returned = self
            .shared
            .returned
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
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
                let mut jobs = pool
                    .jobs
                    .lock()
                    .unwrap_or_else(|poison| poison.into_inner());
                loop {
                    if let Some(job) = jobs.queue.pop_front() {
                        break Some(job);
                    }
                    if jobs.shutdown {
                        break None;
                    }
                    jobs = pool
                        .ready
                        .wait(jobs)
                        .unwrap_or_else(|poison| poison.into_inner());
                }
            };
            let Some((token, conn)) = job else { return };
            let (kept, returned) = serve_connection(conn, ctx, &*app_ref, &worker);
            ctx = returned;
            pool.returned
                .lock()
                .unwrap_or_else(|poison| poison.into_inner())
                .push((token, kept));
            pool.waker.wake();
        }
    });
}

/// Runs the thread MPM: the calling thread polls, `threads` app threads serve.
pub fn run(
    mut reactor: Reactor,
    app: Arc<dyn App>,
    worker: Arc<WorkerShared>,
) -> io::Result<StopReason> {
    let shared = Arc::new(Shared {
        jobs: Mutex::new(Jobs {
            queue: VecDeque::new(),
            shutdown: false,
        }),
        ready: Condvar::new(),
        returned: Mutex::new(Vec::new()),
        waker: Waker::new()?,
    });
    let mut threads = Vec::new();
    for index in 0..worker.config.threads.max(1) {
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
    };
    let result = reactor.run(&mut pool);
    let quick = matches!(result, Ok(StopReason::Quick));
    pool.shared
        .jobs
        .lock()
        .unwrap_or_else(|poison| poison.into_inner())
        .shutdown = true;
    pool.shared.ready.notify_all();
    if !quick {
        for thread in pool.threads.drain(..) {
            let _ = thread.join();
        }
    }
    result
}
