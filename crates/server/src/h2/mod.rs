//! HTTP/2 (RFC 9113; ADR 0034, 0035): a connection whose first bytes were the HTTP/2 preface
//! (h2c) or whose TLS handshake chose `h2` by ALPN, served by the `h2` crate driven from our
//! own poller without a runtime, each of its streams handed to the rest of the server as a
//! virtual HTTP/1.1 connection ([`H2Stream`], a transport of its own, `Transport::H2`).
//!
//! The loop owns an [`H2Conn`] for its whole life (ADR 0019): it calls [`H2Conn::advance`]
//! when the socket is readable or writable, when a slot wrote to a stream (the driver's
//! waker), and at the connection's deadline. `advance` reads what the socket holds, runs the
//! protocol (HPACK, flow control, SETTINGS, PING, RST_STREAM, GOAWAY, the flood limits),
//! turns what the streams' exchanges wrote into frames and writes what the socket takes. A
//! stream whose request head is complete comes out as a new [`H2Stream`]: the loop makes it a
//! `Connection` in its table (never registered with the poller: its readiness is what
//! `advance` reports) and serves it as any HTTP/1.1 connection (its head, its body read
//! before dispatch, a slot, the response handed to the poller when the client reads slowly).
//!
//! Every thread may touch a connection's state through its streams' links (a slot writing a
//! response, reading a body it streams): the state is behind one lock per connection
//! (`Shared`), which the loop takes in `advance` and a stream's link in each call.
//!
//! Its files: `wire` (the socket: plain or TLS), `io` (the I/O object `h2` drives), `flood` (the frame pre-scanner and the rate
//! windows), `synth` (a request as HTTP/1.1 bytes), `transcode` (a response's HTTP/1.1 bytes
//! as HEADERS and DATA), `state` (the connection's state and its drive), `stream` (the
//! `H2Stream` a virtual connection owns).
//!
//! It must not know which MPM runs it beyond `inline` (a slot on the loop's own thread:
//! prefork, event without threads), nor how an exchange frames HTTP/1.1 (it reads the bytes
//! an exchange wrote as a client would: `transcode`).

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use bytes::Bytes;

mod config;
mod flood;
mod io;
mod state;
mod stream;
mod synth;
mod transcode;
mod wire;

pub use config::H2Config;
use state::State;
pub use stream::{H2Stream, StreamLink};
pub use wire::Wire;

/// The connection preface a client sends first (RFC 9113 3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The loop's handle on one HTTP/2 connection. Dropping it closes the socket once every
/// stream's transport is dropped too (the streams hold the connection's state alive).
pub struct H2Conn {
    shared: Arc<Shared>,
}

/// What one connection's streams and the loop share: the state behind its lock, the socket.
pub(crate) struct Shared {
    /// Declared first: dropped before the wire its I/O object reads through.
    state: Mutex<State>,
    /// Wakes the threads blocked on one of the connection's streams (not `inline`).
    cond: Condvar,
    /// A slot's thread left work for the loop since its last advance.
    needs_advance: AtomicBool,
    wire: Wire,
    inline: bool,
    waker: Option<RawFd>,
}

/// Who the connection is, for the streams' virtual connections and the waker.
pub struct H2Context {
    /// The worker's HTTP/2 settings.
    pub config: H2Config,
    /// A slot runs on the loop's own thread (prefork, event without app threads): a stream's
    /// blocking wait must then drive the connection itself, as no loop runs meanwhile.
    pub inline: bool,
    /// The driver's waker (an eventfd the loop watches; `None` when `inline`): written once
    /// when a slot's write or a slot's own drive of the connection left work for the loop
    /// (frames to write, a stream opened, a stream's readiness to report).
    pub waker: Option<RawFd>,
    /// The prefork MPM: advertise SETTINGS_MAX_CONCURRENT_STREAMS = 1 whatever `config` says.
    pub one_stream: bool,
    /// Response bytes one stream holds before its writes would block (`max_response_buffer`):
    /// what a slow reader's stream costs at most besides its window in `h2`.
    pub stream_output_budget: usize,
    /// How long a stream whose exchange is over may hold response bytes the client's window
    /// does not take, renewed as they move (`send_timeout`): then RST_STREAM CANCEL.
    pub send_timeout: std::time::Duration,
}

/// What [`H2Conn::advance`] did that the loop must act on.
#[derive(Default)]
pub struct Advance {
    /// Streams whose request head is complete, in the order they opened: each is the
    /// transport of a new virtual HTTP/1.1 connection whose read gives the request's head
    /// (and body) as HTTP/1.1 bytes.
    pub opened: Vec<Box<H2Stream>>,
    /// Tokens (from [`H2Stream::set_token`]) of the loop's streams that became readable (more
    /// body, its end, a reset) or writable (room in their window and buffers) since the last
    /// advance: the loop handles them as the poller's events on a connection.
    pub ready: Vec<(u64, Readiness)>,
    /// Nothing is left of the connection (GOAWAY exchanged and no open stream, the peer
    /// gone, a connection error written): the loop drops it.
    pub finished: bool,
    /// Output waits for the socket to become writable (the poller's EPOLLOUT wakes the loop).
    pub wants_write: bool,
    /// When a stream whose exchange is over times out unless its bytes move: the loop
    /// advances the connection by then.
    pub deadline: Option<Instant>,
}

/// Which way a stream became ready.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    /// Bytes (or the end, or an error) to read.
    pub readable: bool,
    /// Room to write.
    pub writable: bool,
}

/// The `h2` server's builder, configured from the settings (ADR 0034).
fn builder(config: &H2Config, one_stream: bool) -> h2::server::Builder {
    let mut builder = h2::server::Builder::new();
    builder
        .initial_window_size(config.initial_window_size)
        .initial_connection_window_size(config.connection_window_size)
        .max_frame_size(config.max_frame_size)
        .max_header_list_size(config.max_header_list_size)
        .header_table_size(config.header_table_size)
        .max_concurrent_streams(if one_stream {
            1
        } else {
            config.max_concurrent_streams
        })
        // Streams h2 resets for the client's errors, over the connection's life: ten
        // seconds' worth of the reset rate (ours counts the client's RST_STREAM frames).
        .max_local_error_reset_streams(Some(config.max_reset_rate.max(1) as usize * 10));
    builder
}

impl H2Conn {
    /// A connection over `wire` (the connection's transport until now) whose first `read` bytes were taken from the socket
    /// already (the h2c preface, or part of it, that the loop peeked or read to choose the
    /// protocol); on TLS, the handshake is finished and ALPN chose `h2`. Queues the server's
    /// SETTINGS (and the connection window's WINDOW_UPDATE); nothing is written until
    /// [`H2Conn::advance`].
    pub fn new(wire: Wire, read: &[u8], context: H2Context) -> H2Conn {
        let link = wire.link();
        let report = Arc::new(io::Report::default());
        let io = io::Io::new(link, read, &context.config, Arc::clone(&report));
        let handshake = builder(&context.config, context.one_stream).handshake::<_, Bytes>(io);
        let state = State::new(
            handshake,
            report,
            context.stream_output_budget,
            context.send_timeout,
            link,
        );
        H2Conn {
            shared: Arc::new(Shared {
                state: Mutex::new(state),
                cond: Condvar::new(),
                needs_advance: AtomicBool::new(false),
                wire,
                inline: context.inline,
                waker: context.waker,
            }),
        }
    }

    /// The socket's fd, for the poller's registration (never for I/O).
    pub fn fd(&self) -> RawFd {
        self.shared.wire.fd()
    }

    /// Reads what the socket holds, runs the protocol, frames what the streams wrote, writes
    /// what the socket takes; never blocks.
    pub fn advance(&self, now: Instant) -> Advance {
        let mut state = self.shared.lock();
        self.shared.needs_advance.store(false, Ordering::Release);
        state.detached_news = false;
        state.expire_detached(now);
        state.drive(true);
        if state.woken() {
            // The drive gave up with work left: the loop comes back.
            self.shared.needs_advance.store(true, Ordering::Release);
        }
        let mut advance = Advance {
            deadline: state.expire_detached(now),
            ..Advance::default()
        };
        if state.finished {
            // Nobody will serve them: they end here (CANCEL), no app runs for them.
            for id in std::mem::take(&mut state.opened) {
                state.detach(id);
            }
        }
        advance.opened = state
            .opened
            .drain(..)
            .map(|id| Box::new(H2Stream::new(Arc::clone(&self.shared), id)))
            .collect();
        state.take_ready(&mut advance.ready);
        advance.finished = state.finished;
        advance.wants_write = !state.finished
            && state
                .report
                .write_blocked
                .load(std::sync::atomic::Ordering::Relaxed);
        if state.waiter_ready() {
            self.shared.cond.notify_all();
        }
        advance
    }

    /// Begins a graceful close (drain, HUP, USR2, stop): GOAWAY with the last stream id
    /// 2^31-1 and a PING, then, when the PING's answer comes (or at once if the connection
    /// was idle), GOAWAY with the real last stream id; the streams already open finish.
    /// Effective at the next [`H2Conn::advance`].
    pub fn close_gracefully(&self) {
        let mut state = self.shared.lock();
        state.close_gracefully();
        self.shared.needs_advance.store(false, Ordering::Release);
        self.shared.settle(&mut state, false);
    }

    /// Closes a connection idle past `keepalive_timeout`: GOAWAY NO_ERROR with the last
    /// stream id processed, then, as the socket takes it, the end (what the client sent is
    /// read first, so the close is a FIN). Effective at the next [`H2Conn::advance`].
    pub fn close_idle(&self) {
        self.shared.lock().close_idle();
    }

    /// Streams open (dispatched, reading their body, or writing their response).
    pub fn open_streams(&self) -> usize {
        self.shared.lock().streams.len()
    }

    /// True when a slot's thread left work for the loop since the last advance (the loop
    /// advances such connections when its waker fires).
    pub fn needs_advance(&self) -> bool {
        self.shared.needs_advance.load(Ordering::Acquire)
    }
}

impl Drop for H2Conn {
    fn drop(&mut self) {
        // The loop let go before the end (a drain's deadline, the worker's stop): the
        // streams' threads must not wait for a drive that will not come.
        let mut state = self.shared.lock();
        state.abandon();
        self.shared.cond.notify_all();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// After a stream's call changed the state: drives `h2` (writing only: the loop reads)
    /// when `drive` or a handle asked for it, wakes blocked threads whose stream became
    /// ready, and tells the loop (its waker) about work left for it.
    fn settle(&self, state: &mut State, drive: bool) {
        if drive || state.woken() {
            state.drive(false);
        }
        if state.waiter_ready() {
            self.cond.notify_all();
        }
        if (state.left_for_loop() || state.graceful_owed())
            && !self.needs_advance.swap(true, Ordering::AcqRel)
        {
            if let Some(fd) = self.waker {
                let one = 1u64.to_ne_bytes();
                // SAFETY: eight readable bytes for the duration of the call; the eventfd
                // outlives the worker's connections. A full counter only means a wake-up
                // is pending already.
                unsafe { libc::write(fd, one.as_ptr().cast(), one.len()) };
            }
        }
    }
}

#[cfg(test)]
mod tests;
