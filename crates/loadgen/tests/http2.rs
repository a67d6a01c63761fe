//! `tines bench --h2c` and `--http2` against real HTTP/2 servers on 127.0.0.1: Granian and
//! Hypercorn (h2c with prior knowledge, and h2 over TLS by ALPN) and nginx (h2 over TLS, a
//! static 200 "OK"; its RST_STREAM and its GOAWAY after `keepalive_requests` streams).
//!
//! The Python peers come from PyPI into benches/.venv-peers (benches/provision.py, or
//! `make bench-h2`); nginx from Debian. A test whose peer is missing says so on stderr and
//! passes without running: the reason is printed, never hidden. Each server is started with
//! its output on a pipe and waited for by the line it prints once it listens (a readiness
//! signal, no sleep), and killed by its process group id when the test ends.

mod support;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use support::bench;
use support::tls::cert_path;

/// The peers' venv of the benchmarks.
fn peers_bin(name: &str) -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../benches/.venv-peers/bin")
        .join(name);
    path.exists().then_some(path)
}

fn nginx_bin() -> Option<PathBuf> {
    ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

fn skip(peer: &str, why: &str) {
    eprintln!("SKIPPED: {peer} is not installed ({why})");
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A server process in a process group of its own, killed with its workers (SIGKILL to the
/// group, whose id is the pid of the process the test started) and reaped when dropped.
struct Peer {
    child: Child,
    port: u16,
    _dir: Option<TempDir>,
}

impl Drop for Peer {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the group of a child this test started; no memory is involved.
        unsafe {
            libc::kill(-(self.child.id() as libc::pid_t), libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

/// A directory removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let path =
            std::env::temp_dir().join(format!("tines-bench-h2-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Where a peer prints the line that says it listens.
#[derive(Clone, Copy)]
enum Says {
    OnStdout,
    OnStderr,
}

/// Starts `command` with its output on a pipe, and returns once a line of it (on `says`)
/// contains `ready` (its lines are then drained by a thread, so it never blocks).
fn spawn(mut command: Command, port: u16, says: Says, ready: &str, dir: Option<TempDir>) -> Peer {
    match says {
        Says::OnStdout => command.stdout(Stdio::piped()).stderr(Stdio::null()),
        Says::OnStderr => command.stdout(Stdio::null()).stderr(Stdio::piped()),
    };
    command.process_group(0);
    let mut child = command.spawn().expect("the peer starts");
    let output: Box<dyn std::io::Read + Send> = match says {
        Says::OnStdout => Box::new(child.stdout.take().unwrap()),
        Says::OnStderr => Box::new(child.stderr.take().unwrap()),
    };
    let mut lines = BufReader::new(output).lines();
    let mut seen = Vec::new();
    let peer = Peer {
        child,
        port,
        _dir: dir,
    };
    loop {
        match lines.next() {
            Some(Ok(line)) => {
                let found = line.contains(ready);
                seen.push(line);
                if found {
                    break;
                }
            }
            _ => panic!("the peer ended before it listened:\n{}", seen.join("\n")),
        }
    }
    std::thread::spawn(move || for _ in lines.by_ref() {});
    peer
}

fn hello_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// Granian serving examples/hello.py (WSGI) over HTTP/2 only; over TLS with `tls`.
fn granian(tls: bool) -> Option<Peer> {
    let Some(bin) = peers_bin("granian") else {
        skip("granian", "benches/.venv-peers: run benches/provision.py");
        return None;
    };
    let port = free_port();
    let mut command = Command::new(bin);
    command.current_dir(hello_dir()).args([
        "--interface",
        "wsgi",
        "--http",
        "2",
        "--host",
        "127.0.0.1",
        "--port",
        &port.to_string(),
        "--workers",
        "1",
        "--blocking-threads",
        "1",
    ]);
    if tls {
        command.args([
            "--ssl-certificate",
            &cert_path("server.pem"),
            "--ssl-keyfile",
            &cert_path("server.key"),
        ]);
    }
    command.arg("hello:app");
    // Granian's main process says "Listening at", and "Started worker-1", before the worker
    // listens: after the line, the port is polled until it takes a connection (as
    // benches/servers.py does), a check of the state, not a wait for a time.
    let peer = spawn(command, port, Says::OnStdout, "Started worker", None);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "granian never listened"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Some(peer)
}

/// Hypercorn serving examples/asgi_hello.py: h2c with prior knowledge on its cleartext
/// bind, h2 by ALPN with a certificate.
fn hypercorn(tls: bool) -> Option<Peer> {
    let Some(bin) = peers_bin("hypercorn") else {
        skip("hypercorn", "benches/.venv-peers: run benches/provision.py");
        return None;
    };
    let port = free_port();
    let mut command = Command::new(bin);
    command.current_dir(hello_dir()).args([
        "--bind",
        &format!("127.0.0.1:{port}"),
        "--workers",
        "1",
    ]);
    if tls {
        command.args([
            "--certfile",
            &cert_path("server.pem"),
            "--keyfile",
            &cert_path("server.key"),
        ]);
    }
    command.arg("asgi_hello:app");
    Some(spawn(command, port, Says::OnStderr, "Running on", None))
}

/// nginx answering 200 "OK" over h2 (TLS), a RST_STREAM on /reset (`return 444` closes the
/// stream), and a GOAWAY after `keepalive_requests` streams of a connection.
fn nginx(keepalive_requests: u32) -> Option<Peer> {
    let Some(bin) = nginx_bin() else {
        skip("nginx", "apt-get install nginx-light");
        return None;
    };
    let port = free_port();
    let dir = TempDir::new(&format!("nginx-{port}"));
    let conf = format!(
        "daemon off;\nworker_processes 1;\npid {dir}/nginx.pid;\nerror_log stderr notice;\n\
         events {{ worker_connections 64; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {dir};\n  proxy_temp_path {dir};\n\
           fastcgi_temp_path {dir};\n  uwsgi_temp_path {dir};\n  scgi_temp_path {dir};\n\
           keepalive_requests {keepalive_requests};\n\
           server {{\n    listen 127.0.0.1:{port} ssl http2;\n\
             ssl_certificate {cert};\n    ssl_certificate_key {key};\n\
             location = /reset {{ return 444; }}\n\
             location / {{ default_type text/plain; return 200 \"OK\"; }}\n  }}\n}}\n",
        dir = dir.0.display(),
        cert = cert_path("server.pem"),
        key = cert_path("server.key"),
    );
    let path = dir.0.join("nginx.conf");
    std::fs::write(&path, conf).unwrap();
    let mut command = Command::new(bin);
    command.args(["-c", path.to_str().unwrap(), "-p", dir.0.to_str().unwrap()]);
    // The master prints this after it has opened the listening sockets.
    Some(spawn(
        command,
        port,
        Says::OnStderr,
        "start worker process",
        Some(dir),
    ))
}

/// Runs `flags` against `url`; asserts every one of `count` requests got a 200.
fn all_ok(flags: &[&str], url: &str, count: u64) -> serde_json::Value {
    let count_text = count.to_string();
    let mut all: Vec<&str> = flags.to_vec();
    all.extend(["-n", &count_text, url]);
    let (outcome, json) = bench(&all);
    let stats = &outcome.stats;
    assert_eq!(
        (stats.requests, stats.ok, stats.total_errors()),
        (count, count, 0),
        "{json}"
    );
    assert_eq!(stats.status[200], count);
    assert_eq!(stats.in_flight_at_end, 0);
    json
}

#[test]
fn granian_h2c_with_ten_streams_per_connection() {
    let Some(peer) = granian(false) else { return };
    let url = format!("http://127.0.0.1:{}/", peer.port);
    let json = all_ok(
        &["--h2c", "--streams", "10", "-c", "2", "-t", "1"],
        &url,
        2000,
    );
    assert_eq!(json["config"]["http2"], "h2c");
    assert_eq!(json["config"]["streams"], 10);
    // --http2 on an http:// URL is the same prior-knowledge h2c.
    all_ok(&["--http2", "-c", "1", "-t", "1"], &url, 200);
}

#[test]
fn granian_h2_over_tls_by_alpn() {
    let Some(peer) = granian(true) else { return };
    let url = format!("https://localhost:{}/", peer.port);
    let ca = cert_path("ca.pem");
    let json = all_ok(
        &[
            "--http2",
            "--streams",
            "10",
            "-c",
            "2",
            "-t",
            "1",
            "--cacert",
            &ca,
        ],
        &url,
        1000,
    );
    assert_eq!(json["config"]["http2"], "h2");
    // One handshake per connection: every stream went over the two.
    let handshakes = &json["tls_handshakes"];
    assert_eq!(
        handshakes["full"].as_u64().unwrap() + handshakes["resumed"].as_u64().unwrap(),
        2
    );
}

#[test]
fn granian_h2c_open_loop_sends_the_schedule() {
    let Some(peer) = granian(false) else { return };
    let url = format!("http://127.0.0.1:{}/", peer.port);
    let json = all_ok(
        &[
            "--h2c",
            "--streams",
            "4",
            "-c",
            "2",
            "-t",
            "1",
            "-R",
            "2000",
        ],
        &url,
        400,
    );
    assert_eq!(json["config"]["rate"], 2000.0);
}

#[test]
fn hypercorn_h2c_prior_knowledge_and_h2_by_alpn() {
    let Some(peer) = hypercorn(false) else { return };
    let url = format!("http://127.0.0.1:{}/", peer.port);
    all_ok(
        &["--h2c", "--streams", "10", "-c", "2", "-t", "1"],
        &url,
        500,
    );
    drop(peer);
    let Some(peer) = hypercorn(true) else { return };
    let url = format!("https://127.0.0.1:{}/", peer.port);
    let ca = cert_path("ca.pem");
    all_ok(
        &[
            "--http2",
            "--streams",
            "10",
            "-c",
            "1",
            "-t",
            "1",
            "--cacert",
            &ca,
        ],
        &url,
        500,
    );
}

#[test]
fn nginx_h2_static_ok() {
    let Some(peer) = nginx(1000) else { return };
    let url = format!("https://localhost:{}/", peer.port);
    let ca = cert_path("ca.pem");
    all_ok(
        &[
            "--http2",
            "--streams",
            "10",
            "-c",
            "2",
            "-t",
            "1",
            "--cacert",
            &ca,
        ],
        &url,
        1000,
    );
}

#[test]
fn a_goaway_moves_the_queued_requests_to_a_new_connection() {
    // nginx ends a connection with GOAWAY (NO_ERROR) after 50 streams: the streams it took are
    // answered, the requests still queued go on a new connection, and none is lost.
    let Some(peer) = nginx(50) else { return };
    let url = format!("https://localhost:{}/", peer.port);
    let ca = cert_path("ca.pem");
    let json = all_ok(
        &[
            "--http2",
            "--streams",
            "10",
            "-c",
            "1",
            "-t",
            "1",
            "--cacert",
            &ca,
        ],
        &url,
        500,
    );
    let handshakes = &json["tls_handshakes"];
    let connections =
        handshakes["full"].as_u64().unwrap() + handshakes["resumed"].as_u64().unwrap();
    assert!(connections >= 10, "500 requests, 50 per connection: {json}");
}

#[test]
fn a_reset_stream_is_an_error_of_its_request_only() {
    let Some(peer) = nginx(1000) else { return };
    let ca = cert_path("ca.pem");
    let ok = format!("https://localhost:{}/", peer.port);
    let reset = format!("https://localhost:{}/reset", peer.port);
    let requests = std::env::temp_dir().join(format!("tines-bench-h2-reqs-{}", std::process::id()));
    std::fs::write(&requests, format!("{ok}\n{reset}\n")).unwrap();
    let (outcome, json) = bench(&[
        "--http2",
        "--streams",
        "4",
        "-c",
        "1",
        "-t",
        "1",
        "--cacert",
        &ca,
        "-n",
        "200",
        "--requests-file",
        requests.to_str().unwrap(),
    ]);
    let _ = std::fs::remove_file(&requests);
    let stats = &outcome.stats;
    // Round-robin: half the requests are answered, the other half reset, each on its own.
    assert_eq!(stats.ok, 100, "{json}");
    assert_eq!(
        stats.errors[loadgen::stats::ErrorKind::Stream as usize],
        100,
        "{json}"
    );
    assert_eq!(stats.total_errors(), 100, "{json}");
    assert_eq!(json["errors"]["stream"], 100);
    assert!(
        json["error_examples"]["stream"]
            .as_str()
            .unwrap()
            .starts_with("RST_STREAM"),
        "{json}"
    );
}

#[test]
fn a_server_that_does_not_choose_h2_fails_the_run_with_a_tls_error() {
    // The rustls test server of support/tls.rs offers no h2.
    let server = support::tls::start_tls();
    let ca = cert_path("ca.pem");
    let url = server.url("localhost", "/");
    let (outcome, json) = bench(&[
        "--http2", "-c", "1", "-t", "1", "-n", "3", "--cacert", &ca, &url,
    ]);
    assert_eq!(outcome.stats.ok, 0);
    assert_eq!(json["errors"]["tls"], 3, "{json}");
    assert!(json["error_examples"]["tls"]
        .as_str()
        .unwrap()
        .contains("did not choose h2"));
    assert_eq!(server.count(), 0);
}

#[test]
fn http2_flags_are_checked() {
    let run = |flags: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_tines-bench"))
            .args(flags)
            .output()
            .unwrap();
        (
            output.status.code().unwrap(),
            String::from_utf8(output.stderr).unwrap(),
        )
    };
    let url = "http://127.0.0.1:9/";
    for (flags, message) in [
        (vec!["--streams", "4", url], "--streams is for HTTP/2"),
        (
            vec!["--h2c", "--streams", "0", url],
            "--streams must be at least 1",
        ),
        (
            vec!["--h2c", "--pipeline", "2", url],
            "--pipeline is HTTP/1.1's",
        ),
        (
            vec!["--http2", "--no-keepalive", url],
            "drop --no-keepalive",
        ),
        (
            vec!["--h2c", "https://127.0.0.1:9/"],
            "--h2c is HTTP/2 in cleartext",
        ),
        (
            vec!["--http2", "ws://127.0.0.1:9/"],
            "WebSocket runs over HTTP/1.1",
        ),
        (
            vec!["--h2c", "-H", "Connection: close", url],
            "connection-specific",
        ),
    ] {
        let (code, stderr) = run(&flags);
        assert_eq!(code, 2, "{flags:?}: {stderr}");
        assert!(stderr.contains(message), "{flags:?}: {stderr}");
    }
    let output = Command::new(env!("CARGO_BIN_EXE_tines-bench"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(output.stdout).unwrap();
    assert!(help.contains("--http2") && help.contains("--h2c") && help.contains("--streams"));
}
