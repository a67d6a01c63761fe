//! Unit tests for `parse_proxy_header`: the spec's examples for both versions, every
//! rejection, and every prefix of a valid header being `Partial`.

use super::*;

fn complete(input: &[u8]) -> (usize, ProxyHeader) {
    match parse_proxy_header(input) {
        Ok(ProxyStatus::Complete { consumed, header }) => (consumed, header),
        other => panic!(
            "expected a complete header for {:?}, got {other:?}",
            String::from_utf8_lossy(input)
        ),
    }
}

fn error_of(input: &[u8]) -> ProxyError {
    match parse_proxy_header(input) {
        Err(err) => err,
        other => panic!(
            "expected an error for {:?}, got {other:?}",
            String::from_utf8_lossy(input)
        ),
    }
}

fn proxied(source: &str, destination: &str) -> ProxyHeader {
    ProxyHeader::Proxied {
        source: source.parse().unwrap(),
        destination: destination.parse().unwrap(),
    }
}

/// A version 2 header: command byte, family/transport byte, then the payload.
fn v2(command: u8, family: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = V2_SIGNATURE.to_vec();
    out.push(command);
    out.push(family);
    out.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

fn inet_payload() -> Vec<u8> {
    // 192.0.2.1:56324 -> 198.51.100.7:443
    let mut payload = vec![192, 0, 2, 1, 198, 51, 100, 7];
    payload.extend_from_slice(&56324u16.to_be_bytes());
    payload.extend_from_slice(&443u16.to_be_bytes());
    payload
}

fn assert_every_prefix_is_partial(input: &[u8], consumed: usize) {
    for cut in 0..consumed {
        assert_eq!(
            parse_proxy_header(&input[..cut]),
            Ok(ProxyStatus::Partial),
            "prefix of {cut} bytes"
        );
    }
}

#[test]
fn parses_a_v1_tcp4_line_and_leaves_the_request_after_it() {
    let input = b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\nGET / HTTP/1.1\r\n\r\n";
    let (consumed, header) = complete(input);
    assert_eq!(&input[consumed..], b"GET / HTTP/1.1\r\n\r\n");
    assert_eq!(header, proxied("192.168.0.1:56324", "192.168.0.11:443"));
    assert_every_prefix_is_partial(input, consumed);
}

#[test]
fn parses_the_spec_worst_case_v1_lines() {
    let tcp4 = b"PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n";
    assert_eq!(complete(tcp4).0, tcp4.len());
    let full = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";
    let tcp6 = format!("PROXY TCP6 {full} {full} 65535 65535\r\n");
    let (consumed, header) = complete(tcp6.as_bytes());
    assert_eq!(consumed, tcp6.len());
    assert_eq!(
        header,
        proxied(&format!("[{full}]:65535"), &format!("[{full}]:65535"))
    );
    // The longest line the spec allows: exactly 107 bytes.
    let unknown = format!("PROXY UNKNOWN {full} {full} 65535 65535\r\n");
    assert_eq!(unknown.len(), MAX_V1_LENGTH);
    assert_eq!(
        complete(unknown.as_bytes()),
        (MAX_V1_LENGTH, ProxyHeader::Unknown)
    );
}

#[test]
fn parses_a_v1_tcp6_line() {
    let input = b"PROXY TCP6 2001:db8::1 ::1 40000 8080\r\n";
    assert_eq!(
        complete(input).1,
        proxied("[2001:db8::1]:40000", "[::1]:8080")
    );
}

#[test]
fn v1_unknown_keeps_the_real_endpoints_and_ignores_the_rest_of_its_line() {
    assert_eq!(complete(b"PROXY UNKNOWN\r\n"), (15, ProxyHeader::Unknown));
    assert_eq!(complete(b"PROXY UNKNOWN whatever comes 1 2\r\nGET").0, 34);
}

#[test]
fn refuses_a_client_that_speaks_http_on_its_first_byte() {
    assert_eq!(error_of(b"G"), ProxyError::NotProxyHeader);
    assert_eq!(error_of(b"GET / HTTP/1.1\r\n"), ProxyError::NotProxyHeader);
    assert_eq!(error_of(b"PROXX"), ProxyError::NotProxyHeader);
    assert_eq!(error_of(b"proxy TCP4"), ProxyError::NotProxyHeader);
    assert_eq!(error_of(b"\r\n\r\n\0\r\nQUIX"), ProxyError::NotProxyHeader);
    assert_eq!(error_of(b"\r\nGET"), ProxyError::NotProxyHeader);
}

#[test]
fn refuses_v1_lines_without_crlf() {
    assert_eq!(
        error_of(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n"),
        ProxyError::V1LineEnd
    );
    assert_eq!(
        error_of(b"PROXY TCP4 1.2.3.4\r5.6.7.8 1 2\r\n"),
        ProxyError::V1LineEnd
    );
    assert_eq!(error_of(b"PROXY TCP4 1.2.3.4\rx"), ProxyError::V1LineEnd);
    let endless = [b"PROXY UNKNOWN ".as_slice(), &[b'a'; 200]].concat();
    assert_eq!(error_of(&endless), ProxyError::V1LineEnd);
    // 106 bytes without an end are still a possible line; the 107th must be its LF.
    assert_eq!(
        parse_proxy_header(&endless[..MAX_V1_LENGTH - 1]),
        Ok(ProxyStatus::Partial)
    );
    assert_eq!(error_of(&endless[..MAX_V1_LENGTH]), ProxyError::V1LineEnd);
}

#[test]
fn refuses_malformed_v1_fields() {
    let cases: [(&[u8], ProxyError); 14] = [
        (
            b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n",
            ProxyError::V1Protocol,
        ),
        (
            b"PROXY  TCP4 1.2.3.4 5.6.7.8 1 2\r\n",
            ProxyError::V1Protocol,
        ),
        (b"PROXY \r\n", ProxyError::V1Protocol),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n", ProxyError::V1Fields),
        (
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n",
            ProxyError::V1Fields,
        ),
        (b"PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n", ProxyError::V1Fields),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \r\n", ProxyError::V1Fields),
        (b"PROXY TCP4 1.2.3 5.6.7.8 1 2\r\n", ProxyError::V1Address),
        (
            b"PROXY TCP4 01.2.3.4 5.6.7.8 1 2\r\n",
            ProxyError::V1Address,
        ),
        (b"PROXY TCP4 ::1 5.6.7.8 1 2\r\n", ProxyError::V1Address),
        (b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n", ProxyError::V1Address),
        (
            b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n",
            ProxyError::V1Port,
        ),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 080 2\r\n", ProxyError::V1Port),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 -2\r\n", ProxyError::V1Port),
    ];
    for (input, expected) in cases {
        assert_eq!(
            error_of(input),
            expected,
            "{:?}",
            String::from_utf8_lossy(input)
        );
    }
    assert_eq!(
        complete(b"PROXY TCP4 1.2.3.4 5.6.7.8 0 0\r\n").1,
        proxied("1.2.3.4:0", "5.6.7.8:0")
    );
}

#[test]
fn parses_a_v2_proxy_over_tcp4() {
    let mut input = v2(0x21, 0x11, &inet_payload());
    let consumed_expected = input.len();
    input.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
    let (consumed, header) = complete(&input);
    assert_eq!(consumed, consumed_expected);
    assert_eq!(header, proxied("192.0.2.1:56324", "198.51.100.7:443"));
    assert_every_prefix_is_partial(&input, consumed);
}

#[test]
fn parses_a_v2_proxy_over_tcp6() {
    let source: Ipv6Addr = "2001:db8::1".parse().unwrap();
    let destination: Ipv6Addr = "2001:db8::2".parse().unwrap();
    let mut payload = source.octets().to_vec();
    payload.extend_from_slice(&destination.octets());
    payload.extend_from_slice(&1234u16.to_be_bytes());
    payload.extend_from_slice(&80u16.to_be_bytes());
    assert_eq!(
        complete(&v2(0x21, 0x21, &payload)).1,
        proxied("[2001:db8::1]:1234", "[2001:db8::2]:80")
    );
}

#[test]
fn skips_v2_tlvs_within_the_length() {
    let mut payload = inet_payload();
    // PP2_TYPE_ALPN "h2", then a PP2_TYPE_NOOP of 0 bytes.
    payload.extend_from_slice(&[0x01, 0x00, 0x02, b'h', b'2', 0x04, 0x00, 0x00]);
    let input = v2(0x21, 0x11, &payload);
    assert_eq!(
        complete(&input),
        (input.len(), proxied("192.0.2.1:56324", "198.51.100.7:443"))
    );
    let mut overrun = inet_payload();
    overrun.extend_from_slice(&[0x01, 0x00, 0x05, b'h', b'2']);
    assert_eq!(error_of(&v2(0x21, 0x11, &overrun)), ProxyError::V2Tlv);
    let mut stub = inet_payload();
    stub.extend_from_slice(&[0x01, 0x00]);
    assert_eq!(error_of(&v2(0x21, 0x11, &stub)), ProxyError::V2Tlv);
}

#[test]
fn v2_local_keeps_the_real_endpoints_whatever_its_block_says() {
    assert_eq!(complete(&v2(0x20, 0x00, &[])), (16, ProxyHeader::Local));
    let input = v2(0x20, 0x11, &inet_payload());
    assert_eq!(complete(&input), (input.len(), ProxyHeader::Local));
}

#[test]
fn v2_unspec_and_unix_families_keep_the_real_endpoints() {
    assert_eq!(complete(&v2(0x21, 0x00, &[])).1, ProxyHeader::Unknown);
    assert_eq!(
        complete(&v2(0x21, 0x31, &[0u8; 216])).1,
        ProxyHeader::Unknown
    );
    assert_eq!(
        complete(&v2(0x21, 0x10, &inet_payload())).1,
        ProxyHeader::Unknown
    );
}

#[test]
fn refuses_malformed_v2_headers() {
    assert_eq!(
        error_of(&v2(0x11, 0x11, &inet_payload())),
        ProxyError::V2Version
    );
    assert_eq!(
        error_of(&v2(0x22, 0x11, &inet_payload())),
        ProxyError::V2Version
    );
    assert_eq!(
        error_of(&v2(0x21, 0x41, &inet_payload())),
        ProxyError::V2Family
    );
    assert_eq!(
        error_of(&v2(0x21, 0x13, &inet_payload())),
        ProxyError::V2Family
    );
    assert_eq!(
        error_of(&v2(0x21, 0x12, &inet_payload())),
        ProxyError::V2Family
    );
    assert_eq!(
        error_of(&v2(0x21, 0x11, &inet_payload()[..11])),
        ProxyError::V2AddressLength
    );
    assert_eq!(
        error_of(&v2(0x21, 0x21, &inet_payload())),
        ProxyError::V2AddressLength
    );
}

#[test]
fn refuses_a_v2_length_over_the_cap_before_it_arrives() {
    let mut input = V2_SIGNATURE.to_vec();
    input.extend_from_slice(&[0x21, 0x11]);
    input.extend_from_slice(&((MAX_V2_PAYLOAD + 1) as u16).to_be_bytes());
    assert_eq!(error_of(&input), ProxyError::V2TooLong);
    // At the cap exactly: the addresses and one TLV that covers the rest.
    let mut at_cap = inet_payload();
    at_cap.push(0xEE);
    at_cap.extend_from_slice(&((MAX_V2_PAYLOAD - 12 - 3) as u16).to_be_bytes());
    at_cap.resize(MAX_V2_PAYLOAD, 0);
    let input = v2(0x21, 0x11, &at_cap);
    assert_eq!(complete(&input).0, 16 + MAX_V2_PAYLOAD);
}

#[test]
fn answers_the_same_when_the_header_comes_byte_by_byte() {
    let inputs = [
        b"PROXY TCP4 10.0.0.1 10.0.0.2 1000 80\r\nGET".to_vec(),
        v2(0x21, 0x11, &inet_payload()),
        b"PROXY TCP4 10.0.0.1 10.0.0.2 1000 80\n".to_vec(),
    ];
    for input in inputs {
        let whole = parse_proxy_header(&input);
        let mut decided = None;
        for cut in 1..=input.len() {
            match parse_proxy_header(&input[..cut]) {
                Ok(ProxyStatus::Partial) => assert!(decided.is_none(), "undecided again"),
                outcome => {
                    if decided.is_none() {
                        decided = Some(outcome);
                    }
                    assert_eq!(Some(outcome), decided);
                }
            }
        }
        assert_eq!(decided, Some(whole));
    }
}
