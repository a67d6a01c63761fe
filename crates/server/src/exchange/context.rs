//! The per-slot scratch every exchange of a slot borrows in turn ([`SlotContext`]): the output
//! buffer, the `Date` and access-log caches, the header memo, and the vacant parts that stand
//! in a connection's place while its exchange holds its own (ADR 0018); and what of the
//! worker's shared context a module above the exchange reads through it (`static_files`).
//!
//! It must not hold anything of one request past its exchange.

use tines_proto::DateCache;

use crate::connection::Lent;

/// Per-slot scratch that exchanges borrow in turn, so a request allocates nothing for them.
/// A slot keeps it boxed: it moves into each exchange and back out, a pointer rather than
/// its ~150 bytes (as with [`crate::connection::Connection::new`]).
pub struct SlotContext {
    /// The output buffer (response head plus small bodies).
    pub(crate) out: Vec<u8>,
    /// The cached `Date` value.
    pub(crate) date: DateCache,
    /// Scratch for access-log lines.
    pub(crate) log_line: Vec<u8>,
    /// The cached access-log timestamp.
    pub(crate) log_clock: crate::clock::LogClock,
    /// The values of the response headers the access log's format shows, kept by
    /// `begin_response` (empty unless the format names some).
    pub(crate) logged_response_headers: Vec<Option<Vec<u8>>>,
    /// The app header lines this slot checked last (`begin_response`).
    pub(crate) checked_headers: tines_proto::response::CheckedHeaders,
    /// The vacant parts that stand in a connection's place while its exchange holds its own
    /// (`Connection::lend`): made at the slot's first exchange, then passed back and forth.
    pub(crate) vacant: Option<Box<Lent>>,
    /// Which app thread of the worker this is (its scoreboard sub-slot).
    pub(crate) thread: usize,
    /// The slot writes responses in batches (ADR 0011): a small response that is complete
    /// when it is finished is queued in the connection's pending output, for the slot to
    /// write with the rest of its batch.
    pub(crate) batch_responses: bool,
    /// The slot never waits for a client (an event loop serving many requests, ADR 0014):
    /// output beyond the response store's room is queued all the same, and the app is made
    /// to wait on its own loop until it is written.
    pub(crate) never_wait: bool,
    /// The encoders of the slot's compressed responses, kept for its next ones (ADR 0037);
    /// empty unless compression is on.
    pub(crate) encoders: crate::compress::Spare,
}

impl SlotContext {
    /// A fresh context for the worker's first (or only) slot thread.
    pub fn new() -> Self {
        Self::for_thread(0)
    }

    /// A fresh context for app thread `thread` (its scoreboard sub-slot).
    pub fn for_thread(thread: usize) -> Self {
        SlotContext {
            thread,
            out: Vec::with_capacity(OUT_BUFFER_LIMIT),
            date: DateCache::new(),
            log_line: Vec::with_capacity(256),
            log_clock: Default::default(),
            logged_response_headers: Vec::new(),
            checked_headers: Default::default(),
            vacant: None,
            batch_responses: false,
            never_wait: false,
            encoders: Default::default(),
        }
    }
}

impl Default for SlotContext {
    fn default() -> Self {
        Self::new()
    }
}

/// Bodies are gathered in the output buffer up to this size and sent with the head in one
/// write; a larger piece is written straight from the caller's memory (no copy). 16 KiB is
/// above the typical HTML page and below the point where the copy costs more than a syscall.
pub const OUT_BUFFER_LIMIT: usize = 16 * 1024;

impl super::Exchange {
    /// The static file settings (`static_files` reads them for every request it is given).
    #[inline]
    pub(crate) fn statics(&self) -> &crate::config::StaticConfig {
        &self.shared.config.statics
    }

    /// The worker's shared state, for a caller that must hold its settings while it writes the
    /// response (`static_files`).
    pub(crate) fn shared_handle(&self) -> std::sync::Arc<crate::shared::WorkerShared> {
        std::sync::Arc::clone(&self.shared)
    }
}
