//! A thin wrapper over Linux epoll: the reactor of every MPM.
//!
//! Why not mio: mio registers everything edge-triggered. Listening sockets shared by several
//! worker processes want *level-triggered* readiness, so that a worker can accept only a few
//! connections per wake-up and leave the rest for its siblings without losing the wake-up
//! (ADR 0002). Connections are registered edge-triggered (the mio way): the owner reads until
//! `EAGAIN` before it parks a connection again.
//!
//! This module owns the epoll fd and nothing else: no buffers, no sockets, no timers.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Identifies a registered file descriptor in the events that `wait` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Token(pub u64);

/// How readiness is reported for a registered fd.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// Reported while the fd stays ready (listeners, control pipes).
    Level,
    /// Reported once per transition to ready (connections; the owner drains to `EAGAIN`).
    Edge,
}

/// One readiness report.
#[derive(Clone, Copy, Debug)]
pub struct Event {
    /// The token given at registration.
    pub token: Token,
    /// Readable, or the peer hung up / an error is pending (a read will tell which).
    pub readable: bool,
    /// Writable.
    pub writable: bool,
    /// The socket has an error or both directions are shut (`EPOLLERR`/`EPOLLHUP`): a write
    /// will fail and tell why.
    pub error: bool,
    /// The peer shut its side (`EPOLLRDHUP`/`EPOLLHUP`): after the bytes it sent, a read
    /// returns EOF, and no later edge will say so.
    pub peer_closed: bool,
}

/// An epoll instance.
pub struct Poller {
    epoll: OwnedFd,
    raw: Vec<libc::epoll_event>,
}

/// How many events one `wait` can return. 256 keeps the array at 3 KiB; more ready fds are
/// simply reported by the next `wait`.
const EVENTS_PER_WAIT: usize = 256;

impl Poller {
    /// Creates an epoll instance (close-on-exec).
    pub fn new() -> io::Result<Self> {
        // SAFETY: epoll_create1 takes no pointers; the returned fd is checked before use.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh, valid descriptor that nothing else owns.
        let epoll = unsafe { OwnedFd::from_raw_fd(fd) };
        let raw = vec![libc::epoll_event { events: 0, u64: 0 }; EVENTS_PER_WAIT];
        Ok(Poller { epoll, raw })
    }

    /// The epoll fd itself: readable while events wait, so another event loop can watch the
    /// whole set through it (ADR 0014).
    pub fn fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    fn control(&self, op: libc::c_int, fd: RawFd, token: Token, events: u32) -> io::Result<()> {
        let mut event = libc::epoll_event {
            events,
            u64: token.0,
        };
        // SAFETY: `event` is a valid epoll_event that lives across the call; the kernel copies it.
        let rc = unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), op, fd, &mut event) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn mask(trigger: Trigger, writable: bool) -> u32 {
        let mut events = (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
        if writable {
            events |= libc::EPOLLOUT as u32;
        }
        if trigger == Trigger::Edge {
            events |= libc::EPOLLET as u32;
        }
        events
    }

    /// Watches `fd` for readability.
    pub fn register(&self, fd: RawFd, token: Token, trigger: Trigger) -> io::Result<()> {
        self.control(libc::EPOLL_CTL_ADD, fd, token, Self::mask(trigger, false))
    }

    /// Watches a client connection, edge-triggered, for readability and writability (the
    /// poller finishes response output a slot left pending, every MPM: ADR 0009).
    ///
    /// What that costs: adding a writable socket reports it writable at once, so a connection
    /// whose request has not arrived by the loop's next wait costs one extra `epoll_wait`
    /// return (once per connection, not per request: when the request is already there the
    /// two edges come as one event). After that a writability edge comes only when the socket
    /// had been full, so responses that fit it cost no wake-up. Watching reads only and
    /// adding `EPOLLOUT` with `EPOLL_CTL_MOD` when output is left pending would save that one
    /// return but cost an `epoll_ctl` per slow response (and another to take it off), made
    /// from the slot's thread or by waking the loop to make it; one cheap return per
    /// connection, which also pays an `accept`, reads and a close, is the smaller cost. (A
    /// connection read as it was accepted, from a deferred listener, is added only once it
    /// must wait, and one served and closed at once never is: ADR 0017.)
    pub fn register_connection(&self, fd: RawFd, token: Token) -> io::Result<()> {
        Self::add_connection(self.epoll.as_raw_fd(), fd, token)
    }

    /// [`Poller::register_connection`] into the poller whose fd is `epoll`, from any thread
    /// (a slot that must leave output for the poller to a connection not yet watched:
    /// [`crate::connection::Connection::watch`]).
    pub fn add_connection(epoll: RawFd, fd: RawFd, token: Token) -> io::Result<()> {
        let mut event = libc::epoll_event {
            events: Self::mask(Trigger::Edge, true),
            u64: token.0,
        };
        // SAFETY: `event` is a valid epoll_event that lives across the call; the kernel copies it.
        if unsafe { libc::epoll_ctl(epoll, libc::EPOLL_CTL_ADD, fd, &mut event) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Changes what `fd` is watched for.
    pub fn reregister(
        &self,
        fd: RawFd,
        token: Token,
        trigger: Trigger,
        writable: bool,
    ) -> io::Result<()> {
        self.control(
            libc::EPOLL_CTL_MOD,
            fd,
            token,
            Self::mask(trigger, writable),
        )
    }

    /// Stops watching `fd` (closing the fd does this too, when no duplicate exists).
    pub fn deregister(&self, fd: RawFd) -> io::Result<()> {
        self.control(libc::EPOLL_CTL_DEL, fd, Token(0), 0)
    }

    /// Waits up to `timeout` (forever if `None`) and appends the ready events to `out`.
    /// `EINTR` returns with no events: the caller's loop checks its control pipe anyway.
    pub fn wait(&mut self, out: &mut Vec<Event>, timeout: Option<Duration>) -> io::Result<()> {
        out.clear();
        let ms = match timeout {
            None => -1,
            // Round up so that a 0.4 ms deadline does not spin with a 0 ms timeout.
            Some(t) => t.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32,
        };
        // SAFETY: `raw` has EVENTS_PER_WAIT initialised entries and the kernel writes at most that many.
        let n = unsafe {
            crate::io::raw::epoll_wait(
                self.epoll.as_raw_fd(),
                self.raw.as_mut_ptr(),
                EVENTS_PER_WAIT as i32,
                ms,
            )
        };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                return Ok(());
            }
            return Err(err);
        }
        for raw in &self.raw[..n as usize] {
            let bits = raw.events;
            let hup = (libc::EPOLLHUP | libc::EPOLLERR | libc::EPOLLRDHUP) as u32;
            out.push(Event {
                token: Token(raw.u64),
                readable: bits & (libc::EPOLLIN as u32 | hup) != 0,
                writable: bits & libc::EPOLLOUT as u32 != 0,
                error: bits & (libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0,
                peer_closed: bits & (libc::EPOLLHUP | libc::EPOLLRDHUP) as u32 != 0,
            });
        }
        Ok(())
    }
}

/// An eventfd used to wake a poller from another thread (the app threads of the thread and event MPMs).
pub struct Waker {
    fd: OwnedFd,
}

impl Waker {
    /// Creates a non-blocking eventfd.
    pub fn new() -> io::Result<Self> {
        // SAFETY: eventfd takes no pointers; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Waker { fd })
    }

    /// Wakes the poller that watches this waker.
    pub fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64; an eventfd write of 8 bytes is the protocol.
        // A full counter (EAGAIN) already guarantees a pending wake-up, so the result is ignored.
        let _ = unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Clears pending wake-ups (call when the poller reports it readable).
    pub fn reset(&self) {
        let mut value: u64 = 0;
        // SAFETY: reads 8 bytes into a valid u64.
        let _ = unsafe { libc::read(self.fd.as_raw_fd(), (&mut value as *mut u64).cast(), 8) };
    }

    /// The fd to register (level-triggered).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}
