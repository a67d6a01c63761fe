//! `tines bench`: the load generator (crates/loadgen) run in-process.
//!
//! The argv goes to Rust untouched (its flags are clap's, outside the settings
//! registry); the run holds no GIL, and SIGINT is handled in Rust for its
//! length, then Python's handler is put back (see loadgen::signal).

use pyo3::prelude::*;

/// Runs `tines bench` with `argv` (without the program name); returns the exit status.
#[pyfunction]
pub fn bench(py: Python<'_>, argv: Vec<String>) -> i32 {
    py.detach(move || loadgen::main("tines bench", &argv))
}
