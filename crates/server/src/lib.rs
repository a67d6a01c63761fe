//! The Tines worker runtime: everything a worker process does once the app is loaded, with
//! no knowledge of Python. The `python` crate implements [`App`] for WSGI.
//!
//! Layers, from the bottom: [`io`] (non-blocking syscalls), [`shm`] (shared mappings of a
//! memfd the master makes before it forks, which a new master maps again), [`work_pool`] (a few
//! threads an event loop hands work to: CPU work on keyed lanes, lookups that may block apart;
//! results back through an eventfd), [`poller`] (epoll), [`clock`]
//! (UTC dates for the logs, the monotonic clock as last read), [`control`] (signals, life pipe),
//! [`tls`] (rustls sessions, the certificates and keys, session tickets, what a handshake
//! tells the app), [`h2`] (an HTTP/2 connection over its socket, the `h2` crate driven by our
//! poller, its streams as virtual HTTP/1.1 connections; its settings), [`transport`] (what carries a connection's bytes: every connection read and write goes
//! through it), [`scoreboard`], [`dump_signal`] (the stuck worker's dump-signal handler, over
//! the scoreboard), [`log`] (the error log), [`access_log`] (its formats and buffered sink),
//! [`listener`] (accept, addresses), [`trusted_proxies`] (`forwarded_allow_ips`), [`rate_limit`] (per-client
//! request limits: the shared table of buckets, the 429's fields), [`static_mounts`] (the static
//! file settings and their mounts' directories), [`compress`] (response compression: the
//! codings, `Accept-Encoding`, the decision, the encoders), [`config`] (which re-exports the
//! settings of h2, rate_limit, static_mounts and compress),
//! [`spool`] (the buffer budgets and temporary files of bodies and responses that wait for a
//! slow client), [`parked_body`] (a request body read before dispatch: memory or temporary
//! file, chunked decoding), [`pending`] (response output the event loop finishes),
//! [`connection`] (the per-connection state machine), [`websocket`] (a WebSocket session
//! over a connection), [`shared`] (what a worker's slots share), [`exchange`] (one
//! request/response: body decoding, response framing, keep-alive), [`static_files`] (a
//! request under a static mount answered from its directory, through the exchange), `batch` (the responses a
//! slot writes in one go), [`reactor`] (the poller loop shared by the MPMs), `slot` (the
//! slot's serving loop), [`mpm`] (prefork, thread, event), [`worker`] (entry point),
//! [`status`] (the status process's server, over the scoreboard), [`fuzzing`] (the fuzz
//! targets' entry points). Each module imports only from modules before it in this list
//! (`tests/layers.rs` checks it).

pub mod access_log;
mod batch;
pub mod clock;
pub mod compress;
pub mod config;
pub mod connection;
pub mod control;
pub mod dump_signal;
pub mod exchange;
pub mod fuzzing;
pub mod h2;
pub mod io;
pub mod listener;
pub mod log;
pub mod mpm;
pub mod parked_body;
pub mod pending;
pub mod poller;
pub mod rate_limit;
pub mod reactor;
pub mod scoreboard;
pub mod shared;
pub mod shm;
mod slot;
pub mod spool;
pub mod static_files;
pub mod static_mounts;
pub mod status;
pub mod tls;
pub mod transport;
pub mod trusted_proxies;
pub mod websocket;
pub mod work_pool;
pub mod worker;

pub use config::{Mpm, WorkerConfig};
pub use control::StopReason;
pub use exchange::{Exchange, ResponseError};
pub use listener::{Local, Peer};
pub use scoreboard::{ExitReason, Scoreboard, WorkerState};
pub use trusted_proxies::{TrustedProxies, TrustedProxiesError};
pub use worker::{run_worker, WorkerSpec};

/// An application the worker serves. Implemented by the `python` crate for WSGI; tests
/// implement it in Rust.
pub trait App: Send + Sync + 'static {
    /// Serves one request: reads the body from and writes the response to `exchange`, then
    /// returns it. Called on a slot thread (the prefork process's thread or an app thread).
    fn serve(&self, exchange: Box<Exchange>) -> Box<Exchange>;

    /// Runs `body`, a loop that serves requests on its own thread (prefork's loop, an app
    /// thread of the event and thread MPMs), for the thread's whole life. The Python
    /// implementation attaches the thread and keeps the GIL while the loop works (reading,
    /// parsing, serving, writing: no waits), releasing it only while the loop sleeps
    /// ([`App::wait`]); see ADRs 0012 and 0015.
    fn run_loop_thread(&self, body: &mut dyn FnMut()) {
        body()
    }

    /// Runs `wait`, the loop's sleep (in its poller, or for the next request), or another
    /// step of the loop that needs no interpreter (a TLS handshake's crypto on prefork's
    /// loop, a static answer's opens and writes), on a thread started by
    /// [`App::run_loop_thread`]: the Python implementation releases the GIL for it.
    fn wait(&self, wait: &mut dyn FnMut()) {
        wait()
    }

    /// Takes whatever lock every app thread needs to start a request and lets it go at once:
    /// called once on a thread of its own after a stuck request's dump (the loop's interpreter
    /// probe, ADR 0020), which records when it returned; one that never returns tells the
    /// master the lock is held (the Python implementation: the GIL, held by C code). Nothing,
    /// for an app that needs no such lock.
    fn touch_interpreter(&self) {}
}
