//! `tines bench` over TLS (`https://`) against a rustls server on 127.0.0.1 (support/tls.rs),
//! with the certificates of tests/tls/.

mod support;

use std::process::Command;

use support::bench;
use support::tls::{cert_path, start_tls};

fn run_binary(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_tines-bench"))
        .args(args)
        // The system's bundle must not trust the test CA, whatever the machine holds.
        .env("SSL_CERT_FILE", cert_path("other-ca.pem"))
        .output()
        .unwrap();
    (
        output.status.code().unwrap(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

#[test]
fn https_requests_are_answered_and_counted() {
    let server = start_tls();
    let ca = cert_path("ca.pem");
    let url = server.url("localhost", "/");
    let (outcome, json) = bench(&["-c", "4", "-t", "2", "-n", "2000", "--cacert", &ca, &url]);
    let stats = &outcome.stats;
    assert_eq!(
        (stats.requests, stats.ok, stats.total_errors()),
        (2000, 2000, 0)
    );
    assert_eq!(stats.in_flight_at_end, 0);
    assert_eq!(server.count(), 2000);
    // Keep-alive: one handshake per connection, counted alike on both sides.
    let (full, resumed) = server.handshakes();
    assert_eq!(full + resumed, 4);
    assert_eq!(
        (stats.tls_full, stats.tls_resumed),
        (full, resumed),
        "the client counts what the server saw"
    );
    assert_eq!(json["tls_handshakes"]["full"], full);
    assert_eq!(json["config"]["tls"], true);
    // SNI is the URL's host name.
    assert_eq!(
        *server.seen.names.lock().unwrap(),
        vec!["localhost".to_string(); 4]
    );
}

#[test]
fn an_ip_address_url_is_checked_against_the_certificates_ip_name() {
    let server = start_tls();
    let ca = cert_path("ca.pem");
    let url = server.url("127.0.0.1", "/");
    let (outcome, _) = bench(&["-c", "2", "-t", "1", "-n", "200", "--cacert", &ca, &url]);
    assert_eq!((outcome.stats.ok, outcome.stats.total_errors()), (200, 0));
    assert_eq!(server.count(), 200);
    // No SNI for an IP address (RFC 6066 3).
    assert!(server.seen.names.lock().unwrap().is_empty());
}

#[test]
fn an_untrusted_certificate_fails_unless_insecure() {
    let server = start_tls();
    let url = server.url("127.0.0.1", "/");
    let (code, _, stderr) = run_binary(&["-c", "1", "-t", "1", "-n", "3", &url]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("every request failed: 3 of 3 were tls errors")
            && stderr.contains("UnknownIssuer")
            && stderr.contains("--cacert"),
        "{stderr}"
    );
    assert_eq!(server.count(), 0);
    let (code, stdout, stderr) = run_binary(&["-c", "1", "-t", "1", "-n", "3", "-k", &url]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("Requests completed:  3 (3 ok"), "{stdout}");
    assert_eq!(server.count(), 3);
}

#[test]
fn a_wrong_ca_fails_with_a_clear_error() {
    let server = start_tls();
    let url = server.url("localhost", "/");
    let other = cert_path("other-ca.pem");
    let (outcome, json) = bench(&["-c", "2", "-t", "1", "-n", "10", "--cacert", &other, &url]);
    assert_eq!(outcome.stats.ok, 0);
    assert_eq!(json["errors"]["tls"], 10);
    assert_eq!(json["errors"]["total"], 10);
    let example = json["error_examples"]["tls"].as_str().unwrap();
    assert!(
        example.contains("TLS handshake failed: invalid peer certificate: UnknownIssuer"),
        "{example}"
    );
    assert_eq!(server.count(), 0);
    assert_eq!(server.handshakes(), (0, 0));
}

#[test]
fn resumption_is_on_by_default_and_no_resumption_makes_every_handshake_full() {
    let ca = cert_path("ca.pem");
    // One connection at a time, a new one per request: each finds the tickets the server sent
    // on the one before (they come before its response).
    let server = start_tls();
    let url = server.url("localhost", "/");
    let flags = [
        "-c",
        "1",
        "-t",
        "1",
        "-n",
        "40",
        "--no-keepalive",
        "--cacert",
        &ca,
        &url,
    ];
    let (outcome, _) = bench(&flags);
    assert_eq!((outcome.stats.ok, outcome.stats.total_errors()), (40, 0));
    assert_eq!(server.handshakes(), (1, 39));
    assert_eq!((outcome.stats.tls_full, outcome.stats.tls_resumed), (1, 39));

    let server = start_tls();
    let url = server.url("localhost", "/");
    let (outcome, json) = bench(&[
        "-c",
        "1",
        "-t",
        "1",
        "-n",
        "40",
        "--no-keepalive",
        "--no-resumption",
        "--cacert",
        &ca,
        &url,
    ]);
    assert_eq!((outcome.stats.ok, outcome.stats.total_errors()), (40, 0));
    assert_eq!(server.count(), 40);
    assert_eq!(server.handshakes(), (40, 0));
    assert_eq!(json["tls_handshakes"]["resumed"], 0);
}

#[test]
fn pipelined_requests_over_tls_are_counted_exactly() {
    let server = start_tls();
    let ca = cert_path("ca.pem");
    let url = server.url("localhost", "/");
    let (outcome, _) = bench(&[
        "-c",
        "3",
        "-t",
        "1",
        "-n",
        "900",
        "--pipeline",
        "8",
        "--cacert",
        &ca,
        &url,
    ]);
    let stats = &outcome.stats;
    assert_eq!(
        (stats.requests, stats.ok, stats.total_errors()),
        (900, 900, 0)
    );
    assert_eq!(server.count(), 900);
    assert_eq!(server.handshakes().0 + server.handshakes().1, 3);
}
