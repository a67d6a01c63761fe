//! The worker's settings, as the Rust core sees them: one typed value built once per worker
//! from the settings registry (Python `tines.config`), never restated per MPM.

use std::time::Duration;

use tines_proto::Limits;

use crate::trusted_proxies::TrustedProxies;

/// Which multi-processing module a worker runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mpm {
    /// One thread per process; the app runs inline on the poller thread.
    Prefork,
    /// The same machine as `Event` (ADR 0010), under the name gunicorn's `gthread` users know;
    /// it always runs at least one app thread (`threads = 0` counts as 1).
    Thread,
    /// One loop thread owns every socket (reading bodies and finishing writes, as every MPM's
    /// poller does), with a batched hand-off, a `SCHED_BATCH` loop and 503 admission;
    /// `threads` app threads only run the app (0: the app runs on the loop thread).
    Event,
}

impl Mpm {
    /// Parses the registry value.
    pub fn parse(name: &str) -> Option<Mpm> {
        match name {
            "prefork" => Some(Mpm::Prefork),
            "thread" => Some(Mpm::Thread),
            "event" => Some(Mpm::Event),
            _ => None,
        }
    }
}

/// Everything the worker runtime needs to know; see docs/settings.md for each meaning.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// The MPM to run.
    pub mpm: Mpm,
    /// App threads per process (thread and event MPMs; 0 with event: the app runs on the loop;
    /// thread runs at least 1).
    pub threads: usize,
    /// `forwarded_allow_ips`: peers whose `X-Forwarded-*` headers are believed (the client
    /// address the environ, the access log and the status output show).
    pub trusted_proxies: TrustedProxies,
    /// `proxy_protocol`: every connection begins with a PROXY protocol header (v1 or v2),
    /// accepted from `trusted_proxies` only; its source address becomes the peer.
    pub proxy_protocol: bool,
    /// TLS (ADR 0030): the config every TLS listener's handshakes use, built by the worker
    /// from the material the master loaded and checked (`certfile` and the TLS settings);
    /// `None`: no TLS listener.
    pub tls: Option<std::sync::Arc<crate::tls::rustls::ServerConfig>>,
    /// Most connections one worker holds open; above it the worker stops accepting until one
    /// closes (every MPM).
    pub max_connections: usize,
    /// Thread and event MPMs: requests waiting for an app thread beyond which a new request
    /// gets 503 with `Retry-After` at once (idle connections never count).
    pub max_queued_requests: usize,
    /// ASGI (ADR 0014): requests one worker's event loop serves at once, beyond which a new
    /// request gets 503 with `Retry-After` at once; 0 means no limit.
    pub max_concurrency: usize,
    /// ASGI: WebSockets one worker holds at once (handshakes the app has not answered
    /// included); beyond it a new handshake gets 503 with `Retry-After`. Below
    /// `max_connections` (the registry checks), so a worker full of WebSockets still answers.
    pub ws_max_connections: usize,
    /// WebSocket: the largest message (after inflation) a client may send; beyond it the
    /// connection closes with 1009.
    pub ws_max_message_size: u64,
    /// WebSocket: memory one worker holds at most for messages being gathered and messages
    /// the app has not received; beyond it reading waits.
    pub ws_receive_buffer_total: u64,
    /// WebSocket: how long a connection may wait for room in `ws_receive_buffer_total`
    /// before it is closed with 1013.
    pub ws_receive_buffer_timeout: Duration,
    /// WebSocket: a connection without a data message either way this long is closed (1001;
    /// zero: never).
    pub ws_idle_timeout: Duration,
    /// WebSocket: permessage-deflate is accepted when a client offers it.
    pub ws_per_message_deflate: bool,
    /// WebSocket: the largest deflate window the server compresses with (8 to 15).
    pub ws_server_max_window_bits: u8,
    /// WebSocket: a connection silent this long gets a ping (zero: never).
    pub ws_ping_interval: Duration,
    /// WebSocket: a ping unanswered this long closes the connection (1011).
    pub ws_ping_timeout: Duration,
    /// Response bytes of a body the app is still producing that a slot may leave for the
    /// poller to write (a slow reader then holds no slot); beyond it the slot waits for the
    /// client. Complete bodies are bounded by `response_buffer_total` instead.
    pub max_response_buffer: usize,
    /// Response bytes of a streamed WSGI body (a generator, `write()`) that may wait for a
    /// slow reader in all: in memory up to `max_response_buffer`, then in a temporary file
    /// within `buffer_disk_total` (ADR 0024); beyond it the slot waits for the client.
    pub max_stream_buffer: u64,
    /// The longest a small, complete response waits for the rest of its slot's batch before it
    /// is written (ADR 0011); zero writes each response at once.
    pub response_batch_delay: Duration,
    /// Request bodies are read before dispatch (every MPM); one up to this size is held in
    /// memory, a larger one goes to a temporary file in `request_buffer_dir`.
    pub request_buffer_memory: u64,
    /// Memory one worker holds at most for request bodies read before dispatch, together;
    /// beyond it bodies spill to temporary files.
    pub request_buffer_total: u64,
    /// Directory of the (unlinked, `O_TMPFILE`) temporary files of request bodies and
    /// response output too large for memory.
    pub request_buffer_dir: std::path::PathBuf,
    /// Bytes of temporary files one worker holds at most (request bodies and response output
    /// together); beyond it a new body waits unread and a response waits on its slot.
    pub buffer_disk_total: u64,
    /// Path prefixes whose request bodies stream through the app instead of being read
    /// before dispatch (not slow-client safe).
    pub stream_body_paths: Vec<Vec<u8>>,
    /// Memory one worker holds at most for response output handed to the poller, together;
    /// beyond it complete bodies spill to temporary files.
    pub response_buffer_total: u64,
    /// Idle time allowed between requests on a keep-alive connection (zero disables keep-alive).
    pub keepalive_timeout: Duration,
    /// How long a stopping worker keeps an idle keep-alive connection for its next request
    /// (answered with `Connection: close`) before closing it (`drain_timeout`; the registry
    /// defaults it to `keepalive_timeout`). Never longer than the connection's keep-alive.
    pub drain_timeout: Duration,
    /// Requests per connection before it is closed (0 = unlimited).
    pub max_keepalive_requests: u32,
    /// Time allowed for a request head to arrive, before extensions.
    pub header_timeout: Duration,
    /// The most `header_timeout` is extended to for a client that keeps sending.
    pub header_timeout_max: Duration,
    /// Head bytes per second that earn one more second (0: no extension).
    pub header_min_rate: u64,
    /// Time allowed for the request body, before extensions (with `body_min_rate` 0: the
    /// longest wait for the next bytes).
    pub body_timeout: Duration,
    /// Body bytes per second that earn one more second (0: `body_timeout` is per wait).
    pub body_min_rate: u64,
    /// Longest wait for a client to accept response bytes.
    pub send_timeout: Duration,
    /// How long a lingering close waits at most (see `reactor::linger`).
    pub linger_timeout: Duration,
    /// Request-head size limits.
    pub limits: Limits,
    /// Largest request body accepted (0 = no limit): 413 beyond it.
    pub max_body_size: u64,
    /// Unread request-body bytes drained after a response to keep the connection (else closed).
    pub max_body_drain: u64,
    /// Value of the `Server` header (empty: omitted).
    pub server_header: Vec<u8>,
    /// The path the app is mounted under (`root_path`: ASGI's `root_path`, WSGI's
    /// `SCRIPT_NAME`); empty for none. Validated by the registry: `""`, or `/...` without a
    /// trailing `/`.
    pub root_path: String,
    /// Access log destination: `None` off, `Some("-")` stdout, else a file path.
    pub access_log: Option<String>,
    /// The error log's file, reopened onto fd 2 on `USR1` as the master reopens its own
    /// (`None`: stderr, `-`, left as it is).
    pub error_log: Option<String>,
    /// How access-log lines are laid out (`access_log_format`).
    pub access_log_format: crate::access_log::Format,
    /// Paths not access-logged: exact, or a prefix when ending with `*` (`access_log_exclude`).
    pub access_log_exclude: Vec<Vec<u8>>,
    /// Requests before the worker recycles itself (0 = never).
    pub max_requests: u64,
    /// Random extra requests added to `max_requests`, so workers do not recycle together.
    pub max_requests_jitter: u64,
    /// Worker processes sharing the listeners (accept fairness matters only when > 1).
    pub workers: usize,
    /// True when debug logging is on (the Rust side logs per-connection faults at debug).
    pub debug: bool,
    /// HTTP/2 (ADR 0034, 0035): the settings advertised and the flood limits.
    pub h2: H2Config,
    /// Static files (ADR 0036): the mounts served from Rust and their rules.
    pub statics: StaticConfig,
    /// Per-client rate limits and the connection cap (ADR 0038, docs/rate-limits.md).
    pub rate_limit: RateLimitConfig,
    /// Response compression (ADR 0037): the codings offered, for which responses, levels.
    pub compression: CompressionConfig,
}

/// HTTP/2's settings, declared beside the connection they configure (below `transport`).
pub use crate::h2::H2Config;

/// Response compression's settings, declared beside the encoders they configure.
pub use crate::compress::CompressionConfig;
/// The rate limits' settings, declared beside the table they apply (below `config`).
pub use crate::rate_limit::RateLimitConfig;
/// The static file settings, declared beside the mounts they open (below `config`).
pub use crate::static_mounts::StaticConfig;

impl WorkerConfig {
    /// The worker serves on one thread (prefork, event without app threads): its counters and
    /// budgets are touched by one thread at a time, the loop or, while the loop is inside the
    /// app, a thread of the app's that the request is lent to (the GIL's hand-overs order
    /// them; ADR 0015), so they need no locked instructions.
    pub fn serves_on_one_thread(&self) -> bool {
        match self.mpm {
            Mpm::Prefork => true,
            Mpm::Event => self.threads == 0,
            Mpm::Thread => false,
        }
    }

    /// The header deadline for a head that started at `started` and has `received` bytes so
    /// far: `header_timeout`, plus a second per `header_min_rate` bytes, at most
    /// `header_timeout_max` (mod_reqtimeout's `header=20-40,MinRate=500`).
    pub fn header_deadline(
        &self,
        started: std::time::Instant,
        received: usize,
    ) -> std::time::Instant {
        started
            + extended(self.header_timeout, self.header_min_rate, received as u64)
                .min(self.header_timeout_max.max(self.header_timeout))
    }

    /// The body deadline for a body whose reading started at `started` with `received` bytes
    /// read so far; `None` when the body timeout is a per-wait idle timeout.
    pub fn body_deadline(
        &self,
        started: std::time::Instant,
        received: u64,
    ) -> Option<std::time::Instant> {
        (self.body_min_rate > 0)
            .then(|| started + extended(self.body_timeout, self.body_min_rate, received))
    }
}

/// `base` plus one second per `rate` bytes of `received` (none when `rate` is 0).
fn extended(base: Duration, rate: u64, received: u64) -> Duration {
    if rate == 0 {
        return base;
    }
    base + Duration::from_secs_f64(received as f64 / rate as f64)
}

/// The registry's defaults (`tines.config`), for the server's own tests and fuzz targets (a
/// worker always gets its config from the registry): restated here, and held to the registry
/// field by field by tests/python/unit/test_worker_defaults.py, through the same conversion
/// a worker's settings go through (`worker_config_fields` in crates/python). `workers`, whose
/// registry default depends on the machine's CPUs, is 1.
impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            mpm: Mpm::Prefork,
            threads: 1,
            trusted_proxies: TrustedProxies::parse(&["127.0.0.1".to_owned(), "::1".to_owned()])
                .expect("two valid addresses"),
            proxy_protocol: false,
            tls: None,
            max_connections: 10_000,
            max_queued_requests: 1024,
            max_concurrency: 1024,
            ws_max_connections: 9_000,
            ws_max_message_size: 16 * 1024 * 1024,
            ws_receive_buffer_total: 64 * 1024 * 1024,
            ws_receive_buffer_timeout: Duration::from_secs(30),
            ws_idle_timeout: Duration::ZERO,
            ws_per_message_deflate: true,
            ws_server_max_window_bits: 15,
            ws_ping_interval: Duration::from_secs(20),
            ws_ping_timeout: Duration::from_secs(20),
            max_response_buffer: 1024 * 1024,
            max_stream_buffer: 16 * 1024 * 1024,
            response_batch_delay: Duration::from_millis(1),
            request_buffer_memory: 256 * 1024,
            request_buffer_total: 32 * 1024 * 1024,
            request_buffer_dir: std::env::temp_dir(),
            buffer_disk_total: 1024 * 1024 * 1024,
            stream_body_paths: Vec::new(),
            response_buffer_total: 64 * 1024 * 1024,
            keepalive_timeout: Duration::from_secs(5),
            drain_timeout: Duration::from_secs(5),
            max_keepalive_requests: 1000,
            header_timeout: Duration::from_secs(20),
            header_timeout_max: Duration::from_secs(40),
            header_min_rate: 500,
            body_timeout: Duration::from_secs(30),
            body_min_rate: 500,
            send_timeout: Duration::from_secs(30),
            linger_timeout: Duration::from_secs(2),
            limits: Limits::default(),
            max_body_size: 100 * 1024 * 1024,
            max_body_drain: 64 * 1024,
            server_header: b"tines".to_vec(),
            root_path: String::new(),
            access_log: None,
            error_log: None,
            access_log_format: Default::default(),
            access_log_exclude: Vec::new(),
            max_requests: 0,
            max_requests_jitter: 0,
            workers: 1,
            debug: false,
            h2: H2Config::default(),
            statics: StaticConfig::default(),
            rate_limit: RateLimitConfig::default(),
            compression: CompressionConfig::default(),
        }
    }
}
