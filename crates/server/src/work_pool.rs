//! A few threads that take work off an event loop's thread (issue 39's follow-up, ADRs 0036
//! and 0037 "changed by issue 39's follow-up"): the ASGI bridge hands them a compressed
//! response's encoder with its next block, and cold static lookups that may wait for the disk;
//! it gets the results back through a list it drains when the pool's eventfd
//! ([`WorkPool::fd`]) turns readable.
//!
//! Two kinds of thread, so that work that may block for ever never holds work that cannot:
//!
//! - **Lanes** ([`WorkPool::submit`]), for short CPU work whose order matters: jobs carry a key
//!   (a connection's token); every job of one key runs on the same lane, in the order
//!   submitted, and its result is listed in that order, so a response's blocks can never
//!   overtake one another whatever the caller does. Keys spread over the lanes. Dropping the
//!   pool joins the lanes once their queued jobs are done (each is bounded CPU work).
//! - **Apart** ([`WorkPool::submit_apart`]), for jobs that may wait on a file system for as
//!   long as it takes (a hung NFS server): one queue that any of these threads takes the next
//!   job from, no order with any other job, results listed as they end. A job held there
//!   holds its own thread only: never a lane, never a job another apart thread can take.
//!   Dropping the pool does not wait for them: a held job's thread is left to end when the
//!   job returns (its result is then dropped), and jobs still queued are dropped unrun.
//!
//! It owns its threads and their queues only: it must not know what a job does (no exchange,
//! no connection, no Python), and it is made only in a worker that needs it (never in the
//! master, which starts no threads).

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

/// A job: its key, and the work whose result is listed for the caller.
type Job<T> = (u64, Box<dyn FnOnce() -> T + Send>);

/// Results waiting for the caller, and the eventfd that says so; shared with every thread (an
/// apart thread may outlive the pool).
struct Done<T> {
    list: Mutex<Vec<(u64, T)>>,
    wake: OwnedFd,
}

/// The apart threads' one queue: None once the pool is dropped (they then run and list
/// nothing more). A job wakes one waiting thread only (`notify_one`): no idle sibling is
/// woken to wait again.
struct Apart<T> {
    queue: Mutex<Option<VecDeque<Job<T>>>>,
    ready: Condvar,
}

impl<T> Apart<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<VecDeque<Job<T>>>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T> Done<T> {
    /// Lists a result and wakes the caller.
    fn push(&self, key: u64, result: T) {
        self.list
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((key, result));
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to the pool's eventfd. A full counter
        // (EAGAIN) still reads as readable: nothing is lost.
        unsafe {
            libc::write(
                self.wake.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
    }
}

/// Threads that run keyed jobs in order per key on lanes, and jobs that may block apart, and
/// list their results.
pub struct WorkPool<T: Send + 'static> {
    lanes: Vec<Sender<Job<T>>>,
    /// The apart threads' one queue (None: the pool has none).
    apart: Option<Arc<Apart<T>>>,
    done: Arc<Done<T>>,
    /// The lanes' threads, joined on drop (the apart threads are never joined).
    threads: Vec<JoinHandle<()>>,
}

impl<T: Send + 'static> WorkPool<T> {
    /// Starts `lanes` lane threads, named `{name}-{i}`, and `apart` apart threads, named
    /// `{name}-io{i}` (what `/proc/PID/task/*/comm` shows: keep `name` within 11 bytes).
    /// Either may be zero (a caller with no such jobs); then submitting such a job panics.
    /// Returns once every thread runs under its name (`/proc` shows them all from then on).
    pub fn new(lanes: usize, apart: usize, name: &str) -> io::Result<WorkPool<T>> {
        // SAFETY: eventfd takes no pointer; a valid fd is owned from here on.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just made and is owned by nothing else.
        let wake = unsafe { OwnedFd::from_raw_fd(fd) };
        let done = Arc::new(Done {
            list: Mutex::new(Vec::new()),
            wake,
        });
        let mut pool = WorkPool {
            lanes: Vec::new(),
            apart: None,
            done,
            threads: Vec::new(),
        };
        // Each thread says it runs (the name is set by the thread itself, as it starts).
        let (running, started) = channel::<()>();
        for i in 0..lanes {
            let (send, receive) = channel::<Job<T>>();
            let done = Arc::clone(&pool.done);
            let running = running.clone();
            let thread = std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || {
                    let _ = running.send(());
                    drop(running);
                    for (key, work) in receive {
                        done.push(key, work());
                    }
                })?;
            pool.lanes.push(send);
            pool.threads.push(thread);
        }
        if apart > 0 {
            let queue = Arc::new(Apart {
                queue: Mutex::new(Some(VecDeque::new())),
                ready: Condvar::new(),
            });
            // Set first: a failed spawn drops the pool, which then closes the queue for the
            // threads already started.
            pool.apart = Some(Arc::clone(&queue));
            for i in 0..apart {
                let queue = Arc::clone(&queue);
                let done = Arc::clone(&pool.done);
                let running = running.clone();
                // Detached: the handle is dropped, the thread ends on its own.
                std::thread::Builder::new()
                    .name(format!("{name}-io{i}"))
                    .spawn(move || {
                        let _ = running.send(());
                        drop(running);
                        run_apart(&queue, &done)
                    })?;
            }
        }
        drop(running);
        // Ends once every thread has said so (each drops its sender then).
        for () in started {}
        Ok(pool)
    }

    /// The fd that turns readable when results wait ([`WorkPool::take_done`] clears it).
    pub fn fd(&self) -> RawFd {
        self.done.wake.as_raw_fd()
    }

    /// Runs `work` on the lane of `key`, after that key's earlier lane jobs (panics if the
    /// pool has no lanes).
    pub fn submit(&self, key: u64, work: impl FnOnce() -> T + Send + 'static) {
        let lane = (key % self.lanes.len() as u64) as usize;
        // A send fails only when the thread ended, which it does only when the pool is dropped.
        let _ = self.lanes[lane].send((key, Box::new(work)));
    }

    /// Runs `work` on the next free apart thread, in no order with any other job: for work
    /// that may block for long (panics if the pool has no apart threads).
    pub fn submit_apart(&self, key: u64, work: impl FnOnce() -> T + Send + 'static) {
        let apart = self.apart.as_ref().expect("a pool with apart threads");
        if let Some(queue) = apart.lock().as_mut() {
            queue.push_back((key, Box::new(work)));
        }
        apart.ready.notify_one();
    }

    /// Moves the results listed so far into `into` (in the order each key's lane jobs were
    /// submitted), and clears the fd's readiness.
    pub fn take_done(&self, into: &mut Vec<(u64, T)>) {
        let mut count = 0u64;
        // SAFETY: reads 8 bytes into a live u64 from the pool's non-blocking eventfd.
        unsafe {
            libc::read(
                self.fd(),
                (&mut count as *mut u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
        into.append(
            &mut self
                .done
                .list
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
    }
}

/// An apart thread: takes the next job of the shared queue, runs it with no lock held, lists
/// its result; ends once the pool is dropped.
fn run_apart<T>(apart: &Apart<T>, done: &Done<T>) {
    loop {
        let (key, work) = {
            let mut queue = apart.lock();
            loop {
                match queue.as_mut() {
                    None => return,
                    Some(jobs) => match jobs.pop_front() {
                        Some(job) => break job,
                        None => {
                            queue = apart
                                .ready
                                .wait(queue)
                                .unwrap_or_else(PoisonError::into_inner);
                        }
                    },
                }
            }
        };
        let result = work();
        if apart.lock().is_none() {
            return;
        }
        done.push(key, result);
    }
}

impl<T: Send + 'static> Drop for WorkPool<T> {
    /// Ends the lanes once their queued jobs are done, and leaves the apart threads: one held
    /// by a job that never returns must not hold the worker's exit.
    fn drop(&mut self) {
        if let Some(apart) = self.apart.take() {
            // The queued jobs are dropped here, unrun; waiting threads wake and end.
            let queued = apart.lock().take();
            drop(queued);
            apart.ready.notify_all();
        }
        self.lanes.clear();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::sync_channel;

    /// Waits (poll, no timeout) until the pool's fd is readable.
    fn wait_readable(fd: RawFd) {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        assert_eq!(unsafe { libc::poll(&mut pfd, 1, -1) }, 1);
    }

    /// Collects results until `n` are in hand.
    fn collect<T: Send>(pool: &WorkPool<T>, n: usize) -> Vec<(u64, T)> {
        let mut all = Vec::new();
        while all.len() < n {
            wait_readable(pool.fd());
            pool.take_done(&mut all);
        }
        all
    }

    #[test]
    fn one_keys_jobs_come_back_in_order_even_when_the_first_is_held() {
        let pool = WorkPool::<u32>::new(3, 0, "test-pool").unwrap();
        // The key's first job waits on a gate opened only after every job is submitted: the
        // later ones, on the same thread, cannot overtake it.
        let (open, gate) = sync_channel::<()>(0);
        pool.submit(7, move || {
            gate.recv().unwrap();
            0
        });
        for i in 1..100u32 {
            pool.submit(7, move || i);
        }
        open.send(()).unwrap();
        let got = collect(&pool, 100);
        assert!(got.iter().all(|(key, _)| *key == 7));
        let order: Vec<u32> = got.into_iter().map(|(_, v)| v).collect();
        assert_eq!(order, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn another_key_is_served_while_one_key_is_held() {
        let pool = WorkPool::<&'static str>::new(2, 0, "test-pool").unwrap();
        let (open, gate) = sync_channel::<()>(0);
        // Key 0 holds thread 0; key 1 (thread 1) is answered before the gate opens.
        pool.submit(0, move || {
            gate.recv().unwrap();
            "held"
        });
        pool.submit(1, || "free");
        let first = collect(&pool, 1);
        assert_eq!(first, vec![(1, "free")]);
        open.send(()).unwrap();
        assert_eq!(collect(&pool, 1), vec![(0, "held")]);
    }

    #[test]
    fn threads_carry_the_name_and_the_fd_is_clear_after_taking() {
        let pool = WorkPool::<String>::new(1, 1, "tines-named").unwrap();
        let name = || std::thread::current().name().unwrap_or("").to_owned();
        pool.submit(3, name);
        assert_eq!(collect(&pool, 1), vec![(3, "tines-named-0".to_owned())]);
        pool.submit_apart(4, name);
        assert_eq!(collect(&pool, 1), vec![(4, "tines-named-io0".to_owned())]);
        let mut pfd = libc::pollfd {
            fd: pool.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; a zero timeout only asks.
        assert_eq!(unsafe { libc::poll(&mut pfd, 1, 0) }, 0);
    }

    /// An apart job that says it started, then waits for the gate.
    fn held(
        started: std::sync::mpsc::SyncSender<()>,
        gate: std::sync::mpsc::Receiver<()>,
    ) -> impl FnOnce() -> &'static str + Send + 'static {
        move || {
            started.send(()).unwrap();
            gate.recv().unwrap();
            "apart"
        }
    }

    #[test]
    fn a_held_apart_job_holds_no_lane_of_its_key_or_another() {
        let pool = WorkPool::<&'static str>::new(2, 1, "test-pool").unwrap();
        let (started, running) = sync_channel::<()>(0);
        let (open, gate) = sync_channel::<()>(0);
        // Key 0's apart job runs and is held; key 0's lane job and key 1's come back meanwhile.
        pool.submit_apart(0, held(started, gate));
        running.recv().unwrap();
        pool.submit(0, || "lane of 0");
        pool.submit(1, || "lane of 1");
        let mut lanes = collect(&pool, 2);
        lanes.sort();
        assert_eq!(lanes, vec![(0, "lane of 0"), (1, "lane of 1")]);
        open.send(()).unwrap();
        assert_eq!(collect(&pool, 1), vec![(0, "apart")]);
    }

    #[test]
    fn a_free_apart_thread_takes_the_next_job_while_another_is_held() {
        let pool = WorkPool::<&'static str>::new(0, 2, "test-pool").unwrap();
        let (started, running) = sync_channel::<()>(0);
        let (open, gate) = sync_channel::<()>(0);
        pool.submit_apart(5, held(started, gate));
        running.recv().unwrap();
        pool.submit_apart(6, || "free");
        assert_eq!(collect(&pool, 1), vec![(6, "free")]);
        open.send(()).unwrap();
        assert_eq!(collect(&pool, 1), vec![(5, "apart")]);
    }

    #[test]
    fn dropping_the_pool_finishes_the_lanes_and_leaves_a_held_apart_job() {
        let pool = WorkPool::<&'static str>::new(1, 1, "test-pool").unwrap();
        let (started, running) = sync_channel::<()>(0);
        let (open, gate) = sync_channel::<()>(0);
        pool.submit_apart(0, held(started, gate));
        running.recv().unwrap();
        // Queued behind the held job: dropped unrun once the pool is gone.
        let (queued_ran, queued) = sync_channel::<()>(1);
        pool.submit_apart(1, move || {
            queued_ran.send(()).unwrap();
            "queued"
        });
        // Queued on a lane: run before the drop returns.
        let (lane_ran, lane) = sync_channel::<()>(1);
        pool.submit(2, move || {
            lane_ran.send(()).unwrap();
            "lane"
        });
        // Returns though the apart job is still held (joining it would never return).
        drop(pool);
        assert_eq!(lane.try_recv(), Ok(()));
        // The queued job was dropped (its sender with it) unrun.
        assert_eq!(queued.recv(), Err(std::sync::mpsc::RecvError));
        // Released: the held job returns, its thread ends (a test process leaks no thread).
        open.send(()).unwrap();
    }
}
