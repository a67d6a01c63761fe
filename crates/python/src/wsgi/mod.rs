//! WSGI (PEP 3333) on top of the server's [`tines_server::App`] trait.
//!
//! Per request, on a slot thread (which holds the GIL while it works: see
//! `WsgiApp::run_loop_thread`): build the environ, call the app, send its body, always call
//! the iterable's `close()`, and hand the exchange back. An exception before any byte was sent
//! is a 500 with the traceback in the error log; after, the connection is closed.

pub mod body;
pub mod environ;
pub mod file_wrapper;
pub mod input;
pub mod start_response;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use tines_server::{App, Exchange, Mpm, WorkerConfig};

use environ::EnvironContext;
use input::Input;
use start_response::StartResponse;

/// The WSGI app as the server sees it.
pub struct WsgiApp {
    app: Py<PyAny>,
    environ: EnvironContext,
    logger: Py<PyAny>,
}

/// The objects a request gives the app besides its environ: `wsgi.input` (which holds the
/// exchange) and the `start_response` object (with its bound `start_response` and `write`).
///
/// Why they are reused: allocating and freeing the two objects and two bound methods, and
/// calling an object through `tp_call` (an argument tuple per call), cost about 0.2 µs of a
/// 9 µs hello-world request. After a request they serve the next one on the same thread,
/// but only when nothing but the server refers to them (the reference counts say the app
/// kept none of them, its environ included): a kept object must keep answering "the
/// request is over", never reach another request.
pub(crate) struct RequestObjects {
    input: Py<Input>,
    start: Py<StartResponse>,
}

impl RequestObjects {
    fn create(py: Python<'_>) -> PyResult<RequestObjects> {
        let input = Bound::new(py, Input::empty())?;
        let start = StartResponse::create(py, input.clone().unbind())?;
        Ok(RequestObjects {
            input: input.unbind(),
            start: start.unbind(),
        })
    }

    /// True when the server holds the only references (its own, the start_response
    /// object's to the input, and the thread's environ template's when it holds the input
    /// as its `wsgi.input`).
    fn unshared(&self, py: Python<'_>) -> bool {
        let input = self.input.as_ptr();
        let server_held = 2 + isize::from(environ::template_holds(input));
        start_response::refcount(input) == server_held
            && StartResponse::is_unshared(self.start.bind(py))
    }
}

thread_local! {
    /// The request objects kept for this thread's next request. Never dropped (a thread
    /// that ends leaves them to the process's exit: dropping a Python reference needs the
    /// interpreter, which may be gone by then).
    static SPARE: std::cell::Cell<Option<std::mem::ManuallyDrop<RequestObjects>>> =
        const { std::cell::Cell::new(None) };
}

/// Calls `app(environ, start_response)`. `PyObject_CallFunctionObjArgs` passes the two
/// arguments on the C stack (a vectorcall), where pyo3's `call1` under the stable ABI builds
/// an argument tuple per request.
fn call_app_object<'py>(
    app: &Bound<'py, PyAny>,
    environ: &Bound<'py, PyDict>,
    start_response: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = app.py();
    // SAFETY: three live objects (references held by the caller), the GIL held, and the
    // argument list ends with a null pointer as the C API requires.
    unsafe {
        let result = pyo3::ffi::PyObject_CallFunctionObjArgs(
            app.as_ptr(),
            environ.as_ptr(),
            start_response.as_ptr(),
            std::ptr::null_mut::<pyo3::ffi::PyObject>(),
        );
        if result.is_null() {
            Err(PyErr::fetch(py))
        } else {
            Ok(Bound::from_owned_ptr(py, result))
        }
    }
}

/// Makes a non-`Send` closure callable inside `Python::detach`.
struct SameThread<'a>(&'a mut dyn FnMut());
// SAFETY: `Python::detach` runs its closure synchronously on the calling thread; the wrapped
// closure never crosses to another thread.
unsafe impl Send for SameThread<'_> {}

/// Runs `work` with the GIL released, on a thread that holds it (prefork's loop, an app
/// thread, the ASGI event loop's): the loop's sleep, or a TLS handshake's crypto.
pub(crate) fn detached(work: &mut dyn FnMut()) {
    Python::attach(|py| {
        let work = SameThread(work);
        py.detach(move || {
            let work = work;
            (work.0)()
        })
    })
}

impl WsgiApp {
    /// Prepares the per-worker environ template and the error logger.
    pub fn new(py: Python<'_>, app: Py<PyAny>, config: &WorkerConfig) -> PyResult<WsgiApp> {
        let sys = py.import("sys")?;
        let template = PyDict::new(py);
        template.set_item("wsgi.version", PyTuple::new(py, [1, 0])?)?;
        template.set_item("wsgi.url_scheme", "http")?;
        template.set_item("wsgi.errors", sys.getattr("stderr")?)?;
        template.set_item(
            "wsgi.multithread",
            matches!(config.mpm, Mpm::Thread | Mpm::Event) && config.threads > 1,
        )?;
        template.set_item("wsgi.multiprocess", config.workers > 1)?;
        template.set_item("wsgi.run_once", false)?;
        template.set_item("wsgi.input_terminated", true)?;
        template.set_item(
            "wsgi.file_wrapper",
            py.get_type::<file_wrapper::FileWrapper>(),
        )?;
        template.set_item(
            "SERVER_SOFTWARE",
            format!("tines/{}", env!("CARGO_PKG_VERSION")),
        )?;
        // `root_path` (empty for none): `PATH_INFO` is then the rest of a path under it.
        template.set_item("SCRIPT_NAME", config.root_path.as_str())?;
        let logger = py
            .import("logging")?
            .call_method1("getLogger", ("tines.error",))?;
        Ok(WsgiApp {
            app,
            environ: EnvironContext::new(py, &template, &config.root_path)?,
            logger: logger.unbind(),
        })
    }

    fn call_app(
        &self,
        py: Python<'_>,
        input: &Bound<'_, Input>,
        start_response: &Bound<'_, StartResponse>,
    ) -> PyResult<()> {
        let environ = input.get().with(py, |exchange| {
            environ::build(py, &self.environ, exchange, input)
        })??;
        let callable = StartResponse::callable(start_response)
            .ok_or_else(|| pyo3::exceptions::PyRuntimeError::new_err("start_response is gone"))?;
        let iterable = call_app_object(self.app.bind(py), &environ, &callable);
        let _ = input.get().with(py, |exchange| exchange.app_returned());
        let iterable = iterable?;
        let sent = body::send(py, &iterable, start_response, input.get());
        if iterable.is_exact_instance_of::<PyList>() || iterable.is_exact_instance_of::<PyTuple>() {
            // Lists and tuples have no close(); asking would build an AttributeError each time.
            return sent;
        }
        // PEP 3333: close() is called whatever happened while sending.
        let closed = match iterable.hasattr(pyo3::intern!(py, "close")) {
            Ok(true) => iterable.call_method0(pyo3::intern!(py, "close")).map(drop),
            Ok(false) => Ok(()),
            Err(err) => Err(err),
        };
        sent.and(closed)
    }

    fn on_error(&self, py: Python<'_>, input: &Input, err: PyErr) {
        let request = input
            .with(py, |exchange| {
                format!(
                    "{} {}",
                    String::from_utf8_lossy(exchange.method()),
                    String::from_utf8_lossy(exchange.target())
                )
            })
            .unwrap_or_default();
        if input
            .with(py, |exchange| exchange.timed_out())
            .unwrap_or(false)
        {
            // A stuck request that returned after its 503 (docs/signals.md): its stack was
            // logged at the dump; its result goes nowhere.
            let _ = self.logger.bind(py).call_method1(
                "info",
                (
                    "Request %s returned after request_timeout answered it: its result is dropped",
                    request,
                ),
            );
            return;
        }
        let kwargs = PyDict::new(py);
        let exc_info = (err.get_type(py), err.value(py), err.traceback(py));
        let logged = kwargs.set_item("exc_info", exc_info).and_then(|()| {
            self.logger.bind(py).call_method(
                "error",
                ("Error handling request %s", request),
                Some(&kwargs),
            )
        });
        if logged.is_err() {
            err.print(py);
        }
        let _ = input.with(py, |exchange| {
            if exchange.response_committed() {
                exchange.abort();
            } else {
                // A body the client got wrong (too large, bad chunks, too slow) is its fault.
                exchange.fail(exchange.fault().unwrap_or(500));
            }
        });
    }

    fn serve_attached(&self, py: Python<'_>, exchange: Box<Exchange>) -> Box<Exchange> {
        let objects = match SPARE.take() {
            Some(spare) => std::mem::ManuallyDrop::into_inner(spare),
            None => match RequestObjects::create(py) {
                Ok(objects) => objects,
                Err(err) => {
                    err.print(py);
                    let mut exchange = exchange;
                    exchange.fail(500);
                    return exchange;
                }
            },
        };
        let input = objects.input.bind(py);
        input.get().put(py, exchange);
        if let Err(err) = self.call_app(py, input, objects.start.bind(py)) {
            self.on_error(py, input.get(), err);
        }
        let exchange = input
            .get()
            .take(py)
            .expect("only serve() takes the exchange out of its Input");
        if objects.unshared(py) {
            objects.start.get().recycle(py);
            SPARE.set(Some(std::mem::ManuallyDrop::new(objects)));
        } else {
            StartResponse::release(objects.start.bind(py));
        }
        exchange
    }
}

impl App for WsgiApp {
    fn serve(&self, exchange: Box<Exchange>) -> Box<Exchange> {
        Python::attach(|py| self.serve_attached(py, exchange))
    }

    /// Prefork's loop and the pool's app threads keep the GIL while they work and release it
    /// only to sleep (ADRs 0012, 0015): each request then finds the GIL held (taking it back
    /// per request, and `PyGILState_Ensure`, cost about 900 of a hello-world request's
    /// 15,900 instructions on prefork, 560 of 13,300 on an app thread).
    fn run_loop_thread(&self, body: &mut dyn FnMut()) {
        Python::attach(|_py| body())
    }

    fn wait(&self, wait: &mut dyn FnMut()) {
        detached(wait)
    }

    /// Takes the GIL and releases it: blocks for as long as another thread holds it.
    fn touch_interpreter(&self) {
        Python::attach(|_py| ())
    }
}
