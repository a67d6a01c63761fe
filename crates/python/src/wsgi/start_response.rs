//! `start_response` and the `write()` callable it returns (PEP 3333).
//!
//! The status and headers are checked for type at the call (TypeError at the app's line) and
//! for content (token names, no CR/LF/NUL, no hop-by-hop) when the head is encoded, which
//! happens at the first non-empty body write or at the end of the body, as PEP 3333 requires.

use std::borrow::Cow;

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::{PyBytes, PyList, PyTuple};

use super::input::{io_error, Input};
use crate::gil::GilCell;

/// The reference count of a live object.
pub(super) fn refcount(object: *mut pyo3::ffi::PyObject) -> isize {
    // SAFETY: callers pass a pointer from a reference they hold (the object is alive), with
    // the GIL held.
    unsafe { pyo3::ffi::Py_REFCNT(object) }
}

/// A header name or value, as bytes: borrowed from the Python str when it is ASCII (the
/// common case, no copy), encoded to latin-1 otherwise.
enum HeaderText {
    Ascii(PyBackedStr),
    Latin1(Vec<u8>),
}

impl HeaderText {
    fn new(text: PyBackedStr, what: &str) -> PyResult<HeaderText> {
        if text.is_ascii() {
            return Ok(HeaderText::Ascii(text));
        }
        let bytes = text
            .chars()
            .map(|c| u8::try_from(u32::from(c)))
            .collect::<Result<Vec<u8>, _>>()
            .map_err(|_| {
                PyValueError::new_err(format!("{what} {:?} is not latin-1 (PEP 3333)", &*text))
            })?;
        Ok(HeaderText::Latin1(bytes))
    }

    fn bytes(&self) -> &[u8] {
        match self {
            HeaderText::Ascii(text) => text.as_bytes(),
            HeaderText::Latin1(bytes) => bytes,
        }
    }
}

/// The response head the app gives, and the callables it is given: its bound
/// `start_response` method is the app's `start_response`, and `write` the callable that
/// returns. Its state is guarded by the GIL alone ([`GilCell`]: no atomic borrow flag).
#[pyclass(module = "tines._core", frozen)]
pub struct StartResponse {
    input: Py<Input>,
    state: GilCell<Head>,
}

/// What a [`StartResponse`] holds between calls.
///
/// The status and headers stay from one request to the next, with the objects they were
/// made from (`status_source`, `header_sources`: references, so that each address names one
/// object): a call that passes the same str and the same tuples (an app's constants, as in
/// `start_response("200 OK", list(HEADERS))`) keeps them instead of reading and checking
/// each string again. A str and a tuple are immutable, so the same object holds the same
/// text. `called` says whether this request's app called `start_response`.
///
/// Why: reading four strings out of two tuples (a reference and a UTF-8 view each) and
/// checking them for ASCII cost about 700 of a hello-world request's 12,400 instructions
/// (callgrind); comparing a pointer per tuple costs a few.
struct Head {
    called: bool,
    status: Option<HeaderText>,
    status_source: Option<Py<PyAny>>,
    headers: Vec<(HeaderText, HeaderText)>,
    header_sources: Vec<Py<PyAny>>,
    /// The bound `start_response` and `write` methods, made once per object: the object
    /// serves request after request while nothing but the server holds it (see
    /// [`super::RequestObjects`]). They refer back to the object; the server breaks that
    /// cycle when it lets the object go ([`StartResponse::release`]).
    callables: Option<(Py<PyAny>, Py<PyAny>)>,
}

impl StartResponse {
    /// A `start_response` for the requests held by `input`, with its callables made.
    pub fn create(py: Python<'_>, input: Py<Input>) -> PyResult<Bound<'_, StartResponse>> {
        let this = Bound::new(
            py,
            StartResponse {
                input,
                state: GilCell::new(Head {
                    called: false,
                    status: None,
                    status_source: None,
                    headers: Vec::new(),
                    header_sources: Vec::new(),
                    callables: None,
                }),
            },
        )?;
        let start = this.getattr(pyo3::intern!(py, "start_response"))?.unbind();
        let write = this.getattr(pyo3::intern!(py, "write"))?.unbind();
        this.get().state.borrow_mut(py)?.callables = Some((start, write));
        Ok(this)
    }

    /// The callable the app is given as `start_response`.
    pub fn callable<'py>(slf: &Bound<'py, Self>) -> Option<Bound<'py, PyAny>> {
        let py = slf.py();
        let state = slf.get().state.borrow(py).ok()?;
        let (start, _) = state.callables.as_ref()?;
        Some(start.bind(py).clone())
    }

    /// True when nothing but the server refers to this object and its callables (the app
    /// kept none of them): it may serve the next request.
    pub fn is_unshared(slf: &Bound<'_, Self>) -> bool {
        let py = slf.py();
        let references = refcount(slf.as_ptr());
        let Ok(state) = slf.get().state.borrow(py) else {
            return false;
        };
        let Some((start, write)) = state.callables.as_ref() else {
            return false;
        };
        // The server's own reference, and one from each bound method.
        references == 3 && refcount(start.as_ptr()) == 1 && refcount(write.as_ptr()) == 1
    }

    /// Readies the object for the next request: its app has not called `start_response`
    /// yet (the last head stays, for a call that passes the same objects: see [`Head`]).
    pub fn recycle(&self, py: Python<'_>) {
        if let Ok(mut state) = self.state.borrow_mut(py) {
            state.called = false;
        }
    }

    /// Lets go of the callables (the app kept a reference to the object or one of them):
    /// the cycle between the object and its bound methods is broken, so it is freed when
    /// the app lets go. A callable kept past its request raises "the request is over".
    pub fn release(slf: &Bound<'_, Self>) {
        // Borrowed elsewhere only if another thread of the app is inside one of its
        // callables at this moment: then the cycle stays (freed at exit).
        let callables = match slf.get().state.borrow_mut(slf.py()) {
            Ok(mut state) => state.callables.take(),
            Err(_) => None,
        };
        // Dropped once the borrow is over: freeing a bound method may free this object.
        drop(callables);
    }

    /// Encodes the response head (if not done yet) with the stored status and headers;
    /// `body_length` is the body's length when known.
    pub fn begin(&self, py: Python<'_>, body_length: Option<u64>) -> PyResult<()> {
        let state = self.state.borrow(py)?;
        // One lock on the exchange for the check and the encoding.
        self.input.get().with(py, |exchange| {
            if exchange.response_started() {
                return Ok(());
            }
            let status = state
                .status
                .as_ref()
                .filter(|_| state.called)
                .ok_or_else(|| {
                    PyRuntimeError::new_err(
                        "the app returned a body without calling start_response",
                    )
                })?;
            let headers = state
                .headers
                .iter()
                .map(|(name, value)| (name.bytes(), value.bytes()));
            exchange
                .begin_response(status.bytes(), headers, body_length)
                .map_err(|err| PyValueError::new_err(err.to_string()))
        })?
    }
}

fn status_text(status: &Bound<'_, PyAny>) -> PyResult<HeaderText> {
    let text: PyBackedStr = status.extract().map_err(|_| {
        PyTypeError::new_err(format!("status must be a str, got {}", type_name(status)))
    })?;
    HeaderText::new(text, "status")
}

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map(|name| name.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// The app's header list, or the TypeError for what it passed instead.
fn as_list<'a, 'py>(headers: &'a Bound<'py, PyAny>) -> PyResult<&'a Bound<'py, PyList>> {
    headers.cast::<PyList>().map_err(|_| {
        PyTypeError::new_err(format!(
            "headers must be a list, got {}",
            type_name(headers)
        ))
    })
}

/// Checks and stores the app's header list into `out` (empty).
fn header_list(list: &Bound<'_, PyList>, out: &mut Vec<(HeaderText, HeaderText)>) -> PyResult<()> {
    out.reserve(list.len());
    for item in list.iter() {
        let pair = item
            .cast::<PyTuple>()
            .ok()
            .filter(|tuple| tuple.len() == 2)
            .ok_or_else(|| {
                PyTypeError::new_err(format!(
                    "each header must be a (name, value) tuple, got {}",
                    type_name(&item)
                ))
            })?;
        let name: PyBackedStr = pair
            .get_item(0)?
            .extract()
            .map_err(|_| PyTypeError::new_err("header names must be str"))?;
        let value: PyBackedStr = pair
            .get_item(1)?
            .extract()
            .map_err(|_| PyTypeError::new_err("header values must be str"))?;
        out.push((
            HeaderText::new(name, "header name")?,
            HeaderText::new(value, "header value")?,
        ));
    }
    Ok(())
}

#[pymethods]
impl StartResponse {
    /// The PEP 3333 `start_response(status, headers, exc_info=None)`: stores the status and
    /// headers, and returns `write`. A bound method, so the app's call is a vectorcall (no
    /// argument tuple).
    #[pyo3(signature = (status, headers, exc_info=None))]
    fn start_response<'py>(
        slf: &Bound<'py, Self>,
        status: &Bound<'py, PyAny>,
        headers: &Bound<'py, PyAny>,
        exc_info: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let this = slf.get();
        let exc_info = exc_info.filter(|info| !info.is_none());
        let called = this.state.borrow(py)?.called;
        if let Some(info) = exc_info {
            let input = this.input.get();
            if input.with(py, |exchange| exchange.response_committed())? {
                // PEP 3333: headers already sent, so re-raise the app's exception.
                let value = info.get_item(1)?;
                return Err(PyErr::from_value(value));
            }
            input.with(py, |exchange| exchange.reset_response())?;
        } else if called {
            return Err(PyRuntimeError::new_err(
                "start_response was already called (pass exc_info to replace the response)",
            ));
        }
        let list = as_list(headers)?;
        // What differs from the head kept from the last call is read and checked; nothing
        // changes until all of it passes (a replacement, with exc_info, keeps the first head
        // until then).
        let (same_status, same_headers) = {
            let state = this.state.borrow(py)?;
            let same_status = state
                .status_source
                .as_ref()
                .is_some_and(|source| source.as_ptr() == status.as_ptr());
            let same_headers = state.header_sources.len() == list.len()
                && state
                    .header_sources
                    .iter()
                    .zip(list.iter())
                    .all(|(source, item)| source.as_ptr() == item.as_ptr());
            (same_status, same_headers)
        };
        let new_status = if same_status {
            None
        } else {
            Some(status_text(status)?)
        };
        let new_headers = if same_headers {
            None
        } else {
            let mut checked = Vec::new();
            header_list(list, &mut checked)?;
            Some(checked)
        };
        let mut state = this.state.borrow_mut(py)?;
        // What is replaced is dropped once the borrow is over.
        let mut replaced = None;
        if let Some(text) = new_status {
            state.status = Some(text);
            replaced = state.status_source.replace(status.clone().unbind());
        }
        let mut replaced_headers = None;
        if let Some(checked) = new_headers {
            let sources = list.iter().map(Bound::unbind).collect();
            replaced_headers = Some((
                std::mem::replace(&mut state.headers, checked),
                std::mem::replace(&mut state.header_sources, sources),
            ));
        }
        state.called = true;
        let write = state
            .callables
            .as_ref()
            .map(|(_, write)| write.bind(py).clone());
        drop(state);
        drop(replaced);
        drop(replaced_headers);
        match write {
            Some(write) => Ok(write),
            None => slf.getattr(pyo3::intern!(py, "write")),
        }
    }

    /// The PEP 3333 `write()` callable: sends `data` before returning.
    fn write(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let bytes = data.cast::<PyBytes>().map_err(|_| {
            PyTypeError::new_err(format!("write() takes bytes, got {}", type_name(data)))
        })?;
        self.begin(py, None)?;
        let data: &[u8] = bytes.as_bytes();
        let data: Cow<'_, [u8]> = Cow::Borrowed(data);
        self.input
            .get()
            .with_detached(py, |exchange| {
                exchange.write_body(&data).and_then(|()| exchange.flush())
            })?
            .map_err(io_error)
    }
}
