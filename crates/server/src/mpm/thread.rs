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
use crate::mpm::app_threads::{self, lock};
use crate::poller::Waker;
use crate::reactor::{Dispatch, Driver, Reactor};
use crate::shared::WorkerShared;
use crate::slot::serve_connection;
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
        let mut jobs = lock(&self.shared.jobs);
        jobs.queue.push_back((token, conn));
        drop(jobs);
        self.shared.ready.notify_one();
        self.in_flight += 1;
        Dispatch::Handed
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

    fn can_take_connection(&self) -> bool {
        // Connections handed out (queued, served, or back but not yet collected) fewer than
        // the app threads: one of them is free, or about to be.
        self.in_flight < self.threads.len()
    }

    fn waker_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.shared.waker.fd())
    }
}

fn app_thread(index: usize, app: Arc<dyn App>, worker: Arc<WorkerShared>, pool: Arc<Shared>) {
    let app_ref = Arc::clone(&app);
    app.run_slot_thread(&mut || {
        let mut ctx = SlotContext::for_thread(index);
        loop {
            let job = {
                let mut jobs = lock(&pool.jobs);
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
            lock(&pool.returned).push((token, kept));
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
    let threads = app_threads::spawn(
        worker.config.threads.max(1),
        &app,
        &worker,
        &shared,
        app_thread,
    )?;
    let mut pool = Pool {
        shared,
        threads,
        in_flight: 0,
    };
    let result = reactor.run(&mut pool);
    lock(&pool.shared.jobs).shutdown = true;
    pool.shared.ready.notify_all();
    app_threads::join(&mut pool.threads, &result);
    result
}
