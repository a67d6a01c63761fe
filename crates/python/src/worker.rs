//! `run_worker`: the worker process's entry into Rust, called by `tines.worker` after fork and
//! app loading, and [`PythonSpec`], the one value that carries what the worker starts with
//! across from Python (to `run_worker` and to `AsgiWorker`). The GIL is released here for the
//! worker's whole life; the threads that serve (prefork's loop, the pool's app threads) take
//! it and keep it while they work (see `wsgi::WsgiApp::run_loop_thread`).

use std::collections::HashMap;
use std::sync::Arc;

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use tines_server::listener::H2c;
use tines_server::{run_worker as run, WorkerSpec};

use crate::rate_limit::{PyClientConnections, PyRateTable};
use crate::scoreboard::PyScoreboard;
use crate::settings::worker_config;
use crate::wsgi::WsgiApp;

/// Runs the MPM named by `spec.settings["mpm"]` until the worker is told to stop; returns why
/// it stopped: "graceful", "retire", "quick", "master_gone", "max_requests" or "cpu_limit".
#[pyfunction]
pub fn run_worker(py: Python<'_>, app: Py<PyAny>, spec: PythonSpec<'_>) -> PyResult<&'static str> {
    let spec = spec.into_spec()?;
    let wsgi = WsgiApp::new(py, app, &spec.config)?;
    let app: Arc<dyn tines_server::App> = Arc::new(wsgi);
    let result = py.detach(move || run(app, spec));
    result
        .map(|reason| reason.name())
        .map_err(|err| PyOSError::new_err(format!("worker failed: {err}")))
}

/// What the worker starts with, as `tines.worker.WorkerSpec` carries it from Python (read by
/// attribute, once, for `run_worker` and `AsgiWorker` alike).
#[derive(FromPyObject)]
pub struct PythonSpec<'py> {
    /// The worker settings (`tines.worker.worker_settings`), converted by
    /// [`worker_config`].
    settings: Bound<'py, PyDict>,
    /// The listening sockets' fds.
    listeners: Vec<i32>,
    /// Which of them speak TLS, parallel to `listeners` (the master's decision: every TCP bind
    /// with a certificate, unless marked `plain:`); none when the attribute is missing.
    #[pyo3(default)]
    tls_listeners: Vec<bool>,
    /// What each speaks in cleartext, parallel to `listeners`: "off" (HTTP/1.1), "only" (h2c
    /// with prior knowledge) or "both" (the `h2c:` and `http1+h2c:` bind prefixes); none when
    /// the attribute is missing.
    #[pyo3(default)]
    h2c_listeners: Vec<String>,
    /// The scoreboard shared with the master.
    scoreboard: Bound<'py, PyScoreboard>,
    /// This worker's slot in it.
    slot: usize,
    /// The read end of the life pipe: end of file when the master is gone.
    life_fd: Option<i32>,
    /// `(fd, message)`: once the worker's whole set-up is done (access log open, app threads
    /// started, loop about to serve), `message` is written to `fd` in one `write` (the
    /// master's notify pipe; the message is at most PIPE_BUF bytes, so the write is atomic).
    ready: Option<(i32, Vec<u8>)>,
    /// `(fd, {reason: message})`: when the worker starts draining by its own decision
    /// ("max_requests", "cpu_limit"), the message for that reason is written to `fd` in one
    /// `write`, at once, so the master starts the replacement while this worker drains; for
    /// "max_requests" when the last request is dispatched, before its response.
    draining: Option<(i32, HashMap<String, Vec<u8>>)>,
    /// A standby's wait (`tines.worker`): called, with the GIL, once the set-up is done; true
    /// once promoted. An exception is printed and taken for a stop.
    standby: Option<Py<PyAny>>,
    /// The shared rate-limit table (`tines._core.RateTable`) the master made; None without.
    #[pyo3(default)]
    rate_table: Option<Bound<'py, PyRateTable>>,
    /// The per-client connection counts (`tines._core.ClientConnections`); None without.
    #[pyo3(default)]
    client_connections: Option<Bound<'py, PyClientConnections>>,
}

impl PythonSpec<'_> {
    /// The worker's spec: the settings converted, the ready and draining messages made hooks
    /// that write them.
    pub fn into_spec(self) -> PyResult<WorkerSpec> {
        let PythonSpec {
            settings,
            listeners,
            tls_listeners,
            h2c_listeners,
            scoreboard,
            slot,
            life_fd,
            ready,
            draining,
            standby,
            rate_table,
            client_connections,
        } = self;
        Ok(WorkerSpec {
            config: worker_config(&settings)?,
            listeners,
            tls_listeners,
            h2c_listeners: h2c_listeners
                .iter()
                .map(|mode| match mode.as_str() {
                    "off" => Ok(H2c::Off),
                    "only" => Ok(H2c::Only),
                    "both" => Ok(H2c::Both),
                    other => Err(PyValueError::new_err(format!(
                        "h2c_listeners: 'off', 'only' or 'both' expected, not {other:?}"
                    ))),
                })
                .collect::<PyResult<Vec<_>>>()?,
            scoreboard: Arc::clone(&scoreboard.get().inner),
            rate_table: rate_table.map(|table| Arc::clone(&table.get().inner)),
            client_connections: client_connections.map(|counts| Arc::clone(&counts.get().inner)),
            slot,
            life_fd,
            on_ready: ready.map(|(fd, message)| -> tines_server::worker::ReadyHook {
                Box::new(move || write_message(fd, &message))
            }),
            on_draining: draining.map(|(fd, messages)| -> tines_server::worker::DrainingHook {
                Box::new(move |reason| {
                    if let Some(message) = messages.get(reason.name()) {
                        write_message(fd, message);
                    }
                })
            }),
            standby: standby.map(|wait| -> tines_server::worker::StandbyHook {
                Box::new(move || {
                    Python::attach(|py| {
                        wait.call0(py)
                            .and_then(|promoted| promoted.bind(py).is_truthy())
                            .unwrap_or_else(|err| {
                                err.print(py);
                                false
                            })
                    })
                })
            }),
        })
    }
}

/// Writes `message` to `fd` once, ignoring failure (a gone master ends the worker through
/// the life pipe).
fn write_message(fd: i32, message: &[u8]) {
    loop {
        // SAFETY: `message` is a valid buffer of `message.len()` bytes for the whole call.
        let written = unsafe { libc::write(fd, message.as_ptr().cast(), message.len()) };
        if written >= 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted
        {
            return;
        }
    }
}
