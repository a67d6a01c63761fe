//! Worker control: signals and the life pipe, as fds the poller watches.
//!
//! CPython runs Python signal handlers only between bytecodes on the main thread, and a worker
//! spends its life inside Rust, so Rust owns the worker's signals (ARCHITECTURE.md section 4).
//! signal-hook sets an atomic flag per signal and writes a byte to a self-pipe; the poller
//! watches the pipe's read end and the life pipe (EOF: the master is gone).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGXCPU};

/// Why a worker's loop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// TERM (the master's final, graceful stop): accepted what the listener had queued, then
    /// drained.
    Graceful,
    /// USR2 (the master retires this worker while the others go on: fewer workers, a spare
    /// too many, an old generation after a reload): stopped accepting at once, drained.
    Retire,
    /// QUIT: left at once.
    Quick,
    /// INT (a terminal's Ctrl-C, or the master's own INT passed on): left at once like
    /// [`StopReason::Quick`]; the embedder may still run a short clean-up of its own (the
    /// ASGI lifespan shutdown, under a deadline: `tines.asgi`).
    Interrupt,
    /// The life pipe closed: the master died; drained like a graceful stop.
    MasterGone,
    /// `max_requests` reached: drained, to be replaced by the master.
    MaxRequests,
    /// SIGXCPU: the soft RLIMIT_CPU (`limit_cpu`) was reached; drained, to be replaced by the
    /// master before the hard limit's SIGKILL.
    CpuLimit,
    /// The master's dump signal: a request overran `request_timeout` on an app thread; its
    /// client was answered by the loop, and the worker drains while the others finish (its
    /// stuck thread cannot be joined: docs/signals.md, "A stuck request").
    RequestTimeout,
}

impl StopReason {
    /// The name returned to Python by `run_worker`.
    pub fn name(self) -> &'static str {
        match self {
            StopReason::Graceful => "graceful",
            StopReason::Retire => "retire",
            StopReason::Quick => "quick",
            StopReason::Interrupt => "interrupt",
            StopReason::MasterGone => "master_gone",
            StopReason::MaxRequests => "max_requests",
            StopReason::CpuLimit => "cpu_limit",
            StopReason::RequestTimeout => "request_timeout",
        }
    }

    /// True when the worker accepts what the listener already queued before it stops
    /// accepting: only when every worker stops (the final TERM, or the master gone), since
    /// the listener then closes and its queue would be reset. A worker stopping while the
    /// others go on leaves the queue to them (and to its replacement).
    pub fn accepts_backlog(self) -> bool {
        matches!(self, StopReason::Graceful | StopReason::MasterGone)
    }

    /// True when the worker leaves at once, in-flight requests cut (QUIT or INT).
    pub fn is_immediate(self) -> bool {
        matches!(self, StopReason::Quick | StopReason::Interrupt)
    }

    /// True when the worker decided to stop by itself (the master must hear of it at once, to
    /// start the replacement while this one drains).
    pub fn is_own_decision(self) -> bool {
        matches!(
            self,
            StopReason::MaxRequests | StopReason::CpuLimit | StopReason::RequestTimeout
        )
    }
}

/// What the control fds asked for, once drained.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Requests {
    /// TERM arrived.
    pub graceful: bool,
    /// QUIT arrived.
    pub quick: bool,
    /// INT arrived.
    pub interrupt: bool,
    /// USR1 arrived: reopen log files.
    pub reopen_logs: bool,
    /// XCPU arrived: the soft CPU time limit was reached; recycle gracefully.
    pub cpu_limit: bool,
    /// USR2 arrived: the master retires this worker (stop accepting at once, drain).
    pub retire: bool,
}

/// The installed signal handlers plus the life pipe.
pub struct Control {
    pipe_read: OwnedFd,
    pipe_write: OwnedFd,
    graceful: Arc<AtomicBool>,
    quick: Arc<AtomicBool>,
    interrupt: Arc<AtomicBool>,
    reopen: Arc<AtomicBool>,
    hup: Arc<AtomicBool>,
    cpu_limit: Arc<AtomicBool>,
    retire: Arc<AtomicBool>,
    cpu_time_limit: Option<u64>,
    life_fd: Option<RawFd>,
    signal_ids: Vec<signal_hook::SigId>,
}

fn pipe_nonblocking() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid 2-element array for pipe2 to fill.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds are fresh and owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

impl Control {
    /// Installs the worker's signal handlers (TERM, INT, QUIT, USR1, USR2, XCPU; HUP is
    /// ignored in workers: the master reloads) and adopts the life pipe's read end, if any.
    /// XCPU replaces the default action (terminate with a core dump), so a worker at its soft
    /// CPU time limit recycles gracefully instead. USR2 is then unblocked: the worker's boot
    /// code (Python, `tines.worker`) blocks it, so a retire the master sent while the worker
    /// was still booting stays pending until this handler can take it, instead of killing
    /// the worker by USR2's default action.
    pub fn install(life_fd: Option<RawFd>) -> io::Result<Control> {
        let (pipe_read, pipe_write) = pipe_nonblocking()?;
        let graceful = Arc::new(AtomicBool::new(false));
        let quick = Arc::new(AtomicBool::new(false));
        let interrupt = Arc::new(AtomicBool::new(false));
        let reopen = Arc::new(AtomicBool::new(false));
        let hup = Arc::new(AtomicBool::new(false));
        let cpu_limit = Arc::new(AtomicBool::new(false));
        let retire = Arc::new(AtomicBool::new(false));
        let mut signal_ids = Vec::new();
        let table: [(i32, &Arc<AtomicBool>); 7] = [
            (SIGTERM, &graceful),
            (SIGINT, &interrupt),
            (SIGQUIT, &quick),
            (SIGUSR1, &reopen),
            (SIGHUP, &hup),
            (SIGXCPU, &cpu_limit),
            (SIGUSR2, &retire),
        ];
        for (signal, flag) in table {
            signal_ids.push(signal_hook::flag::register(signal, Arc::clone(flag))?);
            let write_end = pipe_write.try_clone()?;
            signal_ids.push(signal_hook::low_level::pipe::register(signal, write_end)?);
        }
        unblock_signal(SIGUSR2)?;
        if let Some(fd) = life_fd {
            set_nonblocking(fd)?;
        }
        Ok(Control {
            pipe_read,
            pipe_write,
            graceful,
            quick,
            interrupt,
            reopen,
            hup,
            cpu_limit,
            retire,
            cpu_time_limit: soft_cpu_time_limit(),
            life_fd,
            signal_ids,
        })
    }

    /// The soft RLIMIT_CPU in seconds when the handlers were installed (None: unlimited), for
    /// the recycling log line. Read then because the kernel raises the soft limit by one
    /// second each time it sends SIGXCPU (so that it comes again each second until the hard
    /// limit): read later, it would name a limit nobody set.
    pub fn cpu_time_limit(&self) -> Option<u64> {
        self.cpu_time_limit
    }

    /// The self-pipe's read end, to register level-triggered.
    pub fn signal_fd(&self) -> RawFd {
        self.pipe_read.as_raw_fd()
    }

    /// The self-pipe's write end: the dump signal's handler (a layer above) writes to it to
    /// wake the loop, which then asks that handler's flag itself.
    pub(crate) fn wake_fd(&self) -> RawFd {
        self.pipe_write.as_raw_fd()
    }

    /// The life pipe's read end, if the master gave one.
    pub fn life_fd(&self) -> Option<RawFd> {
        self.life_fd
    }

    /// Drains the self-pipe and returns (and clears) the pending requests.
    pub fn take_requests(&self) -> Requests {
        let mut scratch = [0u8; 64];
        loop {
            // SAFETY: reads into a valid local buffer of the given length.
            let n = unsafe {
                libc::read(
                    self.pipe_read.as_raw_fd(),
                    scratch.as_mut_ptr().cast(),
                    scratch.len(),
                )
            };
            if n <= 0 {
                break;
            }
        }
        self.hup.store(false, Ordering::Relaxed);
        Requests {
            graceful: self.graceful.swap(false, Ordering::Relaxed),
            quick: self.quick.swap(false, Ordering::Relaxed),
            interrupt: self.interrupt.swap(false, Ordering::Relaxed),
            reopen_logs: self.reopen.swap(false, Ordering::Relaxed),
            cpu_limit: self.cpu_limit.swap(false, Ordering::Relaxed),
            retire: self.retire.swap(false, Ordering::Relaxed),
        }
    }

    /// True when a stop signal (TERM, INT, QUIT, USR2, XCPU) arrived and was not taken yet:
    /// the loop looks before each accept, since a prefork worker that has just served a long
    /// request inline would otherwise take the listen queue before it reads its signals.
    pub fn stop_pending(&self) -> bool {
        [
            &self.graceful,
            &self.quick,
            &self.interrupt,
            &self.retire,
            &self.cpu_limit,
        ]
        .iter()
        .any(|flag| flag.load(Ordering::Relaxed))
    }

    /// True when the life pipe reports EOF (the master is gone). Call when it is readable.
    pub fn master_gone(&self) -> bool {
        let Some(fd) = self.life_fd else { return false };
        let mut byte = [0u8; 16];
        // SAFETY: reads into a valid local buffer.
        let n = unsafe { libc::read(fd, byte.as_mut_ptr().cast(), byte.len()) };
        if n == 0 {
            return true;
        }
        n < 0 && io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        for id in self.signal_ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

/// The soft RLIMIT_CPU in seconds now, or None when it is unlimited.
fn soft_cpu_time_limit() -> Option<u64> {
    // SAFETY: a zeroed rlimit is valid; getrlimit fills it.
    let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_CPU, &mut limit) };
    (rc == 0 && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}

/// Unblocks `signal` for the calling thread (and the threads it starts later), so a pending
/// one is delivered now, to the handler just installed.
fn unblock_signal(signal: i32) -> io::Result<()> {
    // SAFETY: a zeroed sigset_t is a valid argument to sigemptyset, which initialises it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t; a null old-set pointer is allowed.
    let rc = unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signal);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut())
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Sets O_NONBLOCK on an fd.
pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a caller-provided fd with integer arguments only.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
