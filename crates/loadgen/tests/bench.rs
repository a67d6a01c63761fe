//! `tines bench` against real servers on 127.0.0.1 (see support/).

mod support;

use std::process::Command;
use std::time::Duration;

use support::{bench, start, Mode};

#[test]
fn completed_requests_equal_the_servers_responses() {
    let server = start(Mode::Normal);
    let url = server.url("/");
    let (outcome, json) = bench(&["-c", "8", "-t", "2", "-n", "3000", &url]);
    let stats = &outcome.stats;
    assert_eq!(stats.requests, 3000);
    assert_eq!(server.count(), 3000);
    assert_eq!(stats.ok, 3000);
    assert_eq!(stats.total_errors(), 0);
    assert_eq!(stats.in_flight_at_end, 0);
    assert_eq!(stats.status[200], 3000);
    assert_eq!(stats.latency.len(), 3000);
    assert_eq!(json["status_counts"]["200"], 3000);
    assert_eq!(json["warnings"], serde_json::json!([]));
    assert_eq!(json["schema"], 1);
    assert_eq!(json["errors"]["total"], 0);
    let timeline_total: u64 = json["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["requests"].as_u64().unwrap())
        .sum();
    assert_eq!(timeline_total, 3000);
}

#[test]
fn pipelined_chunked_and_no_keepalive_runs_count_exactly() {
    let server = start(Mode::Normal);
    let chunked = server.url("/chunked");
    let plain = server.url("/");
    let (outcome, _) = bench(&[
        "-c",
        "3",
        "-t",
        "1",
        "-n",
        "900",
        "--pipeline",
        "4",
        &chunked,
        &plain,
    ]);
    assert_eq!(
        (
            outcome.stats.requests,
            outcome.stats.ok,
            outcome.stats.total_errors()
        ),
        (900, 900, 0)
    );
    assert_eq!(server.count(), 900);

    let server = start(Mode::Normal);
    let url = server.url("/");
    let (outcome, json) = bench(&["-c", "4", "-t", "2", "-n", "200", "--no-keepalive", &url]);
    assert_eq!(
        (outcome.stats.requests, outcome.stats.total_errors()),
        (200, 0)
    );
    assert_eq!(server.count(), 200);
    assert_eq!(
        outcome.stats.connect.len(),
        200,
        "one connection per request"
    );
    assert_eq!(json["config"]["keepalive"], false);
}

#[test]
fn duration_runs_account_for_every_response_the_server_wrote() {
    let server = start(Mode::Normal);
    let url = server.url("/");
    let (outcome, json) = bench(&[
        "-c", "4", "-t", "2", "-d", "700ms", "--warmup", "300ms", &url,
    ]);
    let stats = &outcome.stats;
    assert!(stats.requests > 0 && stats.warmup_requests > 0);
    // Whatever the server wrote was either counted, in the warm-up, or still in flight at the end.
    let counted = stats.requests + stats.warmup_requests;
    assert!(counted <= server.count(), "{counted} > {}", server.count());
    assert!(
        server.count() <= counted + stats.in_flight_at_end,
        "{} {}",
        server.count(),
        stats.in_flight_at_end
    );
    let elapsed = json["elapsed_s"].as_f64().unwrap();
    assert!((0.69..2.0).contains(&elapsed), "{elapsed}");
}

#[test]
fn bad_status_is_a_completed_request_and_a_status_error() {
    let server = start(Mode::Normal);
    let url = server.url("/500");
    let (outcome, _) = bench(&["-c", "2", "-t", "1", "-n", "50", &url]);
    assert_eq!(outcome.stats.requests, 50);
    assert_eq!(outcome.stats.ok, 0);
    assert_eq!(outcome.stats.errors, [0, 0, 0, 50, 0, 0, 0, 0]);
    assert_eq!(outcome.stats.status[500], 50);
    let reason = loadgen::report::failure_reason(&outcome).unwrap();
    assert!(reason.contains("status"), "{reason}");
}

#[test]
fn a_url_that_always_redirects_is_counted_by_status_and_warned_about() {
    let server = start(Mode::Normal);
    let url = server.url("/302");
    let (outcome, json) = bench(&["-c", "2", "-t", "1", "-n", "50", &url]);
    assert_eq!((outcome.stats.requests, outcome.stats.ok), (50, 50));
    assert_eq!(json["status_counts"], serde_json::json!({"302": 50}));
    let warnings = json["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let warning = warnings[0].as_str().unwrap();
    assert!(
        warning.contains("50 of 50 (100%) were 302: 50") && warning.contains("redirects"),
        "{warning}"
    );

    let dir = std::env::temp_dir().join(format!("tines-bench-302-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("report.html");
    let output = Command::new(env!("CARGO_BIN_EXE_tines-bench"))
        .args(["-c", "2", "-t", "1", "-n", "50", "--html"])
        .arg(&page)
        .arg(&url)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "a 3xx counts as ok");
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("Status codes:        302: 50\n"), "{text}");
    assert!(
        text.contains(&format!(
            "Status codes:        302: 50\nWarning: {warning}\n"
        )),
        "{text}"
    );
    let page = std::fs::read_to_string(&page).unwrap();
    assert!(page.contains(&format!("\"warnings\":[\"{warning}\"]")));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn closed_port_is_a_connect_error() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}/");
    let (outcome, json) = bench(&["-c", "2", "-t", "1", "-n", "20", &url]);
    assert_eq!(outcome.stats.errors, [20, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(outcome.stats.requests, 0);
    assert_eq!(json["errors"]["connect"], 20);
    assert!(json["error_examples"]["connect"]
        .as_str()
        .unwrap()
        .contains("refused"));
    let reason = loadgen::report::failure_reason(&outcome).unwrap();
    assert!(
        reason.contains("connect") && reason.contains("refused"),
        "{reason}"
    );
}

#[test]
fn server_reset_is_a_reset_error() {
    let server = start(Mode::Reset);
    let url = server.url("/");
    let (outcome, _) = bench(&["-c", "2", "-t", "1", "-n", "20", &url]);
    assert_eq!(outcome.stats.errors, [0, 20, 0, 0, 0, 0, 0, 0]);
    assert_eq!(outcome.stats.requests, 0);
}

#[test]
fn stalled_server_is_a_timeout_and_the_connection_is_reopened() {
    let server = start(Mode::Stall);
    let url = server.url("/");
    let (outcome, _) = bench(&["-c", "2", "-t", "1", "-n", "4", "--timeout", "200ms", &url]);
    assert_eq!(outcome.stats.errors, [0, 0, 4, 0, 0, 0, 0, 0]);
    assert_eq!(outcome.stats.requests, 0);
    // Reopened after each timeout: 4 connections for 4 requests.
    assert_eq!(outcome.stats.connect.len(), 4);
}

#[test]
fn open_loop_rate_holds_end_to_end() {
    let server = start(Mode::Normal);
    let url = server.url("/");
    let (outcome, json) = bench(&["-R", "50", "-d", "2s", "-c", "4", "-t", "2", &url]);
    let requests = outcome.stats.requests as f64;
    let elapsed = json["elapsed_s"].as_f64().unwrap();
    let rate = requests / elapsed;
    assert!(
        (rate - 50.0).abs() <= 2.5,
        "achieved {rate} req/s ({requests} in {elapsed} s)"
    );
    assert_eq!(outcome.stats.total_errors(), 0);
}

#[test]
fn open_loop_sees_the_stall_that_closed_loop_hides() {
    let stall = Mode::PeriodicStall {
        period: Duration::from_secs(5),
        stall: Duration::from_secs(1),
        offset: Duration::from_millis(500),
    };
    // Open loop: requests due during the 1 s stall wait, and count from their intended time.
    let server = start(stall);
    let url = server.url("/");
    let (open, _) = bench(&["-R", "100", "-d", "2500ms", "-c", "10", "-t", "1", &url]);
    let p99 = open.stats.latency.value_at_quantile(0.99);
    assert!(p99 >= 800_000, "open-loop p99 {p99} us");
    // Closed loop: only the few requests on the wire during the stall are slow.
    let server = start(stall);
    let url = server.url("/");
    let (closed, _) = bench(&["-c", "2", "-t", "1", "-d", "2500ms", &url]);
    assert!(closed.stats.requests > 1000, "{}", closed.stats.requests);
    let p99 = closed.stats.latency.value_at_quantile(0.99);
    assert!(p99 < 100_000, "closed-loop p99 {p99} us");
    assert!(closed.stats.latency.max() >= 800_000, "the stall happened");
}

#[test]
fn html_report_is_self_contained() {
    let server = start(Mode::Normal);
    let url = server.url("/");
    let dir = std::env::temp_dir().join(format!("tines-bench-html-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("report.html");
    let output = Command::new(env!("CARGO_BIN_EXE_tines-bench"))
        .args(["-c", "2", "-t", "1", "-n", "100", "--json", "--html"])
        .arg(&path)
        .arg(&url)
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.stderr.is_empty(),
        "no progress line when stderr is not a TTY"
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["requests"], 100);
    let page = std::fs::read_to_string(&path).unwrap();
    assert!(page.contains("<svg") || page.contains("createElementNS"));
    assert!(
        !page.contains("http-equiv") && !page.contains("<script src") && !page.contains("<link")
    );
    assert!(page.contains("\"requests\":100"));
    std::fs::remove_dir_all(&dir).unwrap();
}

fn run_binary(args: &[&str]) -> (i32, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_tines-bench"))
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code().unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

#[test]
fn usage_errors_exit_2_with_one_line() {
    for (args, fragment) in [
        (vec!["localhost:80"], "bad URL"),
        (
            vec!["--cacert", "/nonexistent.pem", "https://127.0.0.1/"],
            "cannot read --cacert",
        ),
        (
            vec!["-k", "--cacert", "x.pem", "https://127.0.0.1/"],
            "--cacert",
        ),
        (vec!["ftp://127.0.0.1/"], "unsupported scheme"),
        (vec!["http://no-such-host.invalid/"], "cannot resolve host"),
        (vec!["-c", "0", "http://127.0.0.1:1/"], "--connections"),
        (vec!["-d", "10x", "http://127.0.0.1:1/"], "duration"),
        (
            vec!["--rate", "0", "http://127.0.0.1:1/"],
            "--rate must be a positive",
        ),
        (vec!["--bogus", "http://127.0.0.1:1/"], "--bogus"),
        (vec![], "no URL"),
    ] {
        let (code, stderr) = run_binary(&args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("tines-bench: error: ") && stderr.contains(fragment),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn help_lists_the_flags() {
    let output = Command::new(env!("CARGO_BIN_EXE_tines-bench"))
        .arg("--help")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let text = String::from_utf8(output.stdout).unwrap();
    for flag in [
        "--connections",
        "--rate",
        "--no-keepalive",
        "--pipeline",
        "--warmup",
        "--json",
        "--html",
        "--requests-file",
        "--insecure",
        "--cacert",
        "--no-resumption",
    ] {
        assert!(text.contains(flag), "{flag} missing from --help");
    }
}

#[test]
fn every_request_failing_exits_1_and_says_why() {
    let server = start(Mode::Reset);
    let url = server.url("/");
    let (code, stderr) = run_binary(&["-c", "1", "-t", "1", "-n", "3", &url]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("every request failed") && stderr.contains("reset"),
        "{stderr}"
    );
}
