//! The multi-processing modules: who runs a connection whose head is complete, and when.
//! Both drive the same [`crate::reactor::Reactor`] and [`crate::slot::serve_connection`]:
//! `prefork` on the loop's own thread, `pool` on app threads (the `thread` and `event` MPMs,
//! one machine under two names: ADR 0010). `bridge` lets an event loop on the same thread run
//! the reactor turn by turn and serve the requests (ASGI, ADR 0014).

mod app_threads;
pub mod bridge;
pub mod pool;
pub mod prefork;
