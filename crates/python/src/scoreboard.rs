//! The scoreboard as a Python object, for the master (claim, clear, read) and for handing to
//! `run_worker` in the forked child.

use std::sync::Arc;

use pyo3::exceptions::{PyIndexError, PyOSError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use tines_server::Scoreboard;

/// `tines._core.Scoreboard(slots)`: a shared-memory region with one slot per worker. Create it
/// in the master before the first fork.
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

#[pymethods]
impl PyScoreboard {
    #[new]
    fn new(slots: usize) -> PyResult<Self> {
        let inner = Scoreboard::new(slots)
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

    /// Gives `slot` to a freshly forked worker (master side).
    fn claim(&self, slot: usize, pid: u32, generation: u32) -> PyResult<()> {
        check(self.inner.claim(slot, pid, generation), slot)
    }

    /// Frees `slot` after its worker was reaped.
    fn clear(&self, slot: usize) -> PyResult<()> {
        check(self.inner.clear(slot), slot)
    }

    /// A dict snapshot of `slot`: pid, generation, state, active, requests, accepted,
    /// connections, heartbeat and request_start (Unix seconds as floats; 0 when none).
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
        dict.set_item("heartbeat", reading.heartbeat_ms as f64 / 1000.0)?;
        dict.set_item("request_start", reading.request_start_ms as f64 / 1000.0)?;
        Ok(dict)
    }
}
