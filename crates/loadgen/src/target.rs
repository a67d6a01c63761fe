//! URLs, name resolution and request encoding.
//!
//! Owns: `http://host[:port][/path][?query]` parsing (IPv6 literals in
//! brackets), resolving the host once before the run, and encoding each
//! request's bytes once. Must not: support https (TLS is not built in; that
//! is a usage error).

use std::net::{SocketAddr, ToSocketAddrs};

/// Where a URL points.
#[derive(Debug, Clone)]
pub struct Target {
    /// Host as written (brackets stripped for IPv6).
    pub host: String,
    /// Port (80 when absent).
    pub port: u16,
    /// Path and query, `/` when absent.
    pub path: String,
    /// Host header value (`host[:port]` as written).
    pub authority: String,
    /// Resolved address (filled by `resolve`).
    pub addr: SocketAddr,
}

/// Parses an `http://` URL; the error is the one-line message.
pub fn parse_url(url: &str) -> Result<Target, String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(format!("bad URL '{url}' (want http://host[:port]/path)"));
    };
    if !scheme.eq_ignore_ascii_case("http") {
        if scheme.eq_ignore_ascii_case("https") {
            return Err(format!(
                "unsupported scheme 'https' in '{url}': TLS is not built into tines bench"
            ));
        }
        return Err(format!(
            "unsupported scheme '{scheme}' in '{url}' (only http)"
        ));
    }
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

#[cfg(test)]
mod tests {
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
        assert!(parse_url("https://x/").unwrap_err().contains("TLS"));
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
