//! Socket I/O with deadlines over non-blocking fds.
//!
//! Connection fds stay non-blocking for their whole life (the poller needs that). A slot that
//! owns a connection while it serves a request waits with `poll(2)` on that one fd when a read
//! or write would block, up to the phase's deadline. Writes use `sendmsg(MSG_NOSIGNAL)` (`send`
//! for one buffer) so a peer that went away is an `EPIPE` error, never a SIGPIPE.
//!
//! A connection's reads and writes reach these through its transport (`transport::Link`),
//! never directly: a TLS transport (`tls::conn`) puts its records between them and the
//! socket.

use std::io;
use std::os::fd::RawFd;
use std::time::Instant;

/// The error returned when a deadline passes.
pub fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, format!("{what} timed out"))
}

/// Waits until `fd` is readable (`write == false`) or writable, or `deadline` passes.
pub fn wait_fd(fd: RawFd, write: bool, deadline: Instant, what: &str) -> io::Result<()> {
    let events = if write { libc::POLLOUT } else { libc::POLLIN };
    wait_fd_events(fd, events, deadline, what)
}

/// Waits until one of the poll `events` happens on `fd`, or `deadline` passes (a TLS read
/// whose session still owes the client a record waits for either direction).
pub fn wait_fd_events(fd: RawFd, events: i16, deadline: Instant, what: &str) -> io::Result<()> {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Err(timed_out(what));
        }
        let ms = (deadline - now)
            .as_micros()
            .div_ceil(1000)
            .min(i32::MAX as u128) as i32;
        let mut pfd = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc > 0 {
            return Ok(());
        }
        if rc < 0 {
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
    }
}

/// Bytes written to `fd` that its peer has not acknowledged yet (`SIOCOUTQ`: for TCP, sent
/// but unacknowledged plus not yet sent).
pub fn unacknowledged_output(fd: RawFd) -> io::Result<usize> {
    let mut length: libc::c_int = 0;
    // SAFETY: SIOCOUTQ writes one c_int through the pointer, which is valid for the call.
    if unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut length) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(length.max(0) as usize)
}

/// The system calls of the hot path, made with `syscall(2)` instead of glibc's wrappers.
///
/// Why: `read`, `sendmsg`, `sendto` and `epoll_wait` are POSIX cancellation points, and in a
/// process with more than one thread (the event and thread MPMs) glibc's wrappers switch
/// asynchronous cancellation on and off around each call: two locked instructions per call,
/// four per hello-world request (callgrind). This server never cancels a thread.
pub(crate) mod raw {
    use std::os::fd::RawFd;

    // Integer arguments are widened to `long`, the width `syscall(2)` reads each one at.

    /// `read(2)`.
    ///
    /// # Safety
    /// `buf` must be valid for writes of `len` bytes.
    pub unsafe fn read(fd: RawFd, buf: *mut u8, len: usize) -> isize {
        // SAFETY: the caller's contract; the kernel writes at most `len` bytes to `buf`.
        unsafe { libc::syscall(libc::SYS_read, fd as libc::c_long, buf, len) as isize }
    }

    /// `sendmsg(2)`.
    ///
    /// # Safety
    /// `msg` must point to a valid `msghdr` whose buffers are valid for reads.
    pub unsafe fn sendmsg(fd: RawFd, msg: *const libc::msghdr, flags: libc::c_int) -> isize {
        // SAFETY: the caller's contract; the kernel only reads through `msg`.
        unsafe {
            libc::syscall(
                libc::SYS_sendmsg,
                fd as libc::c_long,
                msg,
                flags as libc::c_long,
            ) as isize
        }
    }

    /// `send(2)` (`sendto` with no address).
    ///
    /// # Safety
    /// `buf` must be valid for reads of `len` bytes.
    pub unsafe fn send(fd: RawFd, buf: *const u8, len: usize, flags: libc::c_int) -> isize {
        // SAFETY: the caller's contract; no address (a connected socket).
        unsafe {
            libc::syscall(
                libc::SYS_sendto,
                fd as libc::c_long,
                buf,
                len,
                flags as libc::c_long,
                std::ptr::null::<libc::sockaddr>(),
                0 as libc::c_long,
            ) as isize
        }
    }

    /// `epoll_wait(2)`.
    ///
    /// # Safety
    /// `events` must be valid for writes of `max` entries.
    pub unsafe fn epoll_wait(
        epfd: RawFd,
        events: *mut libc::epoll_event,
        max: libc::c_int,
        timeout_ms: libc::c_int,
    ) -> libc::c_int {
        // SAFETY: the caller's contract; the kernel writes at most `max` events.
        unsafe {
            libc::syscall(
                libc::SYS_epoll_wait,
                epfd as libc::c_long,
                events,
                max as libc::c_long,
                timeout_ms as libc::c_long,
            ) as libc::c_int
        }
    }
}

/// One non-blocking `read`. `Ok(None)` means it would block.
pub fn read_nonblocking(fd: RawFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    // SAFETY: buf is valid for writes of buf.len() bytes.
    nonblocking(|| unsafe { raw::read(fd, buf.as_mut_ptr(), buf.len()) })
}

/// True when a read of `fd` would not block: bytes wait, or an EOF or an error does. Looks
/// at one byte without taking it (`MSG_PEEK`); not on the hot path (the loop asks only at a
/// deadline, to tell a silent client from a busy worker).
pub fn input_waiting(fd: RawFd) -> bool {
    let mut byte = 0u8;
    // SAFETY: one byte of writable memory for the duration of the call.
    let peeked = nonblocking(|| unsafe {
        libc::recv(
            fd,
            (&raw mut byte).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    });
    !matches!(peeked, Ok(None))
}

/// Runs a non-blocking syscall that returns a byte count, again after `EINTR`: `Ok(None)`
/// when it would block.
fn nonblocking(mut call: impl FnMut() -> isize) -> io::Result<Option<usize>> {
    loop {
        let n = call();
        if n >= 0 {
            return Ok(Some(n as usize));
        }
        let err = io::Error::last_os_error();
        match err.kind() {
            io::ErrorKind::WouldBlock => return Ok(None),
            io::ErrorKind::Interrupted => continue,
            _ => return Err(err),
        }
    }
}

/// Reads at least one byte (or EOF: `Ok(0)`), waiting up to `deadline`.
pub fn read_with_deadline(
    fd: RawFd,
    buf: &mut [u8],
    deadline: Instant,
    what: &str,
) -> io::Result<usize> {
    loop {
        if let Some(n) = read_nonblocking(fd, buf)? {
            return Ok(n);
        }
        wait_fd(fd, false, deadline, what)?;
    }
}

/// Vectored writes take at most this many parts: responses have a head, a body and a chunk
/// trailer (the loop's pending output has three).
const MAX_PARTS: usize = 8;

/// One non-blocking `sendmsg` of `parts` from byte `skip` on; returns the bytes written
/// (`Ok(None)`: it would block). Never raises SIGPIPE.
pub fn write_vectored_nonblocking(
    fd: RawFd,
    parts: &[&[u8]],
    mut skip: usize,
) -> io::Result<Option<usize>> {
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; MAX_PARTS];
    let mut count = 0;
    for part in parts {
        if skip >= part.len() {
            skip -= part.len();
            continue;
        }
        if count == MAX_PARTS {
            break;
        }
        iov[count] = libc::iovec {
            iov_base: part[skip..].as_ptr() as *mut _,
            iov_len: part.len() - skip,
        };
        skip = 0;
        count += 1;
    }
    if count == 0 {
        return Ok(Some(0));
    }
    if count == 1 {
        // One buffer (a small response, head and body together): `send` takes it without a
        // message header and an iovec array to copy in.
        let (base, len) = (iov[0].iov_base as *const u8, iov[0].iov_len);
        // SAFETY: `iov[0]` references a live slice of `parts`.
        return nonblocking(|| unsafe { raw::send(fd, base, len, libc::MSG_NOSIGNAL) });
    }
    // SAFETY: a zeroed msghdr is a valid empty header; we then point it at `iov`.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = count as _;
    // SAFETY: msg points at `count` iovecs that reference live slices of `parts`.
    nonblocking(|| unsafe { raw::sendmsg(fd, &msg, libc::MSG_NOSIGNAL) })
}

/// One non-blocking `sendmsg` of `slices` (`send` for one), at most `IOV_MAX` of them;
/// returns the bytes written (`Ok(None)`: it would block). Never raises SIGPIPE. For TLS
/// records (rustls hands its queue of records as `IoSlice`s, which are `iovec`s on Unix).
pub fn write_slices_nonblocking(
    fd: RawFd,
    slices: &[io::IoSlice<'_>],
) -> io::Result<Option<usize>> {
    match slices {
        [] => Ok(Some(0)),
        [one] => {
            // SAFETY: `one` is a live slice for the duration of the call.
            nonblocking(|| unsafe { raw::send(fd, one.as_ptr(), one.len(), libc::MSG_NOSIGNAL) })
        }
        _ => {
            // SAFETY: a zeroed msghdr is a valid empty header; we then point it at `slices`.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            // `IoSlice` is guaranteed ABI-compatible with `iovec` on Unix; the kernel only
            // reads through the pointer.
            msg.msg_iov = slices.as_ptr() as *mut libc::iovec;
            msg.msg_iovlen = slices.len().min(libc::UIO_MAXIOV as usize) as _;
            // SAFETY: msg points at live iovecs that reference live slices.
            nonblocking(|| unsafe { raw::sendmsg(fd, &msg, libc::MSG_NOSIGNAL) })
        }
    }
}

/// Writes every byte of `parts` from byte `written` on (the bytes before it were sent), in
/// order, with as few `sendmsg` calls as the kernel allows. `timeout` bounds each wait for the
/// peer to accept more (the send timeout).
pub fn write_all_from(
    fd: RawFd,
    parts: &[&[u8]],
    mut written: usize,
    timeout: std::time::Duration,
) -> io::Result<()> {
    let total: usize = parts.iter().map(|part| part.len()).sum();
    while written < total {
        match write_vectored_nonblocking(fd, parts, written)? {
            Some(n) => written += n,
            None => wait_fd(fd, true, Instant::now() + timeout, "send")?,
        }
    }
    Ok(())
}

/// One non-blocking `sendfile` of at most `count` bytes of `file_fd` from `offset`; returns
/// the bytes sent (0 at the end of the file; `Ok(None)`: it would block).
pub fn send_file_nonblocking(
    fd: RawFd,
    file_fd: RawFd,
    offset: u64,
    count: u64,
) -> io::Result<Option<u64>> {
    let mut off = offset as libc::off_t;
    // Linux caps one sendfile at about 2 GiB; ask for at most 1 GiB a call.
    let want = count.min(1 << 30) as usize;
    // SAFETY: `off` is a valid out-pointer; both fds belong to the caller.
    let sent = nonblocking(|| unsafe { libc::sendfile(fd, file_fd, &mut off, want) })?;
    Ok(sent.map(|n| n as u64))
}

#[cfg(test)]
mod tests {
    use super::input_waiting;
    use std::io::{Read, Write};
    use std::net::Shutdown;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn input_waiting_tells_silence_from_bytes_and_eof_without_taking_anything() {
        let (mut client, mut server) = UnixStream::pair().unwrap();
        server.set_nonblocking(true).unwrap();
        assert!(!input_waiting(server.as_raw_fd()), "nothing sent: silent");
        client.write_all(b"GET").unwrap();
        assert!(input_waiting(server.as_raw_fd()));
        assert!(input_waiting(server.as_raw_fd()), "the look took nothing");
        let mut buf = [0u8; 8];
        assert_eq!(
            server.read(&mut buf).unwrap(),
            3,
            "every byte is still there"
        );
        assert!(!input_waiting(server.as_raw_fd()), "read: silent again");
        client.shutdown(Shutdown::Write).unwrap();
        assert!(input_waiting(server.as_raw_fd()), "an EOF waits too");
    }
}
