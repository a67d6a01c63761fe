//! `wsgi.input`: the request body as a file-like object that streams from the socket.
//!
//! The `Input` object also owns the request's [`Exchange`] for the duration of the app call
//! (the response side reaches it through `StartResponse`), so every blocking read or write
//! happens with the GIL released and the exchange lent to that one call ([`GilLock`]). An app that keeps a
//! reference past the request gets `ValueError("the request is over")`, never stale bytes.

use std::io;

use pyo3::exceptions::{PyOSError, PyTimeoutError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use tines_server::Exchange;

use crate::gil::{GilLock, Lent};

/// Reads larger than this are split, so `read()` of a huge body grows its buffer in steps.
const READ_STEP: usize = 64 * 1024;

/// `wsgi.input` (and the holder of the request's exchange).
#[pyclass(module = "tines._core", frozen)]
pub struct Input {
    exchange: GilLock<Option<Box<Exchange>>>,
}

/// Converts a body-read failure into the Python exception the app sees.
pub fn io_error(err: io::Error) -> PyErr {
    match err.kind() {
        io::ErrorKind::TimedOut => PyTimeoutError::new_err(err.to_string()),
        _ => PyOSError::new_err(err.to_string()),
    }
}

fn request_over() -> PyErr {
    PyValueError::new_err(
        "the request is over: wsgi.input and write() work only during the request",
    )
}

impl Input {
    /// An input with no exchange yet.
    pub fn empty() -> Self {
        Input {
            exchange: GilLock::new(None),
        }
    }

    fn lock<'a>(&'a self, py: Python<'a>) -> Lent<'a, Option<Box<Exchange>>> {
        // Another Python thread inside a detached read or write has it: waits for it without
        // holding the GIL (that thread needs the GIL to finish).
        self.exchange.lend(py)
    }

    /// Gives the exchange to this input for the app call.
    pub fn put(&self, py: Python<'_>, exchange: Box<Exchange>) {
        *self.lock(py) = Some(exchange);
    }

    /// Takes the exchange back after the app call.
    pub fn take(&self, py: Python<'_>) -> Option<Box<Exchange>> {
        self.lock(py).take()
    }

    /// Runs a quick, non-blocking operation on the exchange with the GIL held.
    pub fn with<R>(&self, py: Python<'_>, f: impl FnOnce(&mut Exchange) -> R) -> PyResult<R> {
        let mut guard = self.lock(py);
        let exchange = guard.as_mut().ok_or_else(request_over)?;
        Ok(f(exchange))
    }

    /// Runs a blocking operation on the exchange with the GIL released.
    pub fn with_detached<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Exchange) -> R + Send,
    ) -> PyResult<R> {
        let mut guard = self.lock(py);
        let exchange = guard.as_mut().ok_or_else(request_over)?;
        Ok(py.detach(move || f(exchange)))
    }

    fn read_bytes(&self, py: Python<'_>, size: Option<usize>) -> PyResult<Vec<u8>> {
        self.with_detached(py, |exchange| -> io::Result<Vec<u8>> {
            let mut out = Vec::new();
            let want = size.unwrap_or(usize::MAX);
            while out.len() < want {
                let step = (want - out.len()).min(READ_STEP);
                let start = out.len();
                out.resize(start + step, 0);
                let n = exchange.read_body(&mut out[start..])?;
                out.truncate(start + n);
                if n == 0 {
                    break;
                }
            }
            Ok(out)
        })?
        .map_err(io_error)
    }

    fn read_line(&self, py: Python<'_>, size: Option<usize>) -> PyResult<Vec<u8>> {
        self.with_detached(py, |exchange| -> io::Result<Vec<u8>> {
            let mut out = Vec::new();
            let limit = size.unwrap_or(usize::MAX);
            while out.len() < limit {
                let chunk = exchange.fill_body()?;
                if chunk.is_empty() {
                    break;
                }
                let room = (limit - out.len()).min(chunk.len());
                match chunk[..room].iter().position(|&b| b == b'\n') {
                    Some(pos) => {
                        out.extend_from_slice(&chunk[..=pos]);
                        exchange.consume_body(pos + 1);
                        break;
                    }
                    None => {
                        out.extend_from_slice(&chunk[..room]);
                        exchange.consume_body(room);
                    }
                }
            }
            Ok(out)
        })?
        .map_err(io_error)
    }
}

fn size_arg(size: Option<isize>) -> Option<usize> {
    size.filter(|&n| n >= 0).map(|n| n as usize)
}

#[pymethods]
impl Input {
    /// Reads up to `size` bytes (all that is left when `size` is omitted or negative); fewer
    /// only at the end of the body.
    #[pyo3(signature = (size=None))]
    fn read<'py>(&self, py: Python<'py>, size: Option<isize>) -> PyResult<Bound<'py, PyBytes>> {
        let data = self.read_bytes(py, size_arg(size))?;
        Ok(PyBytes::new(py, &data))
    }

    /// Reads one line (up to and including `\n`), at most `size` bytes.
    #[pyo3(signature = (size=None))]
    fn readline<'py>(&self, py: Python<'py>, size: Option<isize>) -> PyResult<Bound<'py, PyBytes>> {
        let data = self.read_line(py, size_arg(size))?;
        Ok(PyBytes::new(py, &data))
    }

    /// Reads lines until the end of the body, or until about `hint` bytes were read.
    #[pyo3(signature = (hint=None))]
    fn readlines<'py>(&self, py: Python<'py>, hint: Option<isize>) -> PyResult<Bound<'py, PyList>> {
        let lines = PyList::empty(py);
        let hint = size_arg(hint).filter(|&h| h > 0);
        let mut total = 0;
        loop {
            let line = self.read_line(py, None)?;
            if line.is_empty() {
                break;
            }
            total += line.len();
            lines.append(PyBytes::new(py, &line))?;
            if hint.is_some_and(|h| total >= h) {
                break;
            }
        }
        Ok(lines)
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let line = self.read_line(py, None)?;
        Ok((!line.is_empty()).then(|| PyBytes::new(py, &line)))
    }
}
