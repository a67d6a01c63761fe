//! The scoreboard as a Python object, for the master (claim, clear, read, and the fields it
//! writes: memory samples, exit reasons, timed-out marks) and for handing to `run_worker`
//! and `install_dump_handler` in the forked child.

use std::sync::Arc;

use pyo3::exceptions::{PyIndexError, PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use tines_server::scoreboard::{monotonic_ns, ThreadState};
use tines_server::{ExitReason, Scoreboard};

use crate::cgi::latin1;

/// `tines._core.Scoreboard(slots, threads_per_slot=1)`: a shared-memory region with one slot
/// per worker and one sub-slot per app thread of each. Create it in the master before the
/// first fork.
#[pyclass(name = "Scoreboard", module = "tines._core", frozen)]
pub struct PyScoreboard {
    pub(crate) inner: Arc<Scoreboard>,
}

fn check(ok: bool, slot: usize) -> PyResult<()> {
    if ok {
        Ok(())
    } else {
        Err(PyIndexError::new_err(format!("no scoreboard slot {slot}")))
    }
}

/// The names of [`ExitReason`], in value order (`tines._core.EXIT_REASONS`).
pub fn exit_reason_names() -> Vec<&'static str> {
    ExitReason::ALL.iter().map(|reason| reason.name()).collect()
}

#[pymethods]
impl PyScoreboard {
    #[new]
    #[pyo3(signature = (slots, threads_per_slot=1))]
    fn new(slots: usize, threads_per_slot: usize) -> PyResult<Self> {
        let inner = Scoreboard::new(slots, threads_per_slot)
            .map_err(|err| PyOSError::new_err(format!("cannot create the scoreboard: {err}")))?;
        Ok(PyScoreboard {
            inner: Arc::new(inner),
        })
    }

    /// How many slots there are.
    #[getter]
    fn slots(&self) -> usize {
        self.inner.len()
    }

    /// App-thread sub-slots per slot.
    #[getter]
    fn threads_per_slot(&self) -> usize {
        self.inner.threads_per_slot()
    }

    /// Master: publishes its pid and start time in the scoreboard's header.
    fn publish_master(&self, pid: u32) {
        self.inner.publish_master(pid);
    }

    /// Master: the rate-limit table's size and entries in use (when it makes or adopts it).
    fn set_rate_table(&self, capacity: u64, entries: u64) {
        self.inner.set_rate_table(capacity, entries);
    }

    /// Master: the current generation (the status output shows it).
    fn set_generation(&self, generation: u32) {
        self.inner.set_generation(generation);
    }

    /// Master: the server began to stop; the status listener's `/readyz` answers 503 from now.
    fn set_stopping(&self) {
        self.inner.set_stopping();
    }

    /// Gives `slot` to a freshly forked worker (master side); forgets the previous worker's
    /// fields, its exit reason too.
    fn claim(&self, slot: usize, pid: u32, generation: u32) -> PyResult<()> {
        check(self.inner.claim(slot, pid, generation), slot)
    }

    /// Publishes the pid of the worker forked into `slot`, claimed just before the fork with
    /// pid 0 (so the claim cannot wipe what the child records first).
    fn set_pid(&self, slot: usize, pid: u32) -> PyResult<()> {
        check(self.inner.set_pid(slot, pid), slot)
    }

    /// Frees `slot` after its worker `pid` was reaped with wait status `wait_status`: its
    /// counters move to the retired totals (which the status listener adds to the live
    /// slots', so totals only grow), its exit (by the reason recorded in the slot) is
    /// counted and kept among the recent exits.
    fn retire(&self, slot: usize, pid: u32, wait_status: i32) -> PyResult<()> {
        check(self.inner.retire(slot, pid, wait_status), slot)
    }

    /// Server-wide totals since the master started, the live slots' and the retired ones':
    /// requests (counted), accepted, bytes_in, bytes_out, in_flight, connections,
    /// h2_connections and h2_streams (open now), rate_limited (429s), rate_evictions,
    /// refused_connections (`max_connections_per_client`), rate_entries and rate_capacity
    /// (the rate-limit table's fill and size; 0 without one), and exits: reaped workers by exit reason
    /// name (those with at least one).
    fn totals<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let totals = self.inner.totals();
        let dict = PyDict::new(py);
        dict.set_item("requests", totals.metrics.total())?;
        dict.set_item("accepted", totals.accepted)?;
        dict.set_item("bytes_in", totals.bytes_in)?;
        dict.set_item("bytes_out", totals.bytes_out)?;
        dict.set_item("in_flight", totals.in_flight)?;
        dict.set_item("connections", totals.connections)?;
        dict.set_item("h2_connections", totals.h2_connections)?;
        dict.set_item("h2_streams", totals.h2_streams)?;
        dict.set_item("rate_limited", totals.rate_limited)?;
        dict.set_item("rate_evictions", totals.rate_evictions)?;
        dict.set_item("refused_connections", totals.refused_connections)?;
        let (entries, capacity) = self.inner.rate_table();
        dict.set_item("rate_entries", entries)?;
        dict.set_item("rate_capacity", capacity)?;
        let exits = PyDict::new(py);
        for reason in ExitReason::ALL {
            let count = totals.exits[*reason as usize];
            if count > 0 {
                exits.set_item(reason.name(), count)?;
            }
        }
        dict.set_item("exits", exits)?;
        Ok(dict)
    }

    /// Records the master's memory sample of the worker in `slot`, in bytes.
    fn set_memory(&self, slot: usize, rss: u64, pss: u64, uss: u64, swap: u64) -> PyResult<()> {
        check(self.inner.set_memory(slot, rss, pss, uss, swap), slot)
    }

    /// Records why the master is about to stop the worker in `slot` (a name from
    /// `EXIT_REASONS`; ValueError otherwise). Overwrites a reason the worker recorded.
    fn set_exit_reason(&self, slot: usize, reason: &str) -> PyResult<()> {
        let reason = ExitReason::from_name(reason)
            .ok_or_else(|| PyValueError::new_err(format!("no exit reason named {reason:?}")))?;
        check(self.inner.set_exit_reason(slot, reason), slot)
    }

    /// Marks request number `request` (the sub-slot's `request` key) of app thread `thread`
    /// of `slot` as timed out: the worker's dump-signal handler answers it 503 if it is still
    /// that request and nothing was sent.
    fn mark_timed_out(&self, slot: usize, thread: usize, request: u64) -> PyResult<()> {
        let thread_slot = self.inner.thread_slot(slot, thread).ok_or_else(|| {
            PyIndexError::new_err(format!("no scoreboard sub-slot {slot}.{thread}"))
        })?;
        thread_slot.mark_timed_out(request);
        Ok(())
    }

    /// A dict snapshot of `slot`: pid, generation, state, active, requests, accepted,
    /// connections, h2_connections, h2_streams, bytes_out, bytes_in, heartbeat (Unix seconds), request_start (Unix seconds of the
    /// oldest request in progress; 0 when none), exit_reason (a name), dumped, rss, pss, uss,
    /// swap (bytes), memory_sampled (Unix seconds; 0: never), loop_heartbeat (an async worker's
    /// event loop's last mark, Unix seconds; 0: not an async worker), interpreter_seen_ns (when
    /// the interpreter probe took the GIL after a dump, CLOCK_MONOTONIC; 0: not since the
    /// claim), and threads: one dict per app
    /// thread with thread, state ("idle" / "busy"), waiting_on_client, method, target (str,
    /// truncated; latin-1), fd, request (its number on the thread), requests (finished),
    /// dispatch_ns and progress_ns (CLOCK_MONOTONIC, as `time.monotonic_ns()`),
    /// response_bytes, last_app_us, last_response_us, timed_out (the marked request number),
    /// timed_out_answered (its 503 or shutdown was done).
    fn read<'py>(&self, py: Python<'py>, slot: usize) -> PyResult<Bound<'py, PyDict>> {
        let reading = self
            .inner
            .read(slot)
            .ok_or_else(|| PyIndexError::new_err(format!("no scoreboard slot {slot}")))?;
        let dict = PyDict::new(py);
        dict.set_item("pid", reading.pid)?;
        dict.set_item("generation", reading.generation)?;
        dict.set_item("state", reading.state.name())?;
        dict.set_item("active", reading.active)?;
        dict.set_item("requests", reading.requests)?;
        dict.set_item("accepted", reading.accepted)?;
        dict.set_item("connections", reading.connections)?;
        dict.set_item("h2_connections", reading.h2_connections)?;
        dict.set_item("h2_streams", reading.h2_streams)?;
        dict.set_item("bytes_out", reading.bytes_out)?;
        dict.set_item("bytes_in", reading.bytes_in)?;
        dict.set_item("heartbeat", reading.heartbeat_ms as f64 / 1000.0)?;
        dict.set_item("exit_reason", reading.exit_reason.name())?;
        dict.set_item("dumped", reading.dumped)?;
        dict.set_item("rss", reading.rss)?;
        dict.set_item("pss", reading.pss)?;
        dict.set_item("uss", reading.uss)?;
        dict.set_item("swap", reading.swap)?;
        dict.set_item("memory_sampled", reading.memory_sampled_ms as f64 / 1000.0)?;
        dict.set_item("loop_heartbeat", reading.loop_heartbeat_ms as f64 / 1000.0)?;
        dict.set_item("interpreter_seen_ns", reading.interpreter_seen_ns)?;
        let threads = PyList::empty(py);
        let mut oldest_dispatch: Option<u64> = None;
        for (index, thread) in self.inner.read_threads(slot).into_iter().enumerate() {
            let busy = thread.state != ThreadState::Idle;
            if busy {
                oldest_dispatch = Some(
                    oldest_dispatch
                        .map_or(thread.dispatch_ns, |oldest| oldest.min(thread.dispatch_ns)),
                );
            }
            let item = PyDict::new(py);
            item.set_item("thread", index)?;
            item.set_item("state", if busy { "busy" } else { "idle" })?;
            item.set_item("waiting_on_client", thread.state == ThreadState::Client)?;
            item.set_item("method", latin1(py, &thread.method)?)?;
            item.set_item("target", latin1(py, &thread.target)?)?;
            item.set_item("fd", thread.fd)?;
            item.set_item("request", thread.request)?;
            item.set_item("requests", thread.requests)?;
            item.set_item("dispatch_ns", thread.dispatch_ns)?;
            item.set_item("progress_ns", thread.progress_ns)?;
            item.set_item("response_bytes", thread.response_bytes)?;
            item.set_item("last_app_us", thread.last_app_us)?;
            item.set_item("last_response_us", thread.last_response_us)?;
            item.set_item("timed_out", thread.timed_out)?;
            item.set_item("timed_out_answered", thread.timed_out_answered)?;
            threads.append(item)?;
        }
        // The oldest request's start in Unix time, from its monotonic dispatch time.
        let request_start = oldest_dispatch.map_or(0.0, |dispatch| {
            let age = monotonic_ns().saturating_sub(dispatch) as f64 / 1e9;
            tines_server::scoreboard::now_ms() as f64 / 1000.0 - age
        });
        dict.set_item("request_start", request_start)?;
        dict.set_item("threads", threads)?;
        Ok(dict)
    }
}

/// `install_dump_handler(scoreboard, slot, signum)`: installs the worker's Rust handler for the
/// master's dump signal (see `tines_server::dump_signal`); call it before
/// `faulthandler.register(signum, ..., chain=True)`, so faulthandler dumps first and then
/// chains to it. Once per process.
#[pyfunction]
pub fn install_dump_handler(
    scoreboard: &Bound<'_, PyScoreboard>,
    slot: usize,
    signum: i32,
) -> PyResult<()> {
    tines_server::dump_signal::install(Arc::clone(&scoreboard.get().inner), slot, signum)
        .map_err(|err| PyOSError::new_err(format!("cannot install the dump handler: {err}")))
}

/// `run_status(listener_fd, life_fd, scoreboard, mpm, show_query, redact_paths, allow,
/// timeout)`: the status process's server (`tines_server::status`), without the GIL, until
/// the master is gone. `allow` is `status_allow` (the master validated it: a bad entry here
/// is a ValueError all the same), `timeout` `status_timeout` in seconds.
#[pyfunction]
#[allow(clippy::too_many_arguments)] // one per setting the status process is told
pub fn run_status(
    py: Python<'_>,
    listener_fd: i32,
    life_fd: i32,
    scoreboard: &PyScoreboard,
    mpm: String,
    show_query: bool,
    redact_paths: bool,
    allow: Vec<String>,
    timeout: f64,
) -> PyResult<()> {
    let allow = tines_server::trusted_proxies::TrustedProxies::parse(&allow)
        .map_err(|_| PyValueError::new_err(format!("status_allow: bad entry in {allow:?}")))?;
    let timeout = std::time::Duration::try_from_secs_f64(timeout)
        .map_err(|_| PyValueError::new_err(format!("status_timeout: bad value {timeout}")))?;
    let spec = tines_server::status::StatusSpec {
        listener: listener_fd,
        life_fd,
        scoreboard: Arc::clone(&scoreboard.inner),
        mpm,
        show_query,
        redact_paths,
        allow,
        timeout,
    };
    py.detach(move || tines_server::status::run_status(&spec))
        .map_err(|err| PyOSError::new_err(format!("status server: {err}")))
}
