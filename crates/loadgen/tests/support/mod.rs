//! A tiny HTTP/1.1 test server on 127.0.0.1 with the special behaviours the
//! load generator's tests need, and a count of the responses it completed
//! (`tls`: the same over TLS).

#![allow(dead_code)]

pub mod tls;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How the server answers.
#[derive(Clone, Copy, Debug)]
pub enum Mode {
    /// `200 OK` with body `OK` (chunked on `/chunked`, 500 on `/500`, a 302
    /// redirect to `/` on `/302`).
    Normal,
    /// Reads the request, then resets the connection (RST).
    Reset,
    /// Reads the request and never answers.
    Stall,
    /// Like Normal, but every `period` it answers nothing for `stall`,
    /// starting `offset` after the server starts.
    PeriodicStall {
        period: Duration,
        stall: Duration,
        offset: Duration,
    },
}

/// A running test server.
pub struct TestServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Responses written completely.
    pub responses: Arc<AtomicU64>,
}

impl TestServer {
    /// The URL of `path` on this server.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Responses written so far (and any being written now).
    pub fn count(&self) -> u64 {
        self.responses.load(Ordering::SeqCst)
    }
}

/// Starts a server (its threads live until the test process exits).
pub fn start(mode: Mode) -> TestServer {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let responses = Arc::new(AtomicU64::new(0));
    let counter = responses.clone();
    let started = Instant::now();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let counter = counter.clone();
            std::thread::spawn(move || serve(stream, mode, started, &counter));
        }
    });
    TestServer { addr, responses }
}

fn reset(stream: &TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid fd and a correctly sized linger struct.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

fn serve(mut stream: TcpStream, mode: Mode, started: Instant, counter: &AtomicU64) {
    let _ = stream.set_nodelay(true);
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        // One request head (the tests send no bodies).
        let end = loop {
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        buf.drain(..end);
        let close = head.contains("\r\nconnection: close");
        let path = head.split(' ').nth(1).unwrap_or("/").to_string();
        match mode {
            Mode::Reset => {
                reset(&stream);
                return;
            }
            Mode::Stall => {
                // Wait for the client to give up.
                while let Ok(n) = stream.read(&mut chunk) {
                    if n == 0 {
                        return;
                    }
                }
                return;
            }
            Mode::PeriodicStall {
                period,
                stall,
                offset,
            } => {
                let since = started.elapsed();
                if since >= offset {
                    let phase = Duration::from_nanos(
                        ((since - offset).as_nanos() % period.as_nanos()) as u64,
                    );
                    if phase < stall {
                        std::thread::sleep(stall - phase);
                    }
                }
            }
            Mode::Normal => {}
        }
        let connection = if close { "Connection: close\r\n" } else { "" };
        let response = match path.as_str() {
            "/chunked" => format!("HTTP/1.1 200 OK\r\n{connection}Transfer-Encoding: chunked\r\n\r\n1\r\nO\r\n1;x=y\r\nK\r\n0\r\n\r\n"),
            "/500" => format!("HTTP/1.1 500 Internal Server Error\r\n{connection}Content-Length: 3\r\n\r\nbad"),
            "/302" => format!("HTTP/1.1 302 Found\r\n{connection}Location: /\r\nContent-Length: 0\r\n\r\n"),
            _ => format!("HTTP/1.1 200 OK\r\n{connection}Content-Length: 2\r\n\r\nOK"),
        };
        // Counted before it is written: once written, the client may finish its run and the
        // test read the count before this thread is scheduled again.
        counter.fetch_add(1, Ordering::SeqCst);
        if stream.write_all(response.as_bytes()).is_err() {
            counter.fetch_sub(1, Ordering::SeqCst);
            return;
        }
        if close {
            return;
        }
    }
}

/// Runs `tines bench` in-process with these flags; the outcome and its JSON.
pub fn bench(flags: &[&str]) -> (loadgen::Outcome, serde_json::Value) {
    use clap::Parser;
    let args =
        loadgen::Args::try_parse_from(std::iter::once("tines-bench").chain(flags.iter().copied()))
            .expect("valid flags");
    let config = loadgen::Config::from_args(&args).expect("valid config");
    let outcome = loadgen::execute(&config, false);
    let json = loadgen::report::json(&config, &outcome);
    (outcome, json)
}
