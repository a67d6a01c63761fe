//! The multi-processing modules: who runs a connection whose head is complete, and when.
//! Both drive the same [`crate::reactor::Reactor`] and [`crate::slot::serve_connection`].

pub mod prefork;
pub mod thread;
