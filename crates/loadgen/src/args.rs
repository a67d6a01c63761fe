//! Command-line flags (clap) and their validation into a `Config`.
//!
//! Owns: the flag names and defaults (wrk/ab habits), duration parsing, and
//! every check that turns a bad value into a one-line usage error (exit 2).
//! Must not: open sockets (name resolution happens in `target`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use rustls::pki_types::ServerName;
use rustls::ClientConfig;

use crate::target::{self, H2Request, Target};
use crate::tls;
use crate::UsageError;

/// Flags of `tines bench` / `tines-bench`.
#[derive(Parser, Debug, Clone)]
#[command(
    about = "HTTP/1.1 and HTTP/2 load generator: closed loop (-c/-n/-d) or open loop (-R), latency from HDR histograms.",
    long_about = "HTTP/1.1 and HTTP/2 load generator in the class of wrk, wrk2, ab and h2load.\n\n\
        Closed loop (default): -c connections each keep --pipeline requests (HTTP/2: --streams \
        streams) in flight, for -n requests or -d seconds. Open loop (-R RATE): requests are sent on a fixed schedule and \
        latency is measured from each request's intended send time, so a stalled server cannot \
        hide behind coordinated omission. Results: a text summary, --json, --html.",
    after_help = "Durations take a unit: 500ms, 10s, 2m, 1h (a bare number is seconds).\n\
        Exit status: 0 when at least one request got a 2xx/3xx answer, 1 when none did (every \
        request failed, the reason is printed), 2 for a usage error.",
    disable_version_flag = true
)]
pub struct Args {
    /// URLs to request, round-robin: http:// or https://, or ws:// (wss://) for a WebSocket
    /// echo load (each connection opens with a handshake; each request is a --ws-message text
    /// message, each response the server's next message).
    #[arg(value_name = "URL")]
    pub urls: Vec<String>,

    /// Connections to keep open (closed loop) or to send the scheduled requests over (open loop).
    #[arg(
        short = 'c',
        long = "connections",
        value_name = "N",
        default_value_t = 10
    )]
    pub connections: usize,

    /// Total requests to send, then stop (default: run for --duration).
    #[arg(short = 'n', long = "requests", value_name = "N")]
    pub requests: Option<u64>,

    /// How long to run after the warm-up (default 10s unless -n is given).
    #[arg(short = 'd', long = "duration", value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,

    /// Threads, each with its own event loop over its share of the connections (default: cores).
    #[arg(short = 't', long = "threads", value_name = "N")]
    pub threads: Option<usize>,

    /// Open loop: requests per second on a fixed schedule (latency from the intended send time).
    #[arg(short = 'R', long = "rate", value_name = "PER_SECOND")]
    pub rate: Option<f64>,

    /// Open a new connection for every request and send `Connection: close`.
    #[arg(long = "no-keepalive")]
    pub no_keepalive: bool,

    /// For `ws://` URLs: the text message each request sends; the server's next message
    /// (its echo) is the response
    #[arg(long = "ws-message", value_name = "TEXT", default_value = "hello")]
    pub ws_message: String,

    /// Requests in flight per connection (HTTP/1.1 pipelining).
    #[arg(long = "pipeline", value_name = "N", default_value_t = 1)]
    pub pipeline: usize,

    /// HTTP/2: on https:// URLs negotiated by ALPN (h2, else the run fails with a TLS error),
    /// on http:// URLs with prior knowledge (h2c: the connection opens with the preface).
    #[arg(long = "http2")]
    pub http2: bool,

    /// HTTP/2 with prior knowledge on http:// URLs (h2c); the same as --http2 with
    /// http:// URLs only.
    #[arg(long = "h2c")]
    pub h2c: bool,

    /// HTTP/2: streams in flight per connection (-c stays the number of connections); the
    /// server's SETTINGS_MAX_CONCURRENT_STREAMS caps it.
    #[arg(long = "streams", value_name = "N", default_value_t = 1)]
    pub streams: usize,

    /// Request method.
    #[arg(
        short = 'm',
        long = "method",
        value_name = "METHOD",
        default_value = "GET"
    )]
    pub method: String,

    /// Extra request header, `Name: value` (repeatable).
    #[arg(short = 'H', long = "header", value_name = "HEADER")]
    pub headers: Vec<String>,

    /// Request body (sets Content-Length).
    #[arg(long = "body", value_name = "TEXT", conflicts_with = "body_file")]
    pub body: Option<String>,

    /// Request body read from a file.
    #[arg(long = "body-file", value_name = "PATH")]
    pub body_file: Option<PathBuf>,

    /// File of requests, one per line: `URL` or `METHOD URL`; blank lines and `#` comments skipped.
    #[arg(long = "requests-file", value_name = "PATH")]
    pub requests_file: Option<PathBuf>,

    /// Per-request timeout: past it the request is a timeout error and its connection is reopened.
    #[arg(long = "timeout", value_name = "DURATION", value_parser = parse_duration, default_value = "10s")]
    pub timeout: Duration,

    /// Connect timeout (a connect error past it).
    #[arg(long = "connect-timeout", value_name = "DURATION", value_parser = parse_duration, default_value = "5s")]
    pub connect_timeout: Duration,

    /// Run this long before measuring; responses completing in it are left out of every figure.
    #[arg(long = "warmup", value_name = "DURATION", value_parser = parse_duration, default_value = "0s")]
    pub warmup: Duration,

    /// https:// and wss://: accept any server certificate (self-signed, another name); the
    /// handshake's signatures are still checked.
    #[arg(short = 'k', long = "insecure", conflicts_with = "cacert")]
    pub insecure: bool,

    /// https:// and wss://: trust the CA certificates of this PEM file instead of the
    /// system's bundle.
    #[arg(long = "cacert", value_name = "FILE")]
    pub cacert: Option<PathBuf>,

    /// https:// and wss://: no session resumption (no session cache, no tickets): every new
    /// connection makes a full handshake.
    #[arg(long = "no-resumption")]
    pub no_resumption: bool,

    /// Print one JSON document (schema in docs/bench.md) instead of the text summary.
    #[arg(long = "json")]
    pub json: bool,

    /// Also write a self-contained HTML report with plots to this file.
    #[arg(long = "html", value_name = "PATH")]
    pub html: Option<PathBuf>,

    /// Print the version and exit.
    #[arg(short = 'V', long = "version")]
    pub version: bool,
}

/// Parses `500ms`, `10s`, `2m`, `1h`, `1.5s`; a bare number is seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("invalid duration '{text}' (use e.g. 500ms, 10s, 2m)"))?;
    let scale = match unit {
        "" | "s" => 1.0,
        "ms" => 1e-3,
        "us" => 1e-6,
        "m" => 60.0,
        "h" => 3600.0,
        _ => {
            return Err(format!(
                "invalid duration unit in '{text}' (use ms, s, m or h)"
            ))
        }
    };
    let seconds = value * scale;
    if !seconds.is_finite() || seconds > 1e9 {
        return Err(format!("duration '{text}' is out of range"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// One kind of request: the bytes sent (pre-encoded once) and where.
#[derive(Debug, Clone)]
pub struct RequestSpec {
    /// The URL as given.
    pub url: String,
    /// Where to connect.
    pub target: Target,
    /// The whole request, head and body.
    pub bytes: Vec<u8>,
    /// HEAD request (no response body).
    pub is_head: bool,
    /// A `ws://` URL: the handshake that opens each connection (`bytes` is then a message).
    pub handshake: Option<Vec<u8>>,
    /// An `https://` or `wss://` URL: the server name its handshakes send and check.
    pub server_name: Option<ServerName<'static>>,
    /// An HTTP/2 run: the request as each stream sends it (`bytes` is then unused).
    pub h2: Option<H2Request>,
}

/// How an HTTP/2 run reaches its URLs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http2 {
    /// Some URLs are `https://` (h2 by ALPN).
    pub tls: bool,
    /// Some URLs are `http://` (h2c with prior knowledge).
    pub cleartext: bool,
}

impl Http2 {
    /// `h2`, `h2c`, or both, as reports name the run's protocol.
    pub fn label(self) -> &'static str {
        match (self.tls, self.cleartext) {
            (true, true) => "h2 and h2c",
            (true, false) => "h2",
            _ => "h2c",
        }
    }
}

/// A validated run configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Requests, used round-robin.
    pub requests_specs: Vec<RequestSpec>,
    /// Connections.
    pub connections: usize,
    /// Threads (at most `connections`).
    pub threads: usize,
    /// Stop after this many requests.
    pub requests: Option<u64>,
    /// Stop after this long (after warm-up).
    pub duration: Option<Duration>,
    /// Open-loop rate.
    pub rate: Option<f64>,
    /// Keep connections open.
    pub keepalive: bool,
    /// Requests in flight per connection.
    pub pipeline: usize,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// Warm-up before measuring.
    pub warmup: Duration,
    /// The TLS client configuration, when a URL is `https://` or `wss://`.
    pub tls: Option<Arc<ClientConfig>>,
    /// An HTTP/2 run (`--http2`, `--h2c`).
    pub http2: Option<Http2>,
    /// HTTP/2 streams in flight per connection.
    pub streams: usize,
}

impl Config {
    /// Validates the flags, reads files, resolves hosts and encodes the requests.
    pub fn from_args(args: &Args) -> Result<Config, UsageError> {
        let usage = |m: String| UsageError(m);
        if args.connections == 0 {
            return Err(usage("--connections must be at least 1".into()));
        }
        if args.pipeline == 0 {
            return Err(usage("--pipeline must be at least 1".into()));
        }
        let http2 = args.http2 || args.h2c;
        if args.streams == 0 {
            return Err(usage("--streams must be at least 1".into()));
        }
        if args.streams > 1 && !http2 {
            return Err(usage(
                "--streams is for HTTP/2 (add --http2 or --h2c; HTTP/1.1 has --pipeline)".into(),
            ));
        }
        if http2 && args.pipeline > 1 {
            return Err(usage(
                "--pipeline is HTTP/1.1's (HTTP/2 keeps --streams in flight)".into(),
            ));
        }
        if http2 && args.no_keepalive {
            return Err(usage(
                "an HTTP/2 connection carries many requests (drop --no-keepalive)".into(),
            ));
        }
        if args.no_keepalive && args.pipeline > 1 {
            return Err(usage(
                "--pipeline needs keep-alive (drop --no-keepalive)".into(),
            ));
        }
        if args.threads == Some(0) {
            return Err(usage("--threads must be at least 1".into()));
        }
        if args.requests == Some(0) {
            return Err(usage("--requests must be at least 1".into()));
        }
        if let Some(rate) = args.rate {
            if !(rate.is_finite() && rate > 0.0) {
                return Err(usage(format!(
                    "--rate must be a positive number, got {rate}"
                )));
            }
        }
        if args.duration == Some(Duration::ZERO) {
            return Err(usage("--duration must be more than 0".into()));
        }
        if args.timeout.is_zero() || args.connect_timeout.is_zero() {
            return Err(usage(
                "--timeout and --connect-timeout must be more than 0".into(),
            ));
        }
        let method = args.method.to_ascii_uppercase();
        if method.is_empty()
            || !method
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
        {
            return Err(usage(format!("invalid method '{}'", args.method)));
        }
        let mut headers = Vec::new();
        for header in &args.headers {
            let (name, value) = header
                .split_once(':')
                .ok_or_else(|| usage(format!("invalid header '{header}' (want 'Name: value')")))?;
            let name = name.trim();
            let value = value.trim();
            let name_ok = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !name_ok || value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                return Err(usage(format!(
                    "invalid header '{header}' (want 'Name: value')"
                )));
            }
            headers.push((name.to_string(), value.to_string()));
        }
        let body: Option<Vec<u8>> =
            match (&args.body, &args.body_file) {
                (Some(text), _) => Some(text.clone().into_bytes()),
                (None, Some(path)) => Some(std::fs::read(path).map_err(|e| {
                    usage(format!("cannot read --body-file {}: {e}", path.display()))
                })?),
                (None, None) => None,
            };

        let mut lines: Vec<(String, String)> = args
            .urls
            .iter()
            .map(|u| (method.clone(), u.clone()))
            .collect();
        if let Some(path) = &args.requests_file {
            let text = std::fs::read_to_string(path).map_err(|e| {
                usage(format!(
                    "cannot read --requests-file {}: {e}",
                    path.display()
                ))
            })?;
            for (number, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let mut words = line.split_whitespace();
                let first = words.next().unwrap_or_default();
                let (line_method, url) = match words.next() {
                    Some(url) => (first.to_ascii_uppercase(), url),
                    None => (method.clone(), first),
                };
                if words.next().is_some() {
                    return Err(usage(format!(
                        "{}:{}: want 'URL' or 'METHOD URL'",
                        path.display(),
                        number + 1
                    )));
                }
                lines.push((line_method, url.to_string()));
            }
        }
        if lines.is_empty() {
            return Err(usage(
                "no URL given (tines bench URL [URL...] or --requests-file FILE)".into(),
            ));
        }
        let mut specs = Vec::with_capacity(lines.len());
        for (line_method, url) in lines {
            let target = target::parse_url(&url).map_err(UsageError)?;
            let server_name = if target.tls {
                Some(tls::server_name(&target.host).map_err(UsageError)?)
            } else {
                None
            };
            if target.websocket && http2 {
                return Err(usage(format!(
                    "{url}: WebSocket runs over HTTP/1.1 (drop --http2/--h2c)"
                )));
            }
            if args.h2c && target.tls {
                return Err(usage(format!(
                    "{url}: --h2c is HTTP/2 in cleartext; an https:// URL takes --http2 (h2 by ALPN)"
                )));
            }
            if target.websocket {
                if args.no_keepalive {
                    return Err(usage(format!(
                        "{url}: a WebSocket stays open (drop --no-keepalive)"
                    )));
                }
                let handshake = target::encode_handshake(&target);
                specs.push(RequestSpec {
                    url,
                    bytes: target::encode_text_frame(args.ws_message.as_bytes()),
                    target,
                    is_head: false,
                    handshake: Some(handshake),
                    server_name,
                    h2: None,
                });
                continue;
            }
            let h2 = if http2 {
                Some(
                    target::h2_request(&line_method, &target, &headers, body.as_deref())
                        .map_err(|m| usage(format!("{url}: {m}")))?,
                )
            } else {
                None
            };
            let bytes = target::encode_request(
                &line_method,
                &target,
                &headers,
                body.as_deref(),
                !args.no_keepalive,
            );
            specs.push(RequestSpec {
                url,
                target,
                bytes,
                is_head: line_method == "HEAD",
                handshake: None,
                server_name,
                h2,
            });
        }
        // Resolve each distinct host once, now, so a bad name is a usage error.
        for index in 0..specs.len() {
            let earlier = specs[..index]
                .iter()
                .find(|s| {
                    s.target.host == specs[index].target.host
                        && s.target.port == specs[index].target.port
                })
                .map(|s| s.target.addr);
            specs[index].target.addr = match earlier {
                Some(addr) => addr,
                None => target::resolve(&specs[index].target).map_err(UsageError)?,
            };
        }
        let tls = if specs.iter().any(|s| s.target.tls) {
            let trust = match (&args.cacert, args.insecure) {
                (Some(path), _) => tls::Trust::File(path),
                (None, true) => tls::Trust::Any,
                (None, false) => tls::Trust::System,
            };
            Some(tls::client_config(trust, !args.no_resumption, http2).map_err(UsageError)?)
        } else {
            None
        };
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        let threads = args.threads.unwrap_or(cores).min(args.connections);
        let duration = match (args.duration, args.requests) {
            (None, None) => Some(Duration::from_secs(10)),
            (d, _) => d,
        };
        Ok(Config {
            connections: args.connections,
            threads,
            requests: args.requests,
            duration,
            rate: args.rate,
            keepalive: !args.no_keepalive,
            pipeline: args.pipeline,
            timeout: args.timeout,
            connect_timeout: args.connect_timeout,
            warmup: args.warmup,
            http2: http2.then(|| Http2 {
                tls: tls.is_some(),
                cleartext: specs.iter().any(|s| !s.target.tls),
            }),
            streams: args.streams,
            tls,
            requests_specs: specs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("10x").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("-1s").is_err());
    }
}
