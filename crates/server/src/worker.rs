//! A worker process's runtime: the state its slots share, and the entry point that runs the
//! chosen MPM until the worker is told to stop.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::access_log::AccessLog;
use crate::config::{Mpm, WorkerConfig};
use crate::control::{Control, StopReason};
use crate::listener::{raise_fd_limit, Listener, Local};
use crate::scoreboard::{now_ms, Scoreboard, Slot, WorkerState};
use crate::App;

/// What every slot of a worker shares (read-mostly).
pub struct WorkerShared {
    /// The worker's settings.
    pub config: WorkerConfig,
    /// The address of each listener, by listener index.
    pub locals: Vec<Local>,
    /// The access log, when enabled.
    pub access_log: Option<AccessLog>,
    scoreboard: Arc<Scoreboard>,
    slot: usize,
    stopping: AtomicBool,
    recycle: AtomicBool,
    /// Requests left before recycling (`u64::MAX` when `max_requests` is off).
    budget: AtomicU64,
    /// Called once, when the worker's set-up is complete (see [`WorkerSpec::on_ready`]).
    on_ready: Mutex<Option<ReadyHook>>,
}

impl WorkerShared {
    pub(crate) fn new(
        config: WorkerConfig,
        locals: Vec<Local>,
        access_log: Option<AccessLog>,
        scoreboard: Arc<Scoreboard>,
        slot: usize,
        budget: u64,
    ) -> WorkerShared {
        WorkerShared {
            config,
            locals,
            access_log,
            scoreboard,
            slot,
            stopping: AtomicBool::new(false),
            recycle: AtomicBool::new(false),
            budget: AtomicU64::new(budget),
            on_ready: Mutex::new(None),
        }
    }

    /// Runs the ready hook, the first time only: the MPM calls this when its loop starts,
    /// after the listeners, the signal control, the access log and the app threads are set up.
    pub(crate) fn announce_ready(&self) {
        let hook = self
            .on_ready
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .take();
        if let Some(hook) = hook {
            hook();
        }
    }

    /// True once the worker is draining: responses close their connections.
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    pub(crate) fn set_stopping(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        self.slot()
            .state
            .store(WorkerState::Stopping as u32, Ordering::Relaxed);
    }

    /// This worker's scoreboard slot.
    pub fn slot(&self) -> &Slot {
        self.scoreboard
            .slot(self.slot)
            .expect("worker slot index checked at start")
    }

    /// The whole scoreboard (for the fair-share accept throttle).
    pub fn scoreboard(&self) -> &Scoreboard {
        &self.scoreboard
    }

    /// Records the start of a request in the scoreboard.
    pub(crate) fn request_started(&self) {
        let slot = self.slot();
        if slot.active.fetch_add(1, Ordering::Relaxed) == 0 {
            slot.request_start_ms.store(now_ms(), Ordering::Relaxed);
            if !self.is_stopping() {
                slot.state
                    .store(WorkerState::Busy as u32, Ordering::Relaxed);
            }
        }
    }

    /// Records the end of a request; asks the worker to recycle when the budget is spent.
    pub(crate) fn request_finished(&self) {
        let slot = self.slot();
        slot.requests.fetch_add(1, Ordering::Relaxed);
        if slot.active.fetch_sub(1, Ordering::Relaxed) == 1 {
            slot.request_start_ms.store(0, Ordering::Relaxed);
            if !self.is_stopping() {
                slot.state
                    .store(WorkerState::Idle as u32, Ordering::Relaxed);
            }
        }
        if self.budget.load(Ordering::Relaxed) != u64::MAX
            && self.budget.fetch_sub(1, Ordering::Relaxed) == 1
        {
            self.recycle.store(true, Ordering::Relaxed);
        }
    }

    /// True once `max_requests` was reached.
    pub(crate) fn recycle_requested(&self) -> bool {
        self.recycle.load(Ordering::Relaxed)
    }
}

/// A small random number from the kernel (for `max_requests_jitter`).
fn random_below(bound: u64) -> u64 {
    if bound == 0 {
        return 0;
    }
    let mut value: u64 = 0;
    // SAFETY: getrandom writes at most 8 bytes into the valid u64.
    let n = unsafe { libc::getrandom((&mut value as *mut u64).cast(), 8, 0) };
    if n != 8 {
        value = u64::from(std::process::id()).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ now_ms();
    }
    value % (bound + 1)
}

/// What a worker runs once it can serve (e.g. telling its master it is ready).
pub type ReadyHook = Box<dyn FnOnce() + Send>;

/// Everything a worker needs to run.
pub struct WorkerSpec {
    /// The settings.
    pub config: WorkerConfig,
    /// Inherited listening fds.
    pub listeners: Vec<RawFd>,
    /// The shared scoreboard and this worker's slot index.
    pub scoreboard: Arc<Scoreboard>,
    /// This worker's slot.
    pub slot: usize,
    /// Read end of the master's life pipe.
    pub life_fd: Option<RawFd>,
    /// Called once when the whole set-up is done and the loop is about to serve; a set-up
    /// failure returns an error from [`run_worker`] without calling it.
    pub on_ready: Option<ReadyHook>,
}

/// Runs the worker until it is told to stop; returns why it stopped.
pub fn run_worker(app: Arc<dyn App>, spec: WorkerSpec) -> io::Result<StopReason> {
    if spec.scoreboard.slot(spec.slot).is_none() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "scoreboard slot out of range",
        ));
    }
    if spec.listeners.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a worker needs at least one listener",
        ));
    }
    raise_fd_limit();
    crate::log::set_debug(spec.config.debug);
    let listeners = spec
        .listeners
        .iter()
        .map(|&fd| Listener::from_fd(fd))
        .collect::<io::Result<Vec<_>>>()?;
    let control = Control::install(spec.life_fd)?;
    let access_log = match &spec.config.access_log {
        Some(path) => Some(AccessLog::open(path).map_err(|err| {
            io::Error::new(err.kind(), format!("cannot open access log {path}: {err}"))
        })?),
        None => None,
    };
    let budget = if spec.config.max_requests == 0 {
        u64::MAX
    } else {
        spec.config.max_requests + random_below(spec.config.max_requests_jitter)
    };
    let locals = listeners
        .iter()
        .map(|listener| listener.local.clone())
        .collect();
    let mut shared = WorkerShared::new(
        spec.config,
        locals,
        access_log,
        spec.scoreboard,
        spec.slot,
        budget,
    );
    shared.on_ready = Mutex::new(spec.on_ready);
    let shared = Arc::new(shared);
    shared
        .slot()
        .state
        .store(WorkerState::Idle as u32, Ordering::Relaxed);
    shared
        .slot()
        .heartbeat_ms
        .store(now_ms(), Ordering::Relaxed);
    let reactor = crate::reactor::Reactor::new(listeners, control, Arc::clone(&shared))?;
    let reason = match shared.config.mpm {
        Mpm::Prefork => crate::mpm::prefork::run(reactor, app, shared.clone()),
        Mpm::Thread => crate::mpm::thread::run(reactor, app, shared.clone()),
        Mpm::Event => crate::mpm::event::run(reactor, app, shared.clone()),
    };
    if let Some(log) = &shared.access_log {
        log.flush();
    }
    reason
}
