//! `wsgi.file_wrapper`: a file body the server sends with `sendfile(2)` when the object is a
//! regular file with a descriptor, and by iteration otherwise (PEP 3333, optional
//! platform-specific file handling).

use std::os::fd::RawFd;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// `environ["wsgi.file_wrapper"](filelike, block_size=8192)`.
#[pyclass(module = "tines._core", frozen)]
pub struct FileWrapper {
    filelike: Py<PyAny>,
    block_size: usize,
}

/// Where a sendfile-able body is: (fd, offset, bytes from the offset to the end).
pub struct FileSpan {
    /// The open file's descriptor (owned by the Python file object).
    pub fd: RawFd,
    /// The current position, where the body starts.
    pub offset: u64,
    /// Bytes from `offset` to the end of the file.
    pub length: u64,
}

impl FileWrapper {
    /// The file's descriptor, position and remaining length when it is a regular file;
    /// `None` when it must be iterated instead (no `fileno`, a pipe, a socket...).
    pub fn span(&self, py: Python<'_>) -> Option<FileSpan> {
        let filelike = self.filelike.bind(py);
        let fd: RawFd = filelike.call_method0("fileno").ok()?.extract().ok()?;
        // SAFETY: a zeroed stat is a valid out-buffer for fstat.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fd belongs to the file object, which outlives this call; stat is valid.
        if unsafe { libc::fstat(fd, &mut stat) } != 0
            || (stat.st_mode & libc::S_IFMT) != libc::S_IFREG
        {
            return None;
        }
        // Python's buffered file objects may have read ahead; `tell()` is the logical position.
        let offset: u64 = filelike
            .call_method0("tell")
            .and_then(|pos| pos.extract())
            .unwrap_or_default();
        let size = stat.st_size as u64;
        Some(FileSpan {
            fd,
            offset,
            length: size.saturating_sub(offset),
        })
    }
}

#[pymethods]
impl FileWrapper {
    #[new]
    #[pyo3(signature = (filelike, block_size=8192))]
    fn new(filelike: Py<PyAny>, block_size: usize) -> Self {
        FileWrapper {
            filelike,
            block_size: block_size.max(1),
        }
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let data = self
            .filelike
            .bind(py)
            .call_method1("read", (self.block_size,))?;
        let empty = match data.cast::<PyBytes>() {
            Ok(bytes) => bytes.as_bytes().is_empty(),
            Err(_) => data.len()? == 0,
        };
        Ok((!empty).then_some(data))
    }

    /// Closes the wrapped file if it can be closed (the server calls this after the body).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let filelike = self.filelike.bind(py);
        if filelike.hasattr("close")? {
            filelike.call_method0("close")?;
        }
        Ok(())
    }
}
