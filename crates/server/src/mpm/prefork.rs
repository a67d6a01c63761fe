//! `prefork`: one thread per process. The poller thread runs the app inline once a head is
//! complete, writes what the socket takes of the response (the rest is handed to the
//! poller, which finishes it while the process serves others: ADR 0009) and parks the
//! connection again. A crash or a leak touches
//! one process; `max_requests = 1` gives "a process per request".

use std::io;
use std::sync::Arc;
use std::time::Instant;

use crate::connection::Connection;
use crate::control::StopReason;
use crate::exchange::SlotContext;
use crate::reactor::{Dispatch, Driver, Reactor};
use crate::shared::WorkerShared;
use crate::slot::serve_connection;
use crate::App;

struct Inline {
    app: Arc<dyn App>,
    shared: Arc<WorkerShared>,
    ctx: Option<Box<SlotContext>>,
}

impl Driver for Inline {
    fn dispatch(&mut self, _token: usize, conn: Box<Connection>, now: Option<Instant>) -> Dispatch {
        let ctx = self.ctx.take().unwrap_or_default();
        let (kept, ctx) = serve_connection(conn, ctx, &*self.app, &self.shared, now);
        self.ctx = Some(ctx);
        Dispatch::Served(kept)
    }

    fn collect(&mut self, _into: &mut Vec<(usize, Option<Box<Connection>>)>) {}

    fn in_flight(&self) -> usize {
        0
    }

    fn waker_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }

    fn serves_inline(&self) -> bool {
        true
    }

    fn watches_lazily(&self) -> bool {
        true
    }

    fn wait(&mut self, wait: &mut dyn FnMut()) {
        self.app.wait(wait)
    }

    /// The loop holds the GIL (ADR 0012): it is released around a TLS handshake's reads.
    fn off_interpreter(&mut self, work: &mut dyn FnMut()) {
        self.app.wait(work)
    }
}

/// Runs the prefork MPM on the calling thread.
pub fn run(
    mut reactor: Reactor,
    app: Arc<dyn App>,
    shared: Arc<WorkerShared>,
) -> io::Result<StopReason> {
    let shared_batch_delay = shared.config.response_batch_delay;
    let mut driver = Inline {
        app: Arc::clone(&app),
        shared,
        ctx: Some(Box::new(SlotContext {
            batch_responses: !shared_batch_delay.is_zero(),
            ..SlotContext::new()
        })),
    };
    let mut result = None;
    app.run_loop_thread(&mut || result = Some(reactor.run(&mut driver)));
    result.unwrap_or_else(|| {
        Err(io::Error::other(
            "the app's slot thread did not run the loop",
        ))
    })
}
