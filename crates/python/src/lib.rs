//! `tines._core`: the only crate that touches Python.
//!
//! It exposes the scoreboard to the master, the worker entry point (`run_worker`, and
//! `settings`, which reads the registry's worker settings), the load generator (`bench`,
//! crates/loadgen), the ASGI layer (`asgi/`: the bridge's async side, its scope, requests and
//! WebSockets) and the WSGI layer (`wsgi/`: environ, `wsgi.input`, `start_response`,
//! `wsgi.file_wrapper`); both build what the app sees with the CGI helpers of `cgi`. `tls` is
//! the TLS material the master checks and the workers serve with.
//! Everything below it (`tines-server`, `tines-proto`) knows nothing of Python; the GIL is
//! taken only here.

use pyo3::prelude::*;

mod asgi;
mod bench;
mod cgi;
mod fork_server;
mod gil;
mod rate_limit;
mod scoreboard;
mod settings;
mod tls;
mod worker;
mod wsgi;

/// The extension module.
#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // The CPU feature detection of std (what httparse and memchr ask before using SIMD) runs
    // once per process, on first use, and keeps its answer in a static: each `cpuid` traps to
    // the hypervisor on a VM, about 100 µs in all on this one (perf: 4% of a process-per-request
    // worker's CPU). Asked here, in the master (it imports this module before its first fork),
    // every worker inherits the answer instead.
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    let _ = std::is_x86_feature_detected!("sse4.2");
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<scoreboard::PyScoreboard>()?;
    m.add_class::<rate_limit::PyRateTable>()?;
    m.add_class::<rate_limit::PyClientConnections>()?;
    m.add_class::<tls::TlsMaterial>()?;
    m.add(
        "EXIT_REASONS",
        pyo3::types::PyTuple::new(m.py(), scoreboard::exit_reason_names())?,
    )?;
    // The access log's custom-format atoms, to check the docs' list against.
    m.add(
        "ACCESS_LOG_ATOMS",
        pyo3::types::PyTuple::new(m.py(), tines_server::access_log::ATOMS)?,
    )?;
    m.add_function(wrap_pyfunction!(scoreboard::install_dump_handler, m)?)?;
    m.add_class::<wsgi::file_wrapper::FileWrapper>()?;
    m.add_class::<wsgi::input::Input>()?;
    m.add_class::<wsgi::start_response::StartResponse>()?;
    m.add_function(wrap_pyfunction!(worker::run_worker, m)?)?;
    m.add_function(wrap_pyfunction!(fork_server::serve_forks, m)?)?;
    m.add_class::<asgi::AsgiWorker>()?;
    m.add_class::<asgi::Request>()?;
    m.add_class::<asgi::WebSocket>()?;
    m.add_class::<asgi::Ready>()?;
    m.add(
        "ClientDisconnected",
        m.py().get_type::<asgi::ClientDisconnected>(),
    )?;
    m.add_function(wrap_pyfunction!(scoreboard::run_status, m)?)?;
    m.add_function(wrap_pyfunction!(settings::check_worker_settings, m)?)?;
    m.add_function(wrap_pyfunction!(settings::worker_config_fields, m)?)?;
    m.add_function(wrap_pyfunction!(bench::bench, m)?)?;
    Ok(())
}
