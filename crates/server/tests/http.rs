//! HTTP/1.1 behaviour of a real worker on a real socket, run against both MPMs: every test
//! body runs once per MPM and must give the same outcome (the start of `mpm_parity`).

mod support;

use std::io::Write;
use std::net::Shutdown;
use std::time::Duration;

use support::{closed, exchange, read_response, test_config, Echo, TestServer};
use tines_server::scoreboard::ThreadState;
use tines_server::{App, Exchange, ExitReason, Mpm, StopReason};

fn each_mpm(test: impl Fn(Mpm)) {
    for mpm in [Mpm::Prefork, Mpm::Thread, Mpm::Event] {
        test(mpm);
    }
}

#[test]
fn keeps_http11_connections_alive_and_answers_in_order() {
    each_mpm(|mpm| {
        let server = TestServer::start(test_config(mpm), Echo);
        let mut stream = server.connect();
        for i in 0..3 {
            let response = exchange(
                &mut stream,
                format!("GET /n/{i} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes(),
            )
            .unwrap();
            assert_eq!(response.status, 200);
            assert!(
                response
                    .body
                    .starts_with(format!("GET /n/{i}\n").as_bytes()),
                "{mpm:?}"
            );
            assert!(response.header("date").is_some());
            assert_eq!(response.header("server"), Some("tines"));
            assert_eq!(response.header("connection"), None);
        }
        assert_eq!(server.stop(), StopReason::MasterGone);
    });
}

#[test]
fn answers_pipelined_requests_in_order() {
    each_mpm(|mpm| {
        let server = TestServer::start(test_config(mpm), Echo);
        let mut stream = server.connect();
        let mut batch = Vec::new();
        for i in 0..5 {
            batch.extend_from_slice(
                format!("POST /p/{i} HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nab{i}")
                    .as_bytes(),
            );
        }
        stream.write_all(&batch).unwrap();
        let mut pending = Vec::new();
        for i in 0..5 {
            let response = read_response(&mut stream, &mut pending, false).unwrap();
            assert!(
                response
                    .body
                    .starts_with(format!("POST /p/{i}\n").as_bytes()),
                "{mpm:?}"
            );
            assert!(response.body.ends_with(format!("\nab{i}").as_bytes()));
        }
    });
}

#[test]
fn closes_http10_connections_unless_keep_alive_is_asked() {
    each_mpm(|mpm| {
        let server = TestServer::start(test_config(mpm), Echo);
        let mut stream = server.connect();
        let response = exchange(&mut stream, b"GET / HTTP/1.0\r\n\r\n").unwrap();
        assert_eq!(response.header("connection"), Some("close"));
        assert!(closed(&mut stream));
        let mut stream = server.connect();
        let response = exchange(
            &mut stream,
            b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
        )
        .unwrap();
        assert_eq!(response.header("connection"), Some("keep-alive"));
        let again = exchange(&mut stream, b"GET /2 HTTP/1.0\r\n\r\n").unwrap();
        assert_eq!(again.status, 200);
    });
}

#[test]
fn honours_connection_close_from_the_client() {
    each_mpm(|mpm| {
        let server = TestServer::start(test_config(mpm), Echo);
        let mut stream = server.connect();
        let response = exchange(
            &mut stream,
            b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
        assert_eq!(response.header("connection"), Some("close"));
        assert!(closed(&mut stream));
    });
}

#[test]
fn decodes_chunked_request_bodies_with_trailers() {
    each_mpm(|mpm| {
        let server = TestServer::start(test_config(mpm), Echo);
        let mut stream = server.connect();
        let request = b"POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n";
        let response = exchange(&mut stream, request).unwrap();
        assert!(
            response.body.ends_with(b"\n\nhello world"),
            "{mpm:?}: {:?}",
            String::from_utf8_lossy(&response.body)
        );
        let next = exchange(&mut stream, b"GET /after HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
        assert!(next.body.starts_with(b"GET /after\n"));
    });
}

#[test]
fn sends_100_continue_before_reading_the_body() {
    each_mpm(|mpm| {
        let server = TestServer::start(test_config(mpm), Echo);
        let mut stream = server.connect();
        stream
            .write_all(
                b"PUT /up HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n",
            )
            .unwrap();
        let mut pending = Vec::new();
        let interim = read_response(&mut stream, &mut pending, false).unwrap();
        assert_eq!(interim.status, 100, "{mpm:?}");
        stream.write_all(b"data").unwrap();
        let response = read_response(&mut stream, &mut pending, false).unwrap();
        assert_eq!(response.status, 200);
        assert!(response.body.ends_with(b"\n\ndata"));
    });
}

#[test]
fn rejects_smuggling_framing_with_400_and_closes() {
    each_mpm(|mpm| {
        let server = TestServer::start(test_config(mpm), Echo);
        for request in [
            &b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"[..],
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            b"GET / HTTP/1.1\r\n\r\n",
        ] {
            let mut stream = server.connect();
            let response = exchange(&mut stream, request).unwrap();
            assert!(response.status == 400 || response.status == 501, "{mpm:?} {:?}: {}", String::from_utf8_lossy(request), response.status);
            assert_eq!(response.header("connection"), Some("close"));
            assert!(closed(&mut stream));
        }
        // The worker lives on.
        let mut stream = server.connect();
        assert_eq!(
            exchange(&mut stream, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
                .unwrap()
                .status,
            200
        );
    });
}

#[test]
fn answers_head_with_headers_only() {
    each_mpm(|mpm| {
        let server = TestServer::start(test_config(mpm), Echo);
        let mut stream = server.connect();
        let response = exchange(&mut stream, b"HEAD /h HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
        assert_eq!(response.status, 200);
        let next = exchange(&mut stream, b"GET /g HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
        assert!(
            next.body.starts_with(b"GET /g\n"),
            "HEAD must not send a body: {:?}",
            String::from_utf8_lossy(&next.body)
        );
    });
}

/// Declares a Content-Length and sends a different number of bytes.
struct WrongLength {
    declared: &'static [u8],
    body: &'static [u8],
}

impl App for WrongLength {
    fn serve(&self, mut exchange: Box<Exchange>) -> Box<Exchange> {
        let headers: [(&[u8], &[u8]); 1] = [(b"Content-Length", self.declared)];
        exchange.begin_response(b"200 OK", headers, None).unwrap();
        let _ = exchange.write_body(self.body);
        let _ = exchange.finish();
        exchange
    }
}

#[test]
fn truncates_a_body_longer_than_its_content_length_and_closes() {
    each_mpm(|mpm| {
        let server = TestServer::start(
            test_config(mpm),
            WrongLength {
                declared: b"3",
                body: b"abcdef",
            },
        );
        let mut stream = server.connect();
        let response = exchange(&mut stream, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
        assert_eq!(response.body, b"abc");
        assert!(closed(&mut stream), "{mpm:?}");
    });
}

#[test]
fn closes_after_a_body_shorter_than_its_content_length() {
    each_mpm(|mpm| {
        let server = TestServer::start(
            test_config(mpm),
            WrongLength {
                declared: b"10",
                body: b"abc",
            },
        );
        let mut stream = server.connect();
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap();
        let response = read_response(&mut stream, &mut Vec::new(), false).unwrap();
        assert_eq!(response.body, b"abc", "{mpm:?}");
    });
}

/// Streams a body of unknown length.
struct Streaming;

impl App for Streaming {
    fn serve(&self, mut exchange: Box<Exchange>) -> Box<Exchange> {
        exchange
            .begin_response(b"200 OK", std::iter::empty(), None)
            .unwrap();
        for part in [&b"one,"[..], b"two,", b"three"] {
            exchange.write_body(part).unwrap();
        }
        let _ = exchange.finish();
        exchange
    }
}

#[test]
fn streams_unknown_lengths_chunked_for_http11_and_close_delimited_for_http10() {
    each_mpm(|mpm| {
        let server = TestServer::start(test_config(mpm), Streaming);
        let mut stream = server.connect();
        let response = exchange(&mut stream, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
        assert_eq!(response.header("transfer-encoding"), Some("chunked"));
        assert_eq!(response.body, b"one,two,three");
        let again = exchange(&mut stream, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
        assert_eq!(again.body, b"one,two,three", "{mpm:?}");
        let mut old = server.connect();
        let response = exchange(
            &mut old,
            b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
        )
        .unwrap();
        assert_eq!(response.header("connection"), Some("close"));
        assert_eq!(response.body, b"one,two,three");
    });
}

#[test]
fn drains_an_unread_small_body_and_keeps_the_connection() {
    struct Ignores;
    impl App for Ignores {
        fn serve(&self, mut exchange: Box<Exchange>) -> Box<Exchange> {
            exchange
                .begin_response(b"204 No Content", std::iter::empty(), None)
                .unwrap();
            let _ = exchange.finish();
            exchange
        }
    }
    each_mpm(|mpm| {
        let server = TestServer::start(test_config(mpm), Ignores);
        let mut stream = server.connect();
        let response = exchange(
            &mut stream,
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
        )
        .unwrap();
        assert_eq!(response.status, 204);
        let again = exchange(&mut stream, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
        assert_eq!(again.status, 204, "{mpm:?}");
    });
}

#[test]
fn closes_idle_keep_alive_connections_at_the_timeout() {
    each_mpm(|mpm| {
        let mut config = test_config(mpm);
        config.keepalive_timeout = Duration::from_millis(200);
        let server = TestServer::start(config, Echo);
        let mut stream = server.connect();
        assert_eq!(
            exchange(&mut stream, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
                .unwrap()
                .status,
            200
        );
        // The read blocks until the server closes the idle connection (read timeout is 10 s).
        assert!(closed(&mut stream), "{mpm:?}");
    });
}

#[test]
fn answers_408_to_a_head_that_does_not_finish_in_time() {
    each_mpm(|mpm| {
        let mut config = test_config(mpm);
        config.header_timeout = Duration::from_millis(200);
        let server = TestServer::start(config, Echo);
        let mut stream = server.connect();
        stream.write_all(b"GET / HTTP/1.1\r\nHost:").unwrap();
        let response = read_response(&mut stream, &mut Vec::new(), false).unwrap();
        assert_eq!(response.status, 408, "{mpm:?}");
        assert!(closed(&mut stream));
    });
}

#[test]
fn stops_when_the_master_goes_away_after_finishing_in_flight_requests() {
    each_mpm(|mpm| {
        let mut config = test_config(mpm);
        // The loop would read the body before dispatch, and the app would not hold the
        // request until it is complete: let the app read it (a streaming route).
        config.stream_body_paths = vec![b"/".to_vec()];
        let mut server = TestServer::start(config, Echo);
        let mut stream = server.connect();
        stream
            .write_all(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\nab")
            .unwrap();
        // Wait until the app holds the request (it is blocked reading the rest of the body).
        while server.scoreboard.read(0).unwrap().active == 0 {
            std::thread::yield_now();
        }
        server.close_life_pipe();
        stream.write_all(b"cd").unwrap();
        let response = read_response(&mut stream, &mut Vec::new(), false).unwrap();
        assert_eq!(response.status, 200);
        // A draining worker closes the connection after the in-flight response (the thread
        // MPM says `Connection: close`; a prefork process learns of the stop only after the
        // inline request and then closes the idle connection).
        assert!(closed(&mut stream), "{mpm:?}");
        let _ = stream.shutdown(Shutdown::Both);
        assert_eq!(server.stop(), StopReason::MasterGone, "{mpm:?}");
    });
}

#[test]
fn counts_requests_in_the_scoreboard() {
    each_mpm(|mpm| {
        let server = TestServer::start(test_config(mpm), Echo);
        let mut stream = server.connect();
        for _ in 0..4 {
            exchange(&mut stream, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
        }
        drop(stream);
        let board = std::sync::Arc::clone(&server.scoreboard);
        server.stop();
        assert_eq!(board.read(0).unwrap().requests, 4, "{mpm:?}");
    });
}

#[test]
fn shows_the_request_an_app_thread_serves_in_its_sub_slot() {
    each_mpm(|mpm| {
        let mut config = test_config(mpm);
        // A streaming route: the app reads the body from the client.
        config.stream_body_paths = vec![b"/upload".to_vec()];
        let server = TestServer::start(config, Echo);
        let mut stream = server.connect();
        stream
            .write_all(b"POST /upload?name=x HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\nab")
            .unwrap();
        // The app holds the request, blocked reading the rest of the body from the client.
        let busy = loop {
            let threads = server.scoreboard.read_threads(0);
            if let Some(thread) = threads
                .into_iter()
                .find(|thread| thread.state == ThreadState::Client)
            {
                break thread;
            }
            std::thread::yield_now();
        };
        assert_eq!(busy.method, b"POST", "{mpm:?}");
        assert_eq!(busy.target, b"/upload?name=x", "{mpm:?}");
        assert!(busy.fd >= 0 && busy.request == 1 && busy.response_bytes == 0);
        stream.write_all(b"cd").unwrap();
        let response = read_response(&mut stream, &mut Vec::new(), false).unwrap();
        assert_eq!(response.status, 200);
        drop(stream);
        let board = std::sync::Arc::clone(&server.scoreboard);
        server.stop();
        let served: Vec<_> = board
            .read_threads(0)
            .into_iter()
            .filter(|thread| thread.requests == 1)
            .collect();
        assert_eq!(served.len(), 1, "{mpm:?}");
        assert_eq!(served[0].state, ThreadState::Idle);
        assert!(served[0].last_response_us >= served[0].last_app_us);
        assert!(board.read(0).unwrap().bytes_out > 0);
    });
}

#[test]
fn recycles_after_max_requests() {
    each_mpm(|mpm| {
        let mut config = test_config(mpm);
        config.max_requests = 3;
        let server = TestServer::start(config, Echo);
        for _ in 0..3 {
            let mut stream = server.connect();
            assert_eq!(
                exchange(&mut stream, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
                    .unwrap()
                    .status,
                200
            );
        }
        let board = std::sync::Arc::clone(&server.scoreboard);
        assert_eq!(server.wait(), StopReason::MaxRequests, "{mpm:?}");
        assert_eq!(board.read(0).unwrap().exit_reason, ExitReason::MaxRequests);
    });
}

#[test]
fn refuses_a_content_length_over_max_body_size_with_413_before_the_app_runs() {
    struct Panics;
    impl App for Panics {
        fn serve(&self, _exchange: Box<Exchange>) -> Box<Exchange> {
            panic!("the app must not run for a body over the limit");
        }
    }
    each_mpm(|mpm| {
        let mut config = test_config(mpm);
        config.max_body_size = 10;
        let server = TestServer::start(config, Panics);
        let mut stream = server.connect();
        let response = exchange(
            &mut stream,
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\nExpect: 100-continue\r\n\r\n",
        )
        .unwrap();
        assert_eq!(response.status, 413, "{mpm:?}");
        assert_eq!(response.header("connection"), Some("close"));
    });
}

#[test]
fn fails_a_chunked_body_that_grows_past_max_body_size_with_413() {
    struct ReadsAll;
    impl App for ReadsAll {
        fn serve(&self, mut exchange: Box<Exchange>) -> Box<Exchange> {
            let mut buf = [0u8; 64];
            loop {
                match exchange.read_body(&mut buf) {
                    Ok(0) => break,
                    Ok(_) => continue,
                    Err(_) => {
                        let status = exchange.fault().unwrap_or(500);
                        exchange.fail(status);
                        return exchange;
                    }
                }
            }
            exchange.fail(500);
            exchange
        }
    }
    each_mpm(|mpm| {
        let mut config = test_config(mpm);
        config.max_body_size = 10;
        let server = TestServer::start(config, ReadsAll);
        let mut stream = server.connect();
        let request = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nabcdef\r\n6\r\nghijkl\r\n0\r\n\r\n";
        let response = exchange(&mut stream, request).unwrap();
        assert_eq!(response.status, 413, "{mpm:?}");
    });
}

#[test]
fn a_head_sent_at_the_minimum_rate_earns_more_time_than_the_header_timeout() {
    each_mpm(|mpm| {
        let mut config = test_config(mpm);
        config.header_timeout = Duration::from_millis(300);
        config.header_timeout_max = Duration::from_secs(30);
        // 100 bytes earn 10 s: the head below completes long before its extended deadline.
        config.header_min_rate = 10;
        let server = TestServer::start(config, Echo);
        let mut stream = server.connect();
        stream.write_all(b"GET /slow HTTP/1.1\r\nHost: a\r\nX-Padding: 0123456789012345678901234567890123456789012345678901234567890123456789\r\n").unwrap();
        // Outlast the plain header timeout (0.3 s; the earned extension is 10 s): the worker
        // must still hold the connection.
        std::thread::sleep(Duration::from_millis(600));
        let response = exchange(&mut stream, b"\r\n").unwrap();
        assert_eq!(response.status, 200, "{mpm:?}");
    });
}

#[test]
fn a_body_that_stalls_gets_408() {
    struct ReadsAll;
    impl App for ReadsAll {
        fn serve(&self, mut exchange: Box<Exchange>) -> Box<Exchange> {
            let mut buf = [0u8; 64];
            loop {
                match exchange.read_body(&mut buf) {
                    Ok(0) => break,
                    Ok(_) => continue,
                    Err(_) => {
                        let status = exchange.fault().unwrap_or(500);
                        exchange.fail(status);
                        return exchange;
                    }
                }
            }
            exchange.fail(500);
            exchange
        }
    }
    each_mpm(|mpm| {
        let mut config = test_config(mpm);
        config.body_timeout = Duration::from_millis(200);
        let server = TestServer::start(config, ReadsAll);
        let mut stream = server.connect();
        let response = exchange(
            &mut stream,
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\nonly a few bytes",
        )
        .unwrap();
        assert_eq!(response.status, 408, "{mpm:?}");
    });
}

#[test]
fn a_500_that_replaces_a_buffered_body_is_complete() {
    struct FailsAfterBuffering;
    impl App for FailsAfterBuffering {
        fn serve(&self, mut exchange: Box<Exchange>) -> Box<Exchange> {
            exchange
                .begin_response(b"200 OK", std::iter::empty(), None)
                .unwrap();
            assert!(exchange.buffer_body(b"partial body"));
            // The app fails before anything reached the socket.
            exchange.fail(500);
            exchange
        }
    }
    each_mpm(|mpm| {
        let server = TestServer::start(test_config(mpm), FailsAfterBuffering);
        let mut stream = server.connect();
        let response = exchange(&mut stream, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
        assert_eq!(response.status, 500, "{mpm:?}");
        assert_eq!(response.body, b"Internal Server Error\n");
    });
}

#[test]
fn an_error_response_to_head_has_no_body() {
    each_mpm(|mpm| {
        let server = TestServer::start(test_config(mpm), Echo);
        let mut stream = server.connect();
        stream.write_all(b"HEAD / HTTP/1.1\r\n\r\n").unwrap();
        let mut reply = Vec::new();
        std::io::Read::read_to_end(&mut stream, &mut reply).unwrap();
        assert!(reply.starts_with(b"HTTP/1.1 400 "), "{mpm:?}");
        assert!(
            reply.ends_with(b"\r\n\r\n"),
            "{mpm:?}: {:?}",
            String::from_utf8_lossy(&reply)
        );
    });
}
