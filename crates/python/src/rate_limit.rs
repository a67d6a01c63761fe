//! The rate limits' shared table as a Python object (`tines._core.RateTable`): the master makes
//! it before the first fork, or adopts the one its old master passed on USR2 (by fd), keeps it
//! across reloads, and hands it to each worker's `run_worker` (ADR 0038); and the per-client
//! connection counts of `max_connections_per_client` (`tines._core.ClientConnections`).

use std::sync::Arc;

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use tines_server::rate_limit::{ClientConnections, RateTable};

/// `tines._core.RateTable(entries, seed)`: a new table of at least `entries` entries (rounded
/// up to a power of two) in a memfd, keyed by `seed`; `RateTable.adopt(fd, entries)` maps the
/// table in an inherited memfd instead.
#[pyclass(name = "RateTable", module = "tines._core", frozen)]
pub struct PyRateTable {
    pub(crate) inner: Arc<RateTable>,
}

#[pymethods]
impl PyRateTable {
    #[new]
    fn new(entries: usize, seed: u64) -> PyResult<Self> {
        let inner = RateTable::create(entries, seed).map_err(|err| {
            PyOSError::new_err(format!("cannot make the rate-limit table: {err}"))
        })?;
        Ok(PyRateTable {
            inner: Arc::new(inner),
        })
    }

    /// Maps the table in the memfd `fd` (which the object then owns and closes), when it holds
    /// one of `entries` entries; OSError otherwise (`fd` closed all the same).
    #[staticmethod]
    fn adopt(fd: i32, entries: usize) -> PyResult<Self> {
        let inner = RateTable::adopt(fd, entries).map_err(|err| {
            PyOSError::new_err(format!("cannot adopt the rate-limit table: {err}"))
        })?;
        Ok(PyRateTable {
            inner: Arc::new(inner),
        })
    }

    /// The memfd (close-on-exec; an upgrade dups it for the new master).
    #[getter]
    fn fd(&self) -> i32 {
        self.inner.fd()
    }

    /// Its entries (a power of two).
    #[getter]
    fn capacity(&self) -> usize {
        self.inner.capacity()
    }

    /// The bytes it maps, fixed when it was made.
    #[getter]
    fn mapped_bytes(&self) -> usize {
        self.inner.mapped_bytes()
    }

    /// Entries ever taken (a scan of the table).
    fn entries_in_use(&self, py: Python<'_>) -> usize {
        py.detach(|| self.inner.entries_in_use())
    }
}

/// `tines._core.ClientConnections(slots, connections_per_worker, seed)`: every worker's
/// per-client connection counts for `max_connections_per_client`, one region per scoreboard
/// slot, made by the master before the first fork (in a memfd); `clear(slot)` when it reaps a
/// worker; `ClientConnections.adopt(fd, slots, connections_per_worker, old_side)` maps the
/// counts an old master passed on USR2 (its workers' connections keep counting).
#[pyclass(name = "ClientConnections", module = "tines._core", frozen)]
pub struct PyClientConnections {
    pub(crate) inner: Arc<ClientConnections>,
}

#[pymethods]
impl PyClientConnections {
    #[new]
    fn new(slots: usize, connections_per_worker: usize, seed: u64) -> PyResult<Self> {
        let inner =
            ClientConnections::create(slots, connections_per_worker, seed).map_err(|err| {
                PyOSError::new_err(format!("cannot make the connection counts: {err}"))
            })?;
        Ok(PyClientConnections {
            inner: Arc::new(inner),
        })
    }

    /// Maps the counts in the memfd `fd` (which the object then owns and closes) an old
    /// master passed, whose workers write side `old_side`; OSError when its layout is not
    /// this master's (`fd` closed all the same).
    #[staticmethod]
    fn adopt(
        fd: i32,
        slots: usize,
        connections_per_worker: usize,
        old_side: usize,
    ) -> PyResult<Self> {
        let inner = ClientConnections::adopt(fd, slots, connections_per_worker, old_side).map_err(
            |err| PyOSError::new_err(format!("cannot adopt the connection counts: {err}")),
        )?;
        Ok(PyClientConnections {
            inner: Arc::new(inner),
        })
    }

    /// The memfd (close-on-exec; an upgrade dups it for the new master).
    #[getter]
    fn fd(&self) -> i32 {
        self.inner.fd()
    }

    /// The side (0 or 1) this master's workers count on (passed on USR2 with the fd).
    #[getter]
    fn side(&self) -> usize {
        self.inner.side()
    }

    /// Forgets what the worker in `slot` counted (it was reaped: nothing it held is open).
    fn clear(&self, slot: usize) {
        self.inner.clear(slot);
    }

    /// Forgets every count of `side` (a failed new master's: its workers are gone).
    fn clear_side(&self, side: usize) {
        self.inner.clear_side(side);
    }
}
