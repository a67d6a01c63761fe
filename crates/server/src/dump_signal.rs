//! The worker's handler for the master's dump signal (`request_timeout`, `boot_timeout`):
//! the Rust half of a stuck worker's dump (docs/signals.md, "A stuck request").
//!
//! The worker installs it early (before the app loads); Python's `faulthandler.register(sig,
//! all_threads=True, chain=True)` is registered after it, so on the signal CPython's handler
//! writes the Python stack of every thread to the error log, puts this handler back and
//! re-raises the signal (its handler runs with `SA_NODEFER`, so the re-raised signal is
//! delivered at once, inside it), which runs this one; then faulthandler registers itself
//! again. This handler then sets the slot's `dumped` flag (the stacks are written) and
//! either hands the timed-out requests to the worker's loop or answers them itself:
//!
//! - A worker whose loop thread is free while app threads run the app (the thread and event
//!   MPMs with app threads) has its loop register a wake-up fd ([`set_loop_wake`]): the
//!   handler only sets a flag and writes a byte to that fd. The loop, which owns the
//!   connections (and will own their TLS and HTTP/2 state), then pays what each timed-out
//!   request's client is owed (`exchange::timeout`: the 503, or a shutdown) and drains the
//!   worker; the other requests in flight finish.
//! - A worker whose stuck request runs on the loop thread itself (prefork, and `event` with
//!   `threads = 0`) has no thread left to write the 503, so the handler writes it, raw, with
//!   `send(2)` on the fd, and shuts the connection down; the master kills the worker next.
//!   This is the one way left there, and it writes plain HTTP/1.1 on the socket; on a TLS
//!   connection (the sub-slot says so: `ThreadSlot::serves_tls`) it only shuts it down, since
//!   a record cannot be sealed from a signal handler: that client sees a close, not a 503
//!   (issue 37).
//!
//! Async-signal-safe only: atomics, `write(2)`, `send(2)` and `shutdown(2)`; no allocation,
//! no lock. signal-hook's handler (which calls this action) saves and restores `errno`.
//!
//! Races, and why they are harmless: the master marks a request by its number on the thread
//! (`ThreadSlot::mark_timed_out`, a CAS against the app thread's claim of its response); the
//! raw write takes the debt with a CAS first (`ThreadSlot::take_timed_out_fd`), so the
//! request's own thread writes nothing after it. What remains is the window of a few
//! instructions between the handler's check that the thread still serves that request and
//! `send`: a thread that ends its stuck request exactly then (its response unwritten) and
//! closes the connection could see its fd reused by another connection, answered 503; a
//! connection of a worker the master kills a moment later, which would lose it anyway.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, OnceLock};

use crate::scoreboard::Scoreboard;

/// What the handler answers a timed-out request whose response has not started. No `Date`:
/// formatting one is not async-signal-safe, and RFC 9110 6.6.1 makes it optional on 5xx.
pub const TIMEOUT_RESPONSE: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
Content-Type: text/plain\r\n\
Content-Length: 16\r\n\
Connection: close\r\n\
\r\n\
request timeout\n";

struct Target {
    scoreboard: Arc<Scoreboard>,
    slot: usize,
}

/// Set once per process, before the handler is registered: the handler only reads it.
static TARGET: OnceLock<Target> = OnceLock::new();

/// The fd the handler writes a byte to so that the loop pays the timed-out requests (-1: none
/// registered, the handler answers them itself).
static LOOP_WAKE: AtomicI32 = AtomicI32::new(-1);

/// A dump arrived since the loop last looked ([`take_request`]).
static REQUESTED: AtomicBool = AtomicBool::new(false);

/// Hands timed-out requests to the loop (`Some`: the fd the handler writes a byte to, which
/// the loop's poller watches), or takes them back (`None`: before that fd closes).
pub(crate) fn set_loop_wake(fd: Option<RawFd>) {
    LOOP_WAKE.store(fd.unwrap_or(-1), Ordering::Release);
}

/// The loop, when its control self-pipe was readable: whether a dump arrived since it last
/// asked (then it pays what the timed-out requests are owed).
pub(crate) fn take_request() -> bool {
    REQUESTED.load(Ordering::Relaxed) && REQUESTED.swap(false, Ordering::AcqRel)
}

/// Installs the dump handler for `signal` on slot `slot` of `scoreboard`. Once per process;
/// a second call is an error.
pub fn install(scoreboard: Arc<Scoreboard>, slot: usize, signal: i32) -> io::Result<()> {
    if scoreboard.slot(slot).is_none() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "scoreboard slot out of range",
        ));
    }
    TARGET
        .set(Target { scoreboard, slot })
        .map_err(|_| io::Error::other("the dump handler is installed already"))?;
    // SAFETY: `on_dump_signal` is async-signal-safe (atomics, send, shutdown; no allocation,
    // no lock), as signal-hook's low-level registration requires.
    unsafe { signal_hook::low_level::register(signal, on_dump_signal) }?;
    Ok(())
}

fn on_dump_signal() {
    let Some(target) = TARGET.get() else { return };
    let board = &target.scoreboard;
    let wake = LOOP_WAKE.load(Ordering::Acquire);
    if wake >= 0 {
        REQUESTED.store(true, Ordering::Release);
        // SAFETY: write is async-signal-safe; a full pipe (EAGAIN) already wakes the loop.
        unsafe { libc::write(wake, b"d".as_ptr().cast(), 1) };
    } else {
        for thread in 0..board.threads_per_slot() {
            let Some(thread_slot) = board.thread_slot(target.slot, thread) else {
                continue;
            };
            let tls = thread_slot.serves_tls();
            if let Some(fd) = thread_slot.take_timed_out_fd() {
                answer_timed_out(fd, tls);
            }
        }
    }
    if let Some(slot) = board.slot(target.slot) {
        slot.dumped.store(1, Ordering::Release);
    }
}

/// Writes [`TIMEOUT_RESPONSE`] without blocking (a fresh socket buffer takes it) and shuts the
/// connection down, so a stuck app thread that wakes up cannot write after it. On a TLS
/// connection (`tls`) only shuts it down: a record cannot be sealed here (the session is the
/// stuck thread's, and nothing may be locked or allocated), and plaintext would be garbage to
/// the client, who sees the connection close instead.
fn answer_timed_out(fd: i32, tls: bool) {
    // SAFETY: send and shutdown are async-signal-safe; the buffer is a static slice; a stale
    // fd fails with EBADF/ENOTSOCK, which is ignored.
    unsafe {
        if !tls {
            libc::send(
                fd,
                TIMEOUT_RESPONSE.as_ptr().cast(),
                TIMEOUT_RESPONSE.len(),
                libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            );
        }
        libc::shutdown(fd, libc::SHUT_RDWR);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsRawFd;

    #[test]
    fn the_timeout_response_is_complete_and_closes() {
        let text = std::str::from_utf8(TIMEOUT_RESPONSE).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains("Connection: close"));
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
    }

    #[test]
    fn the_handler_answers_the_marked_request_and_sets_the_flag_in_a_forked_worker() {
        let board = Arc::new(Scoreboard::new(1, 2).unwrap());
        board.claim(0, 1, 1);
        let (mut client, server) = std::os::unix::net::UnixStream::pair().unwrap();
        let (mut other_client, other_server) = std::os::unix::net::UnixStream::pair().unwrap();
        // SAFETY: the child installs the handler, raises the signal and _exits; it uses no
        // lock another thread of the test process could hold (the handler takes none, and
        // signal-hook's registration is the child's first).
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let stuck = board.thread_slot(0, 0).unwrap();
            stuck.begin_request(b"GET", b"/stuck", server.as_raw_fd());
            let busy = board.thread_slot(0, 1).unwrap();
            busy.begin_request(b"GET", b"/fine", other_server.as_raw_fd());
            stuck.mark_timed_out(1);
            let installed = install(Arc::clone(&board), 0, libc::SIGURG).is_ok();
            // SAFETY: raise sends the signal to this thread; the handler runs before it returns.
            unsafe { libc::raise(libc::SIGURG) };
            // SAFETY: _exit never returns.
            unsafe { libc::_exit(if installed { 0 } else { 1 }) };
        }
        drop(server);
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        assert!(board.read(0).unwrap().dumped);
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).unwrap();
        assert_eq!(answer, TIMEOUT_RESPONSE);
        // The unmarked thread's connection was left alone (still open on our side).
        other_client.set_nonblocking(true).unwrap();
        let mut byte = [0u8; 1];
        assert_eq!(
            other_client.read(&mut byte).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        drop(other_server);
    }

    #[test]
    fn on_a_tls_connection_the_handler_only_shuts_it_down_in_a_forked_worker() {
        let board = Arc::new(Scoreboard::new(1, 1).unwrap());
        board.claim(0, 1, 1);
        let (mut client, server) = std::os::unix::net::UnixStream::pair().unwrap();
        // SAFETY: as in the test above.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let stuck = board.thread_slot(0, 0).unwrap();
            let now = crate::scoreboard::monotonic_ns();
            stuck.begin_request_at(b"GET", b"/stuck", server.as_raw_fd(), true, now);
            stuck.mark_timed_out(1);
            let installed = install(Arc::clone(&board), 0, libc::SIGURG).is_ok();
            // SAFETY: raise sends the signal to this thread; the handler runs before it returns.
            unsafe { libc::raise(libc::SIGURG) };
            // SAFETY: _exit never returns.
            unsafe { libc::_exit(if installed { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        // Shut down (our copy of the socket is still open, so the EOF is the shutdown's), and
        // no plaintext 503 written into the TLS stream.
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).unwrap();
        assert_eq!(answer, b"");
        drop(server);
    }

    #[test]
    fn with_the_loop_registered_the_handler_only_flags_and_wakes_it_in_a_forked_worker() {
        let board = Arc::new(Scoreboard::new(1, 1).unwrap());
        board.claim(0, 1, 1);
        let (mut client, server) = std::os::unix::net::UnixStream::pair().unwrap();
        let (wake_read, wake_write) = std::os::unix::net::UnixStream::pair().unwrap();
        // SAFETY: as above; the child only stores atomics, raises and _exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let stuck = board.thread_slot(0, 0).unwrap();
            stuck.begin_request(b"GET", b"/stuck", server.as_raw_fd());
            stuck.mark_timed_out(1);
            let installed = install(Arc::clone(&board), 0, libc::SIGURG).is_ok();
            set_loop_wake(Some(wake_write.as_raw_fd()));
            // SAFETY: raise sends the signal to this thread; the handler runs before it returns.
            unsafe { libc::raise(libc::SIGURG) };
            // The loop's side: the request is taken once, and the 503 is still owed to it.
            let taken = take_request() && !take_request();
            let owed = stuck.owed() == Some((1, crate::scoreboard::Owed::Response));
            let code = if installed && taken && owed { 0 } else { 1 };
            // SAFETY: _exit never returns.
            unsafe { libc::_exit(code) };
        }
        drop(server);
        drop(wake_write);
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        assert!(board.read(0).unwrap().dumped);
        let mut woken = Vec::new();
        (&wake_read).read_to_end(&mut woken).unwrap();
        assert_eq!(woken, b"d", "one byte for the loop");
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).unwrap();
        assert!(
            answer.is_empty(),
            "the handler wrote nothing on the connection"
        );
    }
}
