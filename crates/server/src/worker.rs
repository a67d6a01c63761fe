//! A worker process's entry point: it opens the listeners, the control fds and the access log,
//! builds the state the slots share ([`crate::shared`]) and runs the chosen MPM until the
//! worker is told to stop. It is the top of the crate: nothing in it is imported back.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::access_log::AccessLog;
use crate::config::{Mpm, WorkerConfig};
use crate::control::{Control, StopReason};
use crate::listener::{raise_fd_limit, Listener};
use crate::scoreboard::{now_ms, Scoreboard, WorkerState};
use crate::shared::WorkerShared;
pub use crate::shared::{DrainingHook, ReadyHook};
use crate::App;

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

/// Everything a worker needs to run.
pub struct WorkerSpec {
    /// The settings.
    pub config: WorkerConfig,
    /// Inherited listening fds.
    pub listeners: Vec<RawFd>,
    /// Which of `listeners` speak TLS, parallel to it (empty: none does). A TLS listener needs
    /// `config.tls`; a Unix-socket one is refused.
    pub tls_listeners: Vec<bool>,
    /// What each of `listeners` speaks in cleartext, parallel to it (empty: HTTP/1.1 on all).
    pub h2c_listeners: Vec<crate::listener::H2c>,
    /// The shared scoreboard and this worker's slot index.
    pub scoreboard: Arc<Scoreboard>,
    /// This worker's slot.
    pub slot: usize,
    /// Read end of the master's life pipe.
    pub life_fd: Option<RawFd>,
    /// Called once when the whole set-up is done and the loop is about to serve; a set-up
    /// failure returns an error from [`run_worker`] without calling it.
    pub on_ready: Option<ReadyHook>,
    /// Called once when the worker starts draining by its own decision (`max_requests`, the
    /// soft CPU limit, a request answered after `request_timeout`; see
    /// [`StopReason::is_own_decision`]), with the reason, so the master can start its
    /// replacement at once: for `max_requests`, as its last request is dispatched.
    pub on_draining: Option<DrainingHook>,
    /// A standby's wait (see [`StandbyHook`]); None for a worker that serves at once.
    pub standby: Option<StandbyHook>,
    /// The shared rate-limit table the master made (ADR 0038); None when it made none.
    pub rate_table: Option<Arc<crate::rate_limit::RateTable>>,
    /// Every worker's per-client connection counts (`max_connections_per_client`), made by
    /// the master; None when it made none.
    pub client_connections: Option<Arc<crate::rate_limit::ClientConnections>>,
}

/// What a standby runs once its set-up is done, before its loop: it waits there for its
/// promotion and returns true (the worker then serves), or false when it is told to stop first
/// (it then leaves having accepted nothing). Doing the set-up first keeps it off the path of the
/// request that waits for the promotion.
pub type StandbyHook = Box<dyn FnOnce() -> bool + Send>;

/// Runs the worker until it is told to stop; returns why it stopped.
pub fn run_worker(app: Arc<dyn App>, mut spec: WorkerSpec) -> io::Result<StopReason> {
    let standby = spec.standby.take();
    let (reactor, shared) = prepare(spec)?;
    if let Some(wait) = standby {
        // Booted, not serving yet: the status output shows it a standby (not ready, for
        // /readyz) until the loop's first turn.
        shared
            .slot()
            .state
            .store(WorkerState::Standby as u32, Ordering::Relaxed);
        if !wait() {
            return Ok(StopReason::Retire);
        }
    }
    let reason = match shared.config.mpm {
        Mpm::Prefork => crate::mpm::prefork::run(reactor, app, shared.clone()),
        Mpm::Thread | Mpm::Event => crate::mpm::pool::run(reactor, app, shared.clone()),
    };
    if let Some(log) = &shared.access_log {
        log.flush();
    }
    reason
}

/// Sets a worker up (listeners, control fds, access log, shared state, the reactor) without
/// running it: [`run_worker`] runs an MPM on it; an async app's worker hands it to
/// [`crate::mpm::bridge::bridge`] and starts it after the app's own start-up.
pub fn prepare(spec: WorkerSpec) -> io::Result<(crate::reactor::Reactor, Arc<WorkerShared>)> {
    if spec.scoreboard.slot(spec.slot).is_none() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "scoreboard slot out of range",
        ));
    }
    let app_threads = match spec.config.mpm {
        Mpm::Prefork => 1,
        Mpm::Thread | Mpm::Event => spec.config.threads.max(1),
    };
    if spec.scoreboard.threads_per_slot() < app_threads {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "the scoreboard has {} app-thread sub-slots per worker, {} app threads need one each",
                spec.scoreboard.threads_per_slot(),
                app_threads
            ),
        ));
    }
    if spec.listeners.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a worker needs at least one listener",
        ));
    }
    if !spec.tls_listeners.is_empty() && spec.tls_listeners.len() != spec.listeners.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "tls_listeners has {} entries for {} listeners",
                spec.tls_listeners.len(),
                spec.listeners.len()
            ),
        ));
    }
    if spec.tls_listeners.contains(&true) && spec.config.tls.is_none() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a TLS listener without a TLS configuration (no certificate)",
        ));
    }
    raise_fd_limit();
    crate::log::set_debug(spec.config.debug);
    let listeners = spec
        .listeners
        .iter()
        .enumerate()
        .map(|(index, &fd)| {
            let tls = spec.tls_listeners.get(index).copied().unwrap_or(false);
            let h2c = spec.h2c_listeners.get(index).copied().unwrap_or_default();
            Listener::from_fd(fd)?.speaking_tls(tls)?.speaking_h2c(h2c)
        })
        .collect::<io::Result<Vec<_>>>()?;
    let control = Control::install(spec.life_fd)?;
    let access_log = match &spec.config.access_log {
        Some(path) => Some(
            AccessLog::open(
                path,
                spec.config.access_log_format.clone(),
                spec.config.access_log_exclude.clone(),
            )
            .map_err(|err| {
                io::Error::new(err.kind(), format!("cannot open access log {path}: {err}"))
            })?,
        ),
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
    let shared = WorkerShared::new(
        spec.config,
        locals,
        access_log,
        spec.scoreboard,
        spec.slot,
        budget,
        spec.on_draining,
    )
    .with_rate_limits(spec.rate_table, spec.client_connections);
    *shared
        .on_ready
        .lock()
        .unwrap_or_else(|poison| poison.into_inner()) = spec.on_ready;
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
    Ok((reactor, shared))
}
