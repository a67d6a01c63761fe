//! The fork server's mechanism (ADR 0026): `serve_forks`, the loop of a process that stays at
//! the preloaded state and forks a worker whenever the master asks, and the fork itself,
//! `clone(CLONE_PARENT | SIGCHLD)`, which makes each worker the master's child, not the fork
//! server's: the master reaps it, its `PR_SET_PDEATHSIG` names the master, and the life pipe
//! and the notify pipe work as for a worker the master forked (ADR 0001).
//!
//! The loop runs in Rust, so that between two forks the fork server runs no Python: it writes
//! no page of the heap it shares with its last child (each such write would be a copy-on-write
//! fault, the cost the master paid when it forked itself). The policy (when there is a fork
//! server, restarting it, falling back to the master's own fork) is `tines.forkserver`'s.

use std::io;

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

/// A request's size: slot (u32), generation (u32), standby (u8), little-endian
/// (`tines.forkserver.REQUEST_FORMAT`). The reply is the new worker's pid as an i32,
/// little-endian, or minus the `errno` of a failed fork.
pub const REQUEST_SIZE: usize = 9;

/// Forks on every request read from `requests` until the master closes it (end of file:
/// returns None in the fork server, which then exits); replies on `replies` with the pid. In
/// the child it returns `(slot, generation, standby)` of the request it was forked for, with
/// its parent-death signal set (`SIGKILL` when the master dies: the flag is not inherited),
/// Python's after-fork work done (`PyOS_AfterFork_Child`: its locks, threads and
/// `os.register_at_fork` hooks) and both pipe ends closed. A child whose master is already
/// gone exits at once.
#[pyfunction]
pub fn serve_forks(
    py: Python<'_>,
    requests: i32,
    replies: i32,
) -> PyResult<Option<(u32, u32, bool)>> {
    let mut request = [0u8; REQUEST_SIZE];
    // SAFETY: getppid cannot fail.
    let master = unsafe { libc::getppid() };
    let thread = ThreadState::of_this_thread();
    loop {
        // The GIL stays held while the fork server waits: it is the process's only thread.
        if !read_exact(requests, &mut request).map_err(os_error)? {
            return Ok(None);
        }
        let slot = u32::from_le_bytes([request[0], request[1], request[2], request[3]]);
        let generation = u32::from_le_bytes([request[4], request[5], request[6], request[7]]);
        let standby = request[8] != 0;
        let reply = match fork_beside_parent(py, &thread) {
            Ok(0) => {
                // SAFETY: prctl with an integer argument, and closing fds this process owns and
                // no other code of it uses.
                unsafe {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
                    if libc::getppid() != master {
                        libc::_exit(0); // the master died before the death signal was set
                    }
                    libc::close(requests);
                    libc::close(replies);
                }
                return Ok(Some((slot, generation, standby)));
            }
            Ok(pid) => pid,
            Err(err) => -err.raw_os_error().unwrap_or(libc::EIO),
        };
        write_all(replies, &reply.to_le_bytes()).map_err(os_error)?;
    }
}

/// What glibc's own `fork` gives the child's thread that a raw clone does not: the address of
/// the thread id glibc caches in the thread's descriptor (`THREAD_SELF->tid`, which
/// `pthread_kill`, `pthread_setaffinity_np` and the owner word of a recursive or robust mutex
/// use), and the robust-mutex list the kernel forgets at every clone. Read once, in the fork
/// server (the child has the same addresses: it is a copy).
struct ThreadState {
    /// Where the kernel is to write the child's thread id (`CLONE_CHILD_SETTID`), as glibc's
    /// fork asks: `PR_GET_TID_ADDRESS`, which is glibc's `&THREAD_SELF->tid`. Null when the
    /// kernel does not tell (built without `CONFIG_CHECKPOINT_RESTORE`): the child then keeps
    /// the fork server's cached id, as before.
    tid_address: *mut libc::pid_t,
    /// The head and length of the thread's robust-mutex list (`get_robust_list`), registered
    /// again in the child (glibc's `_Fork` does the same), so a robust mutex a worker holds
    /// when it is killed is marked owner-dead for the next one.
    robust_head: *mut libc::c_void,
    robust_len: usize,
}

impl ThreadState {
    fn of_this_thread() -> ThreadState {
        let mut tid_address: *mut libc::pid_t = std::ptr::null_mut();
        let mut robust_head: *mut libc::c_void = std::ptr::null_mut();
        let mut robust_len: usize = 0;
        // SAFETY: both calls write one pointer (and one length) into locals of ours; on
        // failure they write nothing and the nulls stay.
        unsafe {
            if libc::prctl(
                libc::PR_GET_TID_ADDRESS,
                std::ptr::addr_of_mut!(tid_address) as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                tid_address = std::ptr::null_mut();
            }
            if libc::syscall(
                libc::SYS_get_robust_list,
                0,
                std::ptr::addr_of_mut!(robust_head),
                std::ptr::addr_of_mut!(robust_len),
            ) != 0
            {
                robust_head = std::ptr::null_mut();
            }
        }
        ThreadState {
            tid_address,
            robust_head,
            robust_len,
        }
    }
}

/// `fork`, but the child's parent is this process's parent (`CLONE_PARENT`), which gets its
/// `SIGCHLD`. Python's before- and after-fork work runs as for `os.fork`. Ok(0) in the child.
///
/// glibc's `fork` wrapper is not used (it has no way to pass `CLONE_PARENT`), so what it does
/// for the child is done here: the kernel writes the child's thread id into glibc's cached one
/// (`CLONE_CHILD_SETTID`, and `CLONE_CHILD_CLEARTID` as glibc asks) and the child registers
/// its robust-mutex list again ([`ThreadState`]). glibc's at-fork handlers do not run: this
/// process has one thread and is not inside malloc or stdio when it forks, so no lock of
/// theirs is held.
fn fork_beside_parent(_py: Python<'_>, thread: &ThreadState) -> io::Result<libc::pid_t> {
    let mut flags = (libc::CLONE_PARENT | libc::SIGCHLD) as libc::c_ulong;
    if !thread.tid_address.is_null() {
        flags |= (libc::CLONE_CHILD_SETTID | libc::CLONE_CHILD_CLEARTID) as libc::c_ulong;
    }
    let child_tid = thread.tid_address as usize;
    // SAFETY: the GIL is held (`_py`), as PyOS_BeforeFork and the two after-fork calls need.
    // The raw clone has no new stack (0): the child runs on a copy of this stack, as after fork.
    // `child_tid` is glibc's own cached-id field of this thread, in the child's copy.
    unsafe {
        pyo3::ffi::PyOS_BeforeFork();
        let pid = raw_clone(flags, child_tid);
        if pid == 0 {
            if !thread.robust_head.is_null() {
                libc::syscall(
                    libc::SYS_set_robust_list,
                    thread.robust_head,
                    thread.robust_len,
                );
            }
            pyo3::ffi::PyOS_AfterFork_Child();
            return Ok(0);
        }
        let error = io::Error::last_os_error();
        pyo3::ffi::PyOS_AfterFork_Parent();
        if pid < 0 {
            return Err(error);
        }
        Ok(pid as libc::pid_t)
    }
}

/// The clone system call with no new stack, no parent tid and no TLS, and `child_tid`: its
/// arguments' order differs by architecture (the kernel's `CLONE_BACKWARDS` variants).
///
/// # Safety
/// As `fork`: the caller handles the child's return (0) as after a fork.
unsafe fn raw_clone(flags: libc::c_ulong, child_tid: usize) -> libc::c_long {
    // SAFETY: as this function's own.
    unsafe {
        if cfg!(target_arch = "s390x") {
            // stack, flags, parent_tid, child_tid, tls
            libc::syscall(libc::SYS_clone, 0usize, flags, 0usize, child_tid, 0usize)
        } else if cfg!(any(
            target_arch = "aarch64",
            target_arch = "arm",
            target_arch = "powerpc64",
            target_arch = "riscv64"
        )) {
            // flags, stack, parent_tid, tls, child_tid
            libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, child_tid)
        } else {
            // x86_64: flags, stack, parent_tid, child_tid, tls
            libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, child_tid, 0usize)
        }
    }
}

/// Fills `buf` from `fd`; false on end of file before its first byte.
fn read_exact(fd: i32, buf: &mut [u8]) -> io::Result<bool> {
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: the pointer and length describe the unfilled rest of `buf`.
        let n = unsafe { libc::read(fd, buf[done..].as_mut_ptr().cast(), buf.len() - done) };
        match n {
            0 if done == 0 => return Ok(false),
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n if n > 0 => done += n as usize,
            _ => {
                let err = io::Error::last_os_error();
                if err.kind() != io::ErrorKind::Interrupted {
                    return Err(err);
                }
            }
        }
    }
    Ok(true)
}

/// Writes all of `buf` to `fd`.
fn write_all(fd: i32, buf: &[u8]) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: the pointer and length describe the unwritten rest of `buf`.
        let n = unsafe { libc::write(fd, buf[done..].as_ptr().cast(), buf.len() - done) };
        if n >= 0 {
            done += n as usize;
        } else {
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
    }
    Ok(())
}

fn os_error(err: io::Error) -> PyErr {
    PyOSError::new_err(format!("fork server: {err}"))
}
