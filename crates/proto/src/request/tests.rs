//! Unit tests for `parse_request_head`: happy paths, every rejection, limits,
//! and partial input at every split point.

use super::*;

fn parse(buf: &[u8]) -> Result<RequestHead, ParseError> {
    parse_with(buf, &Limits::default())
}

fn parse_with(buf: &[u8], limits: &Limits) -> Result<RequestHead, ParseError> {
    let mut head = RequestHead::new();
    match parse_request_head(buf, limits, &mut head)? {
        HeadStatus::Complete => Ok(head),
        HeadStatus::Partial => panic!("unexpected Partial for {:?}", String::from_utf8_lossy(buf)),
    }
}

fn status_of(buf: &[u8]) -> Result<HeadStatus, ParseError> {
    parse_request_head(buf, &Limits::default(), &mut RequestHead::new())
}

fn error_of(buf: &[u8]) -> ParseError {
    parse(buf).expect_err("expected an error")
}

const SIMPLE_GET: &[u8] = b"GET /path?q=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n";

#[test]
fn parses_a_simple_get() {
    let head = parse(SIMPLE_GET).unwrap();
    assert_eq!(head.method.of(SIMPLE_GET), b"GET");
    assert_eq!(head.target.of(SIMPLE_GET), b"/path?q=1");
    assert_eq!(head.version, Version::Http11);
    assert_eq!(head.head_len, SIMPLE_GET.len());
    assert_eq!(head.body, BodyFraming::None);
    assert_eq!(head.connection, ConnectionOption::Default);
    assert!(head.keep_alive());
    assert!(head.method_is(SIMPLE_GET, b"GET"));
    assert!(!head.method_is(SIMPLE_GET, b"get"));
    let headers: Vec<(&[u8], &[u8])> = head
        .headers
        .iter()
        .map(|(n, v)| (n.of(SIMPLE_GET), v.of(SIMPLE_GET)))
        .collect();
    assert_eq!(
        headers,
        [(&b"Host"[..], &b"example.com"[..]), (b"Accept", b"*/*")]
    );
    assert_eq!(head.header(SIMPLE_GET, b"accept"), Some(&b"*/*"[..]));
}

#[test]
fn reports_partial_at_every_split_point() {
    let requests: [&[u8]; 3] = [
        SIMPLE_GET,
        b"\r\nPOST /u HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"PUT /x HTTP/1.0\r\nContent-Length: 3\r\nX-Empty:\r\n\r\n",
    ];
    for request in requests {
        for split in 0..request.len() {
            assert_eq!(
                status_of(&request[..split]),
                Ok(HeadStatus::Partial),
                "split {split} of {request:?}"
            );
        }
        assert_eq!(status_of(request), Ok(HeadStatus::Complete));
    }
}

#[test]
fn leaves_body_and_pipelined_bytes_alone() {
    let buf = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhelloGET / HTTP/1.1\r\n";
    let head = parse(buf).unwrap();
    assert_eq!(head.body, BodyFraming::Length(5));
    assert_eq!(&buf[head.head_len..head.head_len + 5], b"hello");
}

#[test]
fn reuses_the_head_without_keeping_old_headers() {
    let mut head = RequestHead::new();
    parse_request_head(SIMPLE_GET, &Limits::default(), &mut head).unwrap();
    let capacity = head.headers.capacity();
    let second = b"GET / HTTP/1.0\r\n\r\n";
    parse_request_head(second, &Limits::default(), &mut head).unwrap();
    assert!(head.headers.is_empty());
    assert_eq!(head.headers.capacity(), capacity);
    assert_eq!(head.version, Version::Http10);
}

#[test]
fn skips_one_leading_empty_line() {
    let buf = b"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n";
    let head = parse(buf).unwrap();
    assert_eq!(head.method.of(buf), b"GET");
    assert_eq!(head.head_len, buf.len());
}

#[test]
fn rejects_a_second_leading_empty_line() {
    assert_eq!(
        error_of(b"\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"),
        ParseError::ExtraEmptyLine
    );
    assert_eq!(
        error_of(b"\r\n\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"),
        ParseError::ExtraEmptyLine
    );
    assert_eq!(
        error_of(b"\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"),
        ParseError::BareLineFeed
    );
}

#[test]
fn keeps_header_order_names_as_sent_and_trims_values() {
    let buf = b"GET / HTTP/1.1\r\nhost: a\r\nX_Under: \t v a l \t\r\nx-dup: 1\r\nX-DUP: 2\r\nEmpty:\r\n\r\n";
    let head = parse(buf).unwrap();
    let headers: Vec<(&[u8], &[u8])> = head
        .headers
        .iter()
        .map(|(n, v)| (n.of(buf), v.of(buf)))
        .collect();
    assert_eq!(
        headers,
        [
            (&b"host"[..], &b"a"[..]),
            (b"X_Under", b"v a l"),
            (b"x-dup", b"1"),
            (b"X-DUP", b"2"),
            (b"Empty", b"")
        ]
    );
}

#[test]
fn accepts_obs_text_in_header_values() {
    let buf = "GET / HTTP/1.1\r\nHost: a\r\nX: caf\u{e9}\r\n\r\n".as_bytes();
    assert!(parse(buf).is_ok());
}

#[test]
fn reads_connection_options_with_close_winning() {
    let cases: [(&[u8], ConnectionOption, bool); 6] = [
        (
            b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
            ConnectionOption::Close,
            false,
        ),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Keep-Alive, CLOSE\r\n\r\n",
            ConnectionOption::Close,
            false,
        ),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nConnection: close\r\n\r\n",
            ConnectionOption::Close,
            false,
        ),
        (b"GET / HTTP/1.0\r\n\r\n", ConnectionOption::Default, false),
        (
            b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
            ConnectionOption::KeepAlive,
            true,
        ),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\nConnection: te, keep-alive\r\n\r\n",
            ConnectionOption::KeepAlive,
            true,
        ),
    ];
    for (buf, option, keep_alive) in cases {
        let head = parse(buf).unwrap();
        assert_eq!(
            (head.connection, head.keep_alive()),
            (option, keep_alive),
            "{buf:?}"
        );
    }
}

#[test]
fn sees_expect_continue_only_on_http11() {
    let head =
        parse(b"PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\n")
            .unwrap();
    assert!(head.expect_continue);
    let head =
        parse(b"PUT / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n").unwrap();
    assert!(!head.expect_continue);
    let head = parse(b"PUT / HTTP/1.1\r\nHost: a\r\nExpect: something-else\r\n\r\n").unwrap();
    assert!(!head.expect_continue);
}

#[test]
fn notes_an_upgrade_header() {
    let head =
        parse(b"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
            .unwrap();
    assert!(head.upgrade);
    assert!(!parse(SIMPLE_GET).unwrap().upgrade);
}

#[test]
fn reads_content_length_and_chunked_framing() {
    let head = parse(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0042\r\n\r\n").unwrap();
    assert_eq!(head.body, BodyFraming::Length(42));
    let head = parse(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n").unwrap();
    assert_eq!(head.body, BodyFraming::Chunked);
    let max = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 18446744073709551615\r\n\r\n";
    assert_eq!(parse(max).unwrap().body, BodyFraming::Length(u64::MAX));
}

#[test]
fn rejects_content_length_with_chunked() {
    let buf =
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert_eq!(error_of(buf), ParseError::ContentLengthWithTransferEncoding);
    let buf =
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n";
    assert_eq!(error_of(buf), ParseError::ContentLengthWithTransferEncoding);
}

#[test]
fn rejects_a_repeated_content_length_even_when_equal() {
    let buf = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n";
    assert_eq!(error_of(buf), ParseError::DuplicateContentLength);
}

#[test]
fn rejects_content_length_that_is_not_plain_digits() {
    for value in [
        "-1",
        "+1",
        "-0",
        "0_1",
        "0 1",
        "5, 5",
        "bla",
        "",
        "0x10",
        "18446744073709551616",
    ] {
        let buf = format!("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: {value}\r\n\r\n");
        assert_eq!(
            error_of(buf.as_bytes()),
            ParseError::InvalidContentLength,
            "{value:?}"
        );
    }
}

#[test]
fn rejects_transfer_encoding_not_ending_in_a_single_chunked() {
    for value in [
        "gzip",
        "chunked, gzip",
        "chunked, chunked",
        "chunked;x=1",
        "chunked,",
        ", chunked",
        "",
        "chu nked",
    ] {
        let buf = format!("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: {value}\r\n\r\n");
        assert_eq!(
            error_of(buf.as_bytes()),
            ParseError::InvalidTransferEncoding,
            "{value:?}"
        );
    }
    let split = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert_eq!(error_of(split), ParseError::InvalidTransferEncoding);
}

#[test]
fn answers_501_to_codings_before_chunked() {
    for value in [
        "gzip, chunked",
        "identity, chunked",
        "x-compress;q=1, chunked",
        "foo, chunked",
    ] {
        let buf = format!("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: {value}\r\n\r\n");
        let error = error_of(buf.as_bytes());
        assert_eq!(
            (error.clone(), error.status()),
            (ParseError::UnsupportedTransferCoding, 501),
            "{value:?}"
        );
    }
    let split = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert_eq!(error_of(split), ParseError::UnsupportedTransferCoding);
}

#[test]
fn rejects_transfer_encoding_in_http10() {
    let buf = b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert_eq!(error_of(buf), ParseError::TransferEncodingInHttp10);
}

#[test]
fn rejects_http11_without_host_and_repeated_host() {
    assert_eq!(error_of(b"GET / HTTP/1.1\r\n\r\n"), ParseError::MissingHost);
    assert_eq!(
        error_of(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
        ParseError::DuplicateHost
    );
    assert_eq!(
        error_of(b"GET / HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n"),
        ParseError::DuplicateHost
    );
    assert!(parse(b"GET / HTTP/1.0\r\n\r\n").is_ok());
    assert!(parse(b"GET / HTTP/1.1\r\nHost:\r\n\r\n").is_ok());
}

#[test]
fn rejects_a_host_that_is_not_an_authority() {
    for value in ["a b", "evil/x", "user@host", "host:80:80", "[::1"] {
        let buf = format!("GET / HTTP/1.1\r\nHost: {value}\r\n\r\n");
        assert_eq!(
            error_of(buf.as_bytes()),
            ParseError::InvalidHost,
            "{value:?}"
        );
    }
}

#[test]
fn rejects_a_repeated_content_type() {
    let buf = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Type: a/b\r\nContent-Type: c/d\r\n\r\n";
    assert_eq!(error_of(buf), ParseError::DuplicateContentType);
}

#[test]
fn rejects_obsolete_line_folding() {
    assert_eq!(
        error_of(b"GET / HTTP/1.1\r\nHost: a\r\nLong: one\r\n two\r\n\r\n"),
        ParseError::ObsoleteLineFolding
    );
    assert_eq!(
        error_of(b"GET / HTTP/1.1\r\nHost: a\r\nLong: one\r\n\ttwo\r\n\r\n"),
        ParseError::ObsoleteLineFolding
    );
    assert_eq!(
        error_of(b"GET / HTTP/1.1\r\n Host: a\r\n\r\n"),
        ParseError::ObsoleteLineFolding
    );
}

#[test]
fn rejects_bare_cr_and_bare_lf() {
    assert_eq!(
        error_of(b"GET / HTTP/1.1\r\nHost: a\rX: b\r\n\r\n"),
        ParseError::BareCarriageReturn
    );
    assert_eq!(
        error_of(b"GET / HTTP/1.1\r\nHost: a\r\nX: b\rc\r\n\r\n"),
        ParseError::BareCarriageReturn
    );
    assert_eq!(
        error_of(b"GET / HTTP/1.1\nHost: a\r\n\r\n"),
        ParseError::BareLineFeed
    );
    assert_eq!(
        error_of(b"GET / HTTP/1.1\r\nHost: a\nContent-Length: 5\r\n\r\n"),
        ParseError::BareLineFeed
    );
    assert_eq!(
        error_of(b"GET / HTTP/1.1\r\nHost: a\n\n"),
        ParseError::BareLineFeed
    );
}

#[test]
fn rejects_control_bytes_in_values_and_names() {
    for value in [&b"a\0b"[..], b"a\x07b", b"a\x7fb", b"a\x1bb"] {
        let mut buf = b"GET / HTTP/1.1\r\nHost: a\r\nX: ".to_vec();
        buf.extend_from_slice(value);
        buf.extend_from_slice(b"\r\n\r\n");
        assert_eq!(error_of(&buf), ParseError::InvalidHeaderValue, "{value:?}");
    }
    assert_eq!(
        error_of(b"GET / HTTP/1.1\r\nHost: a\r\nba\0z: b\r\n\r\n"),
        ParseError::InvalidHeaderName
    );
}

#[test]
fn rejects_whitespace_before_the_colon() {
    assert_eq!(
        error_of(b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length : 3\r\n\r\n"),
        ParseError::InvalidHeaderName
    );
    assert_eq!(
        error_of(b"GET / HTTP/1.1\r\nHost: a\r\nX\t: 3\r\n\r\n"),
        ParseError::InvalidHeaderName
    );
}

#[test]
fn accepts_underscores_in_header_names() {
    let buf = b"GET / HTTP/1.0\r\nTransfer_Encoding: tricked\r\nContent_Length: -1\r\n\r\n";
    assert_eq!(parse(buf).unwrap().body, BodyFraming::None);
}

#[test]
fn rejects_methods_that_are_not_tokens() {
    for buf in [
        &b"GE(T / HTTP/1.1\r\n\r\n"[..],
        b"bla:rgh / HTTP/1.1\r\n\r\n",
        b"GET\0 / HTTP/1.1\r\n\r\n",
        b"\x16\x03\x01\x02\x00",
    ] {
        assert_eq!(error_of(buf), ParseError::InvalidMethod, "{buf:?}");
    }
    assert_eq!(
        error_of("G\u{df}T / HTTP/1.1\r\n\r\n".as_bytes()),
        ParseError::InvalidMethod
    );
}

#[test]
fn rejects_malformed_request_lines() {
    for buf in [
        &b"GET HTTP/1.1\r\n\r\n"[..],
        b"GET  / HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.1 \r\n\r\n",
        b"GET /\r\n\r\n",
    ] {
        assert_eq!(
            parse(buf).unwrap_err(),
            ParseError::InvalidRequestLine,
            "{buf:?}"
        );
    }
}

#[test]
fn rejects_targets_in_the_wrong_form() {
    for buf in [
        &b"GET * HTTP/1.1\r\nHost: a\r\n\r\n"[..],
        b"GET a.com:443 HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET foo/bar HTTP/1.1\r\nHost: a\r\n\r\n",
        b"CONNECT / HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET http://u:p@a.com/ HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET /\x80 HTTP/1.1\r\nHost: a\r\n\r\n",
    ] {
        assert_eq!(error_of(buf), ParseError::InvalidTarget, "{buf:?}");
    }
    assert_eq!(
        error_of(b"GET /a\x01b HTTP/1.1\r\nHost: a\r\n\r\n"),
        ParseError::InvalidTarget
    );
}

#[test]
fn accepts_connect_options_and_absolute_targets() {
    assert!(parse(b"CONNECT a.com:443 HTTP/1.1\r\nHost: a.com:443\r\n\r\n").is_ok());
    assert!(parse(b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n").is_ok());
    assert!(parse(b"GET http://a.com/x?y HTTP/1.1\r\nHost: a.com\r\n\r\n").is_ok());
}

#[test]
fn an_absolute_target_and_host_must_name_the_same_origin() {
    for same in [
        &b"GET http://a.com/x HTTP/1.1\r\nHost: a.com\r\n\r\n"[..],
        b"GET http://A.Com/x HTTP/1.1\r\nHost: a.cOM\r\n\r\n",
        b"GET http://a.com/x HTTP/1.1\r\nHost: a.com:80\r\n\r\n",
        b"GET http://a.com:/x HTTP/1.1\r\nHost: a.com\r\n\r\n",
        b"GET https://a.com HTTP/1.1\r\nHost: a.com:443\r\n\r\n",
        b"GET http://a.com:0080/ HTTP/1.1\r\nHost: a.com:80\r\n\r\n",
        b"GET http://[::1]:8080/ HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n",
        b"GET http://a.com/ HTTP/1.0\r\n\r\n",
    ] {
        assert!(parse(same).is_ok(), "{}", String::from_utf8_lossy(same));
    }
    for other in [
        &b"GET http://a.com/x HTTP/1.1\r\nHost: b.com\r\n\r\n"[..],
        b"GET http://a.com/x HTTP/1.1\r\nHost: a.com:8080\r\n\r\n",
        b"GET https://a.com/x HTTP/1.1\r\nHost: a.com:80\r\n\r\n",
        b"GET http://a.com/x HTTP/1.1\r\nHost: \r\n\r\n",
        b"GET http://[::1]/ HTTP/1.1\r\nHost: [::2]\r\n\r\n",
        b"GET http://a.com/ HTTP/1.0\r\nHost: a.com.\r\n\r\n",
    ] {
        assert_eq!(
            error_of(other),
            ParseError::HostNotTargetAuthority,
            "{}",
            String::from_utf8_lossy(other)
        );
    }
    assert_eq!(ParseError::HostNotTargetAuthority.status(), 400);
}

#[test]
fn answers_505_to_other_well_formed_versions() {
    for version in ["HTTP/2.0", "HTTP/0.9", "HTTP/1.2", "HTTP/3.0"] {
        let buf = format!("GET / {version}\r\nHost: a\r\n\r\n");
        let error = error_of(buf.as_bytes());
        assert_eq!(
            (error.clone(), error.status()),
            (ParseError::UnsupportedVersion, 505),
            "{version}"
        );
    }
    assert_eq!(
        status_of(b"GET / HTTP/2"),
        Err(ParseError::UnsupportedVersion)
    );
    assert_eq!(
        status_of(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
        Err(ParseError::UnsupportedVersion)
    );
}

#[test]
fn answers_400_to_malformed_versions() {
    for version in [
        "FTP/1.1",
        "HTTP/111",
        "HTTP/0.99",
        "http/1.1",
        "HTTP/1.10",
        "HTTP/1111111111.1",
        "HTTP/1",
    ] {
        let buf = format!("GET / {version}\r\nHost: a\r\n\r\n");
        assert_eq!(
            parse(buf.as_bytes()).unwrap_err().status(),
            400,
            "{version}"
        );
    }
}

#[test]
fn answers_414_to_a_long_request_line_even_before_it_ends() {
    let limits = Limits {
        max_request_line: 20,
        ..Limits::default()
    };
    let exact = b"GET /0123456 HTTP/1.1\r\nHost: a\r\n\r\n"; // 21-byte line
    assert_eq!(
        parse_with(exact, &limits).unwrap_err(),
        ParseError::RequestLineTooLong
    );
    let fits = b"GET /012345 HTTP/1.1\r\nHost: a\r\n\r\n"; // 20-byte line
    assert!(parse_with(fits, &limits).is_ok());
    let mut head = RequestHead::new();
    assert_eq!(
        parse_request_head(b"GET /0123456789abcdef", &limits, &mut head),
        Err(ParseError::RequestLineTooLong)
    );
    assert_eq!(
        parse_request_head(b"GET /012345 HTTP/1.1\r", &limits, &mut head),
        Ok(HeadStatus::Partial)
    );
    assert_eq!(ParseError::RequestLineTooLong.status(), 414);
}

#[test]
fn answers_431_to_a_large_head_even_before_it_ends() {
    let limits = Limits {
        max_head_size: 40,
        ..Limits::default()
    };
    let mut head = RequestHead::new();
    let partial = b"GET / HTTP/1.1\r\nHost: a\r\nX-Long: 0123456789abcdef";
    assert_eq!(
        parse_request_head(partial, &limits, &mut head),
        Err(ParseError::HeadTooLarge)
    );
    let complete = b"GET / HTTP/1.1\r\nHost: a\r\nX-Long: 0123456789\r\n\r\n";
    assert_eq!(
        parse_request_head(complete, &limits, &mut head),
        Err(ParseError::HeadTooLarge)
    );
    assert_eq!(ParseError::HeadTooLarge.status(), 431);
}

#[test]
fn answers_431_to_too_many_headers() {
    let limits = Limits {
        max_headers: 2,
        ..Limits::default()
    };
    let buf = b"GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\n\r\n";
    assert_eq!(
        parse_with(buf, &limits).unwrap_err(),
        ParseError::TooManyHeaders
    );
    assert_eq!(ParseError::TooManyHeaders.status(), 431);
    let mut many = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
    for i in 0..150 {
        many.extend_from_slice(format!("X-{i}: {i}\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    let roomy = Limits {
        max_headers: 200,
        ..Limits::default()
    };
    assert_eq!(parse_with(&many, &roomy).unwrap().headers.len(), 151);
    assert_eq!(parse(&many).unwrap_err(), ParseError::TooManyHeaders);
}

#[test]
fn gives_every_error_a_reason_and_a_status() {
    let all = [
        ParseError::RequestLineTooLong,
        ParseError::HeadTooLarge,
        ParseError::TooManyHeaders,
        ParseError::ExtraEmptyLine,
        ParseError::InvalidRequestLine,
        ParseError::InvalidMethod,
        ParseError::InvalidTarget,
        ParseError::InvalidVersion,
        ParseError::UnsupportedVersion,
        ParseError::InvalidHeaderName,
        ParseError::InvalidHeaderValue,
        ParseError::ObsoleteLineFolding,
        ParseError::BareLineFeed,
        ParseError::BareCarriageReturn,
        ParseError::MissingHost,
        ParseError::DuplicateHost,
        ParseError::InvalidHost,
        ParseError::HostNotTargetAuthority,
        ParseError::DuplicateContentType,
        ParseError::DuplicateContentLength,
        ParseError::InvalidContentLength,
        ParseError::ContentLengthWithTransferEncoding,
        ParseError::TransferEncodingInHttp10,
        ParseError::InvalidTransferEncoding,
        ParseError::UnsupportedTransferCoding,
    ];
    for error in all {
        assert!(!error.reason().is_empty());
        assert!(matches!(error.status(), 400 | 414 | 431 | 501 | 505));
        assert!(error.to_string().contains(error.reason()));
    }
}

/// The rule `check_line_endings` enforces, byte by byte, for comparison.
fn line_endings_by_bytes(head: &[u8]) -> Result<(), ParseError> {
    for (at, &b) in head.iter().enumerate() {
        if b == b'\n' && (at == 0 || head[at - 1] != b'\r') {
            return Err(ParseError::BareLineFeed);
        }
        if b == b'\r' && head.get(at + 1) != Some(&b'\n') {
            return Err(ParseError::BareCarriageReturn);
        }
    }
    Ok(())
}

#[test]
fn line_endings_are_checked_across_block_boundaries() {
    // Every placement of a CR, an LF and a CRLF in heads of 1 to 40 bytes (blocks are 16),
    // including a CRLF split across two blocks, against the byte-by-byte rule.
    for len in 1..=40usize {
        for first in 0..len {
            for (a, b) in [(b'\r', b'\n'), (b'\r', b'x'), (b'x', b'\n'), (b'\n', b'\r')] {
                let mut head = vec![b'x'; len];
                head[first] = a;
                if first + 1 < len {
                    head[first + 1] = b;
                }
                assert_eq!(
                    check_line_endings(&head),
                    line_endings_by_bytes(&head),
                    "{head:?}"
                );
            }
        }
    }
}

#[test]
fn line_endings_with_several_lines_are_checked_like_byte_by_byte() {
    // A well-formed CRLF at every place next to a faulty or good pair at every other place,
    // in heads of up to 36 bytes (three blocks and a tail): the first fault in order wins.
    for len in 2..=36usize {
        for good in 0..len - 1 {
            for first in 0..len {
                for (a, b) in [(b'\r', b'\n'), (b'\r', b'x'), (b'x', b'\n'), (b'\n', b'\r')] {
                    let mut head = vec![b'x'; len];
                    head[good] = b'\r';
                    head[good + 1] = b'\n';
                    head[first] = a;
                    if first + 1 < len {
                        head[first + 1] = b;
                    }
                    assert_eq!(
                        check_line_endings(&head),
                        line_endings_by_bytes(&head),
                        "{head:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn line_end_masks_match_the_bytes() {
    // Each of 16 places as CR, LF or neither (3^16 is too many: every place with every
    // value against two backgrounds, and a pseudo-random sweep).
    let mut blocks: Vec<[u8; 16]> = Vec::new();
    for background in [b'x', b'\r', b'\n'] {
        for at in 0..16 {
            for value in [b'\r', b'\n', b'x', 0x8d, 0x8a] {
                let mut block = [background; 16];
                block[at] = value;
                blocks.push(block);
            }
        }
    }
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..10_000 {
        let mut block = [0u8; 16];
        for byte in &mut block {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *byte = [b'\r', b'\n', b'a', 0x8d][(state % 4) as usize];
        }
        blocks.push(block);
    }
    for block in blocks {
        assert_eq!(
            line_end_masks(&block),
            line_end_masks_by_bytes(&block),
            "{block:?}"
        );
    }
}

#[test]
fn notes_where_the_last_x_forwarded_proto_line_is() {
    assert_eq!(parse(SIMPLE_GET).unwrap().forwarded_proto, None);
    let buf = b"GET / HTTP/1.1\r\nX-Forwarded-Proto: http\r\nHost: a\r\n\
                x-forwarded-PROTO: https\r\nX-Forwarded-Protocol: ftp\r\n\r\n";
    let head = parse(buf).unwrap();
    let index = head.forwarded_proto.expect("noted") as usize;
    assert_eq!(index, 2);
    assert_eq!(head.headers[index].1.of(buf), b"https");
    // The next head on the same value starts without the last one's note.
    let mut reused = head;
    parse_request_head(SIMPLE_GET, &Limits::default(), &mut reused).unwrap();
    assert_eq!(reused.forwarded_proto, None);
}
