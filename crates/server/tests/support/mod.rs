//! A test harness: runs a real worker (`run_worker`) on a thread, on a real loopback socket,
//! and stops it by closing the life pipe (as if the master went away).

#![allow(dead_code, missing_docs)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tines_server::listener::H2c;
use tines_server::worker::ReadyHook;
use tines_server::{
    run_worker, App, Exchange, Mpm, Scoreboard, StopReason, WorkerConfig, WorkerSpec,
};

pub struct TestServer {
    pub addr: SocketAddr,
    pub scoreboard: Arc<Scoreboard>,
    life: Option<OwnedFd>,
    handle: Option<JoinHandle<std::io::Result<StopReason>>>,
}

pub fn test_config(mpm: Mpm) -> WorkerConfig {
    WorkerConfig {
        mpm,
        threads: 2,
        keepalive_timeout: Duration::from_secs(2),
        header_timeout: Duration::from_secs(2),
        body_timeout: Duration::from_secs(2),
        send_timeout: Duration::from_secs(2),
        ..WorkerConfig::default()
    }
}

impl TestServer {
    pub fn start(config: WorkerConfig, app: impl App) -> TestServer {
        TestServer::start_with_ready_hook(config, app, None)
    }

    /// `start`, with `on_ready` handed to the worker (`WorkerSpec::on_ready`).
    pub fn start_with_ready_hook(
        config: WorkerConfig,
        app: impl App,
        on_ready: Option<ReadyHook>,
    ) -> TestServer {
        TestServer::start_speaking(config, app, on_ready, H2c::Off)
    }

    /// `start`, its listener speaking cleartext HTTP/2 as `h2c` says (`h2c:`, `http1+h2c:`).
    pub fn start_h2c(config: WorkerConfig, app: impl App, h2c: H2c) -> TestServer {
        TestServer::start_speaking(config, app, None, h2c)
    }

    fn start_speaking(
        config: WorkerConfig,
        app: impl App,
        on_ready: Option<ReadyHook>,
        h2c: H2c,
    ) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let listener_fd = listener.into_raw_fd();
        let mut fds = [0; 2];
        // SAFETY: fds is a valid array for pipe2.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: fresh fds owned by nobody else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let scoreboard = Arc::new(Scoreboard::new(1, config.threads.max(1)).unwrap());
        scoreboard.claim(0, std::process::id(), 1);
        let spec = WorkerSpec {
            tls_listeners: vec![config.tls.is_some()],
            h2c_listeners: vec![h2c],
            config,
            listeners: vec![listener_fd], // the worker owns it from now on (closes it when it stops)
            scoreboard: Arc::clone(&scoreboard),
            slot: 0,
            life_fd: Some(read.into_raw_fd()),
            on_ready,
            on_draining: None,
            standby: None,
            rate_table: None,
            client_connections: None,
        };
        let app: Arc<dyn App> = Arc::new(app);
        let handle = std::thread::spawn(move || run_worker(app, spec));
        TestServer {
            addr,
            scoreboard,
            life: Some(write),
            handle: Some(handle),
        }
    }

    pub fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(self.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream
    }

    /// Waits for the worker to stop on its own (recycling), and returns why it stopped.
    pub fn wait(mut self) -> StopReason {
        self.handle.take().unwrap().join().unwrap().unwrap()
    }

    /// Closes the life pipe (the master "dies") without waiting for the worker.
    pub fn close_life_pipe(&mut self) {
        self.life.take();
    }

    /// Stops the worker the way a dead master would, and returns why it stopped.
    pub fn stop(mut self) -> StopReason {
        self.life.take();
        self.handle.take().unwrap().join().unwrap().unwrap()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.life.take();
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

/// Reads the request body to its end; `None` when reading failed (`exchange.fault()` says
/// why).
pub fn read_whole_body(exchange: &mut Exchange) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match exchange.read_body(&mut buf) {
            Ok(0) => return Some(body),
            Ok(n) => body.extend_from_slice(&buf[..n]),
            Err(_) => return None,
        }
    }
}

/// `METHOD TARGET\n`, then each header `name: value\n`, then `\n` and `body`.
pub fn describe_request(exchange: &Exchange, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(exchange.method());
    out.push(b' ');
    out.extend_from_slice(exchange.target());
    out.push(b'\n');
    for (name, value) in exchange.headers() {
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.push(b'\n');
    }
    out.push(b'\n');
    out.extend_from_slice(body);
    out
}

/// Echoes the request: `METHOD TARGET\n` then each header `name: value\n`, then `\n` and the body.
pub struct Echo;

impl App for Echo {
    fn serve(&self, mut exchange: Box<Exchange>) -> Box<Exchange> {
        let Some(body) = read_whole_body(&mut exchange) else {
            exchange.fail(400);
            return exchange;
        };
        let out = describe_request(&exchange, &body);
        let ct: [(&[u8], &[u8]); 1] = [(b"Content-Type", b"text/plain")];
        exchange
            .begin_response(b"200 OK", ct, Some(out.len() as u64))
            .unwrap();
        exchange.write_body(&out).unwrap();
        let _ = exchange.finish();
        exchange
    }
}

/// A parsed response: status, headers (lower-case names), body.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one response from `stream` (Content-Length, chunked, or until EOF), leaving any
/// following bytes in `pending`. `head_only` for responses to HEAD.
pub fn read_response(
    stream: &mut TcpStream,
    pending: &mut Vec<u8>,
    head_only: bool,
) -> Option<Response> {
    let mut buf = [0u8; 8192];
    let head_end = loop {
        if let Some(pos) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos + 4;
        }
        let n = stream.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        pending.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&pending[..head_end]).to_string();
    pending.drain(..head_end);
    let mut lines = head.split("\r\n");
    let status: u16 = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (n, v) = l.split_once(':').unwrap();
            (n.trim().to_ascii_lowercase(), v.trim().to_string())
        })
        .collect();
    let mut response = Response {
        status,
        headers,
        body: Vec::new(),
    };
    if head_only || status == 204 || status == 304 || status / 100 == 1 {
        return Some(response);
    }
    let mut fill = |pending: &mut Vec<u8>, want: usize| -> bool {
        while pending.len() < want {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => return false,
                Ok(n) => pending.extend_from_slice(&buf[..n]),
            }
        }
        true
    };
    if let Some(length) = response.header("content-length") {
        let length: usize = length.parse().ok()?;
        fill(pending, length);
        let take = length.min(pending.len());
        response.body = pending.drain(..take).collect();
    } else if response.header("transfer-encoding") == Some("chunked") {
        loop {
            while !pending.windows(2).any(|w| w == b"\r\n") {
                if !fill(pending, pending.len() + 1) {
                    return Some(response);
                }
            }
            let pos = pending.windows(2).position(|w| w == b"\r\n").unwrap();
            let size =
                usize::from_str_radix(std::str::from_utf8(&pending[..pos]).unwrap().trim(), 16)
                    .unwrap();
            pending.drain(..pos + 2);
            fill(pending, size + 2);
            if size == 0 {
                pending.drain(..2);
                break;
            }
            response.body.extend(pending.drain(..size));
            pending.drain(..2);
        }
    } else {
        loop {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => pending.extend_from_slice(&buf[..n]),
            }
        }
        response.body = std::mem::take(pending);
    }
    Some(response)
}

/// Sends `request` and reads one response.
pub fn exchange(stream: &mut TcpStream, request: &[u8]) -> Option<Response> {
    stream.write_all(request).unwrap();
    read_response(stream, &mut Vec::new(), request.starts_with(b"HEAD"))
}

/// True when the server closed the connection (EOF before any byte).
pub fn closed(stream: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(stream.read(&mut byte), Ok(0) | Err(_))
}
