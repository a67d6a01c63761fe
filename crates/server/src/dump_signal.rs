//! The worker's handler for the master's dump signal (`request_timeout`, `boot_timeout`):
//! the Rust half of a stuck worker's last moments.
//!
//! The worker installs it early (before the app loads); Python's `faulthandler.register(sig,
//! all_threads=True, chain=True)` is registered after it, so on the signal CPython's handler
//! writes the Python stack of every thread to the error log, puts this handler back and
//! re-raises the signal (its handler runs with `SA_NODEFER`, so the re-raised signal is
//! delivered at once, inside it), which runs this one; then faulthandler registers itself
//! again. This handler then answers `503` with `Connection: close` on the connection of each
//! sub-slot the master marked timed out, where no byte of the response was sent yet, shuts
//! that connection down, and sets the slot's `dumped` flag, which tells the master the dump is
//! complete and the worker can be killed.
//!
//! Async-signal-safe only: atomics, `send(2)` and `shutdown(2)`; no allocation, no lock.
//! signal-hook's handler (which calls this action) saves and restores `errno`.
//!
//! Races, and why they are harmless: the master marks a request by its number on the thread
//! (`ThreadSlot::mark_timed_out`); between that and this handler the request may end and the
//! fd be reused for another connection. The handler answers only if the sub-slot still serves
//! that same request number, in the app, with nothing sent, read under the sub-slot's sequence
//! counter before and after ([`crate::scoreboard::ThreadSlot::timed_out_fd`]). What remains is
//! the window of a few instructions between that check and `send`: a thread that finishes
//! its stuck request exactly then has its fd answered twice or a new connection answered
//! 503; both are connections of a worker the master kills a moment later, which would lose
//! them anyway.

use std::io;
use std::sync::atomic::Ordering;
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
    for thread in 0..board.threads_per_slot() {
        let Some(thread_slot) = board.thread_slot(target.slot, thread) else {
            continue;
        };
        if let Some(fd) = thread_slot.timed_out_fd() {
            answer_timed_out(fd);
        }
    }
    if let Some(slot) = board.slot(target.slot) {
        slot.dumped.store(1, Ordering::Release);
    }
}

/// Writes [`TIMEOUT_RESPONSE`] without blocking (a fresh socket buffer takes it) and shuts the
/// connection down, so a stuck app thread that wakes up cannot write after it.
fn answer_timed_out(fd: i32) {
    // SAFETY: send and shutdown are async-signal-safe; the buffer is a static slice; a stale
    // fd fails with EBADF/ENOTSOCK, which is ignored.
    unsafe {
        libc::send(
            fd,
            TIMEOUT_RESPONSE.as_ptr().cast(),
            TIMEOUT_RESPONSE.len(),
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        );
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
}
