//! URLs, name resolution and request encoding.
//!
//! Owns: `http://host[:port][/path][?query]` parsing (also `https://`, and
//! `ws://`/`wss://`; IPv6 literals in brackets), resolving the host once before
//! the run, and encoding each request's bytes once (for HTTP/2, its head and body once). Must not: open sockets or
//! sessions (`engine`), or decide what is trusted (`tls`).

use std::net::{SocketAddr, ToSocketAddrs};

use bytes::Bytes;

/// Where a URL points.
#[derive(Debug, Clone)]
pub struct Target {
    /// Host as written (brackets stripped for IPv6).
    pub host: String,
    /// Port (80 when absent; 443 for `https://` and `wss://`).
    pub port: u16,
    /// Path and query, `/` when absent.
    pub path: String,
    /// Host header value (`host[:port]` as written).
    pub authority: String,
    /// Resolved address (filled by `resolve`).
    pub addr: SocketAddr,
    /// A `ws://` URL: the connection opens with a WebSocket handshake and each request is a
    /// message (echoed by the server).
    pub websocket: bool,
    /// An `https://` or `wss://` URL: each connection is a TLS session.
    pub tls: bool,
}

/// Parses an `http://`, `https://`, `ws://` or `wss://` URL; the error is the one-line message.
pub fn parse_url(url: &str) -> Result<Target, String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(format!("bad URL '{url}' (want http://host[:port]/path)"));
    };
    let (websocket, tls) = match scheme.to_ascii_lowercase().as_str() {
        "http" => (false, false),
        "https" => (false, true),
        "ws" => (true, false),
        "wss" => (true, true),
        _ => {
            return Err(format!(
                "unsupported scheme '{scheme}' in '{url}' (only http, https, ws and wss)"
            ))
        }
    };
    let split = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(split);
    let tail = tail.split('#').next().unwrap_or_default();
    let path = if tail.is_empty() {
        "/".to_string()
    } else if tail.starts_with('?') {
        format!("/{tail}")
    } else {
        tail.to_string()
    };
    if path.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(format!(
            "bad URL '{url}': spaces or control bytes in the path"
        ));
    }
    if authority.contains('@') {
        return Err(format!("bad URL '{url}': user info is not supported"));
    }
    let (host, port_text) = if let Some(inner) = authority.strip_prefix('[') {
        let Some((host, after)) = inner.split_once(']') else {
            return Err(format!("bad URL '{url}': unclosed '[' in the host"));
        };
        match after {
            "" => (host, None),
            _ => match after.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return Err(format!("bad URL '{url}': junk after ']'")),
            },
        }
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err(format!("bad URL '{url}': no host"));
    }
    if !host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-._~:%".contains(&b))
    {
        return Err(format!("bad URL '{url}': invalid host '{host}'"));
    }
    let port = match port_text {
        None if tls => 443,
        None => 80,
        Some(text) => match text.parse::<u16>() {
            Ok(port) if port > 0 && !text.starts_with('+') => port,
            _ => return Err(format!("bad URL '{url}': invalid port '{text}'")),
        },
    };
    Ok(Target {
        host: host.to_string(),
        port,
        path,
        authority: authority.to_string(),
        addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        websocket,
        tls,
    })
}

/// Resolves the target's host (first address, IPv4 preferred).
pub fn resolve(target: &Target) -> Result<SocketAddr, String> {
    let addrs: Vec<SocketAddr> = (target.host.as_str(), target.port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve host '{}': {e}", target.host))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| format!("cannot resolve host '{}': no address", target.host))
}

/// A WebSocket opening handshake (RFC 6455 4.1) for `target` (the key is fixed: a load
/// generator checks no `Sec-WebSocket-Accept`).
pub fn encode_handshake(target: &Target) -> Vec<u8> {
    format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         User-Agent: tines-bench/{}\r\n\r\n",
        target.path,
        target.authority,
        env!("CARGO_PKG_VERSION")
    )
    .into_bytes()
}

/// A client's text frame carrying `message` (masked, as a client's must be, RFC 6455 5.3;
/// the same key every time: the server unmasks whatever the key).
pub fn encode_text_frame(message: &[u8]) -> Vec<u8> {
    const MASK: [u8; 4] = [0x1f, 0x2e, 0x3d, 0x4c];
    let mut out = Vec::with_capacity(message.len() + 14);
    out.push(0x81);
    let length = message.len();
    if length < 126 {
        out.push(0x80 | length as u8);
    } else if length <= usize::from(u16::MAX) {
        out.push(0x80 | 126);
        out.extend_from_slice(&(length as u16).to_be_bytes());
    } else {
        out.push(0x80 | 127);
        out.extend_from_slice(&(length as u64).to_be_bytes());
    }
    out.extend_from_slice(&MASK);
    out.extend(message.iter().enumerate().map(|(i, b)| b ^ MASK[i % 4]));
    out
}

/// Encodes one request: request line, Host, the user's headers, a
/// User-Agent unless given, Content-Length for a body, `Connection: close`
/// without keep-alive.
pub fn encode_request(
    method: &str,
    target: &Target,
    headers: &[(String, String)],
    body: Option<&[u8]>,
    keepalive: bool,
) -> Vec<u8> {
    let has = |name: &str| headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    let mut out = Vec::with_capacity(128 + body.map_or(0, <[u8]>::len));
    out.extend_from_slice(format!("{method} {} HTTP/1.1\r\n", target.path).as_bytes());
    if !has("host") {
        out.extend_from_slice(format!("Host: {}\r\n", target.authority).as_bytes());
    }
    for (name, value) in headers {
        if name.eq_ignore_ascii_case("content-length") && body.is_some() {
            continue;
        }
        out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    if !has("user-agent") {
        out.extend_from_slice(
            concat!(
                "User-Agent: tines-bench/",
                env!("CARGO_PKG_VERSION"),
                "\r\n"
            )
            .as_bytes(),
        );
    }
    if let Some(body) = body {
        out.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    }
    if !keepalive && !has("connection") {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if let Some(body) = body {
        out.extend_from_slice(body);
    }
    out
}

/// A request prepared once for HTTP/2: its head (cloned for each stream) and its body.
#[derive(Debug, Clone)]
pub struct H2Request {
    /// Method, URI (scheme, authority, path) and the header fields.
    pub head: http::Request<()>,
    /// The body, shared by every stream that sends it.
    pub body: Option<Bytes>,
}

/// Header fields HTTP/2 forbids in a request (RFC 9113 8.2.2): a usage error, rather than a
/// request the client's codec would refuse at every stream.
const CONNECTION_SPECIFIC: [&str; 5] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

/// Prepares one request for HTTP/2: `:method`, `:scheme`, `:authority` (the Host header if
/// one is given, else the URL's), `:path`, the user's headers (lowercased by the codec), a
/// User-Agent unless given, `content-length` for a body. The error is the one-line message.
pub fn h2_request(
    method: &str,
    target: &Target,
    headers: &[(String, String)],
    body: Option<&[u8]>,
) -> Result<H2Request, String> {
    let authority = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("host"))
        .map_or(target.authority.as_str(), |(_, v)| v.as_str());
    let scheme = if target.tls { "https" } else { "http" };
    let mut builder = http::Request::builder()
        .method(method)
        .uri(format!("{scheme}://{authority}{}", target.path))
        .version(http::Version::HTTP_2);
    let has = |name: &str| headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    for (name, value) in headers {
        let lower = name.to_ascii_lowercase();
        if lower == "host" || (lower == "content-length" && body.is_some()) {
            continue;
        }
        if CONNECTION_SPECIFIC.contains(&lower.as_str())
            || (lower == "te" && !value.eq_ignore_ascii_case("trailers"))
        {
            return Err(format!(
                "header '{name}' is connection-specific: HTTP/2 does not send it"
            ));
        }
        builder = builder.header(lower, value.as_str());
    }
    if !has("user-agent") {
        builder = builder.header(
            "user-agent",
            concat!("tines-bench/", env!("CARGO_PKG_VERSION")),
        );
    }
    if let Some(body) = body {
        builder = builder.header("content-length", body.len());
    }
    let head = builder
        .body(())
        .map_err(|e| format!("cannot make an HTTP/2 request of it: {e}"))?;
    Ok(H2Request {
        head,
        body: body.map(Bytes::copy_from_slice),
    })
}

#[cfg(test)]
mod tests {

    #[test]
    fn ws_urls_are_websocket_targets_and_wss_ones_speak_tls() {
        let t = parse_url("ws://127.0.0.1:8080/chat?room=1").unwrap();
        assert!(t.websocket && !t.tls);
        assert_eq!((t.port, t.path.as_str()), (8080, "/chat?room=1"));
        assert!(!parse_url("http://127.0.0.1/").unwrap().websocket);
        let secure = parse_url("wss://h/").unwrap();
        assert!(secure.websocket && secure.tls);
        assert_eq!(secure.port, 443);
        let handshake = String::from_utf8(encode_handshake(&t)).unwrap();
        assert!(handshake.starts_with("GET /chat?room=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"));
        assert!(handshake.contains("Upgrade: websocket\r\n"));
        assert!(handshake.ends_with("\r\n\r\n"));
    }

    #[test]
    fn text_frames_are_masked_with_each_length_form() {
        for size in [0usize, 125, 126, 65_535, 65_536] {
            let message: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
            let frame = encode_text_frame(&message);
            assert_eq!(frame[0], 0x81);
            assert_eq!(frame[1] & 0x80, 0x80, "a client frame is masked");
            let (length, header) = match frame[1] & 0x7f {
                126 => (u16::from_be_bytes([frame[2], frame[3]]) as usize, 4),
                127 => (
                    u64::from_be_bytes(frame[2..10].try_into().unwrap()) as usize,
                    10,
                ),
                short => (short as usize, 2),
            };
            assert_eq!(length, size);
            let mask = &frame[header..header + 4];
            let unmasked: Vec<u8> = frame[header + 4..]
                .iter()
                .enumerate()
                .map(|(i, b)| b ^ mask[i % 4])
                .collect();
            assert_eq!(unmasked, message);
        }
    }

    use super::*;

    #[test]
    fn urls() {
        let t = parse_url("http://127.0.0.1:8080/a/b?x=1").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("127.0.0.1", 8080, "/a/b?x=1")
        );
        assert_eq!(t.authority, "127.0.0.1:8080");
        let t = parse_url("http://localhost").unwrap();
        assert_eq!((t.port, t.path.as_str()), (80, "/"));
        let t = parse_url("http://[::1]:9/?q").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("::1", 9, "/?q")
        );
        let t = parse_url("https://x/").unwrap();
        assert!(t.tls && !t.websocket);
        assert_eq!(
            (t.port, t.path.as_str(), t.authority.as_str()),
            (443, "/", "x")
        );
        let t = parse_url("HTTPS://x:8443/p").unwrap();
        assert_eq!((t.tls, t.port), (true, 8443));
        assert!(!parse_url("http://x/").unwrap().tls);
        assert!(parse_url("ftp://x/")
            .unwrap_err()
            .contains("unsupported scheme"));
        assert!(parse_url("localhost:80").unwrap_err().contains("bad URL"));
        assert!(parse_url("http://:80/").unwrap_err().contains("no host"));
        assert!(parse_url("http://h:99999/")
            .unwrap_err()
            .contains("invalid port"));
        assert!(parse_url("http://h:0/").is_err());
        assert!(parse_url("http://h/a b").is_err());
    }

    #[test]
    fn h2_requests_carry_pseudo_headers_and_refuse_connection_fields() {
        let t = parse_url("http://h:1/p?q").unwrap();
        let r = h2_request("POST", &t, &[("X-A".into(), "b".into())], Some(b"hi")).unwrap();
        assert_eq!(r.head.method(), "POST");
        assert_eq!(r.head.uri().to_string(), "http://h:1/p?q");
        assert_eq!(r.head.headers()["x-a"], "b");
        assert_eq!(r.head.headers()["content-length"], "2");
        assert!(r.head.headers().contains_key("user-agent"));
        assert_eq!(r.body.as_deref(), Some(&b"hi"[..]));
        let secure = parse_url("https://h/").unwrap();
        let r = h2_request("GET", &secure, &[("Host".into(), "other:8".into())], None).unwrap();
        assert_eq!(r.head.uri().to_string(), "https://other:8/");
        assert!(!r.head.headers().contains_key("host") && r.body.is_none());
        let refused = h2_request("GET", &t, &[("Connection".into(), "close".into())], None);
        assert!(refused.unwrap_err().contains("connection-specific"));
        assert!(h2_request("GET", &t, &[("te".into(), "gzip".into())], None).is_err());
        assert!(h2_request("GET", &t, &[("TE".into(), "trailers".into())], None).is_ok());
    }

    #[test]
    fn encoding() {
        let t = parse_url("http://h:1/p").unwrap();
        let bytes = encode_request(
            "POST",
            &t,
            &[("X-A".into(), "b".into())],
            Some(b"hi"),
            false,
        );
        let text = String::from_utf8(bytes).unwrap();
        assert!(
            text.starts_with("POST /p HTTP/1.1\r\nHost: h:1\r\nX-A: b\r\nUser-Agent: tines-bench/")
        );
        assert!(text.ends_with("Content-Length: 2\r\nConnection: close\r\n\r\nhi"));
    }
}
