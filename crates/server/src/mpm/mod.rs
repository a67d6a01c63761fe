//! The multi-processing modules: who runs a connection whose head is complete, and when.
//! All three drive the same [`crate::reactor::Reactor`] and [`crate::slot::serve_connection`].

mod app_threads;
pub mod event;
pub mod prefork;
pub mod thread;
