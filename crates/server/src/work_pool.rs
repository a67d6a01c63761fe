//! A few threads that take CPU work off an event loop's thread (issue 39's follow-up, ADR 0037
//! "changed by issue 39's follow-up"): the ASGI bridge hands them a compressed response's
//! encoder with its next block, and gets the encoder back, with the block compressed, through
//! a list it drains when the pool's eventfd ([`WorkPool::fd`]) turns readable.
//!
//! Jobs carry a key (a connection's token): every job of one key runs on the same thread, in
//! the order submitted, and its result is listed in that order, so a response's blocks can
//! never overtake one another whatever the caller does. Jobs of different keys run in
//! parallel on up to `threads` threads.
//!
//! It owns its threads and their queues only: it must not know what a job does (no exchange,
//! no connection, no Python), and it is made only in a worker that needs it (never in the
//! master, which starts no threads).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

/// A job: its key, and the work whose result is listed for the caller.
type Job<T> = (u64, Box<dyn FnOnce() -> T + Send>);

/// Results waiting for the caller, and the eventfd that says so.
struct Done<T> {
    list: Mutex<Vec<(u64, T)>>,
    wake: OwnedFd,
}

/// Threads that run keyed jobs in order per key, and list their results.
pub struct WorkPool<T: Send + 'static> {
    queues: Vec<Sender<Job<T>>>,
    done: Arc<Done<T>>,
    threads: Vec<JoinHandle<()>>,
}

impl<T: Send + 'static> WorkPool<T> {
    /// Starts `threads` threads (at least one), named `{name}-{i}` (what `/proc/PID/task/*/comm`
    /// shows: keep `name` within 12 bytes).
    pub fn new(threads: usize, name: &str) -> io::Result<WorkPool<T>> {
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
            queues: Vec::new(),
            done,
            threads: Vec::new(),
        };
        for i in 0..threads.max(1) {
            let (send, receive) = channel::<Job<T>>();
            let done = Arc::clone(&pool.done);
            let thread = std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || {
                    for (key, work) in receive {
                        let result = work();
                        done.list
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push((key, result));
                        let one: u64 = 1;
                        // SAFETY: writes 8 bytes from a live u64 to the pool's eventfd. A full
                        // counter (EAGAIN) still reads as readable: nothing is lost.
                        unsafe {
                            libc::write(
                                done.wake.as_raw_fd(),
                                (&one as *const u64).cast(),
                                std::mem::size_of::<u64>(),
                            )
                        };
                    }
                })?;
            pool.queues.push(send);
            pool.threads.push(thread);
        }
        Ok(pool)
    }

    /// The fd that turns readable when results wait ([`WorkPool::take_done`] clears it).
    pub fn fd(&self) -> RawFd {
        self.done.wake.as_raw_fd()
    }

    /// Runs `work` on the thread of `key`, after that key's earlier jobs.
    pub fn submit(&self, key: u64, work: impl FnOnce() -> T + Send + 'static) {
        let thread = (key % self.queues.len() as u64) as usize;
        // A send fails only when the thread ended, which it does only when the pool is dropped.
        let _ = self.queues[thread].send((key, Box::new(work)));
    }

    /// Moves the results listed so far into `into` (in the order each key's jobs were
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

impl<T: Send + 'static> Drop for WorkPool<T> {
    /// Ends the threads once their queued jobs are done.
    fn drop(&mut self) {
        self.queues.clear();
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
        let pool = WorkPool::<u32>::new(3, "test-pool").unwrap();
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
        let pool = WorkPool::<&'static str>::new(2, "test-pool").unwrap();
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
        let pool = WorkPool::<String>::new(1, "tines-named").unwrap();
        pool.submit(3, || std::thread::current().name().unwrap_or("").to_owned());
        assert_eq!(collect(&pool, 1), vec![(3, "tines-named-0".to_owned())]);
        let mut pfd = libc::pollfd {
            fd: pool.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; a zero timeout only asks.
        assert_eq!(unsafe { libc::poll(&mut pfd, 1, 0) }, 0);
    }
}
