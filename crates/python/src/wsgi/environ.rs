//! The WSGI environ (PEP 3333 and the CGI variables it inherits), built per request from a
//! per-worker template dict (the constant keys) and the parsed head. Keys are interned
//! strings; header values are decoded as latin-1, as PEP 3333 requires of native strings.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use pyo3::{intern, Bound};
use tines_proto::Version;
use tines_server::{Exchange, Local, Peer};

use super::input::Input;

/// Decodes bytes as latin-1 into a Python str (zero-copy check for ASCII).
pub fn latin1<'py>(py: Python<'py>, bytes: &[u8]) -> Bound<'py, PyString> {
    match std::str::from_utf8(bytes) {
        Ok(text) if text.is_ascii() => PyString::new(py, text),
        _ => PyString::new(py, &bytes.iter().map(|&b| b as char).collect::<String>()),
    }
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Percent-decodes a path (`%2F` becomes `/`, as CGI does; malformed escapes stay as sent).
pub fn percent_decode(path: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if !path.contains(&b'%') {
        return std::borrow::Cow::Borrowed(path);
    }
    let mut out = Vec::with_capacity(path.len());
    let mut i = 0;
    while i < path.len() {
        if path[i] == b'%' && i + 2 < path.len() {
            if let (Some(high), Some(low)) = (hex_value(path[i + 1]), hex_value(path[i + 2])) {
                out.push(high << 4 | low);
                i += 3;
                continue;
            }
        }
        out.push(path[i]);
        i += 1;
    }
    std::borrow::Cow::Owned(out)
}

/// Splits a request target into (path, query). Absolute-form targets lose their scheme and
/// authority (RFC 9112 3.2.2); `*` and authority-form keep no path.
pub fn split_target(target: &[u8]) -> (&[u8], &[u8]) {
    let (before, query) = match target.iter().position(|&b| b == b'?') {
        Some(pos) => (&target[..pos], &target[pos + 1..]),
        None => (target, &b""[..]),
    };
    if before.first() == Some(&b'/') || before == b"*" {
        return (before, query);
    }
    // absolute-form: scheme "://" authority path
    if let Some(pos) = before.windows(3).position(|w| w == b"://") {
        let rest = &before[pos + 3..];
        return match rest.iter().position(|&b| b == b'/') {
            Some(slash) => (&rest[slash..], query),
            None => (&b"/"[..], query),
        };
    }
    (&b""[..], query)
}

fn header_key<'py>(py: Python<'py>, name: &[u8], scratch: &mut String) -> Bound<'py, PyString> {
    // The most common request headers get interned keys (no allocation per request).
    let known = match name.len() {
        4 if name.eq_ignore_ascii_case(b"host") => Some(intern!(py, "HTTP_HOST")),
        6 if name.eq_ignore_ascii_case(b"accept") => Some(intern!(py, "HTTP_ACCEPT")),
        6 if name.eq_ignore_ascii_case(b"cookie") => Some(intern!(py, "HTTP_COOKIE")),
        6 if name.eq_ignore_ascii_case(b"origin") => Some(intern!(py, "HTTP_ORIGIN")),
        7 if name.eq_ignore_ascii_case(b"referer") => Some(intern!(py, "HTTP_REFERER")),
        10 if name.eq_ignore_ascii_case(b"user-agent") => Some(intern!(py, "HTTP_USER_AGENT")),
        10 if name.eq_ignore_ascii_case(b"connection") => Some(intern!(py, "HTTP_CONNECTION")),
        13 if name.eq_ignore_ascii_case(b"cache-control") => {
            Some(intern!(py, "HTTP_CACHE_CONTROL"))
        }
        13 if name.eq_ignore_ascii_case(b"authorization") => {
            Some(intern!(py, "HTTP_AUTHORIZATION"))
        }
        15 if name.eq_ignore_ascii_case(b"accept-encoding") => {
            Some(intern!(py, "HTTP_ACCEPT_ENCODING"))
        }
        15 if name.eq_ignore_ascii_case(b"accept-language") => {
            Some(intern!(py, "HTTP_ACCEPT_LANGUAGE"))
        }
        15 if name.eq_ignore_ascii_case(b"x-forwarded-for") => {
            Some(intern!(py, "HTTP_X_FORWARDED_FOR"))
        }
        _ => None,
    };
    if let Some(key) = known {
        return key.clone();
    }
    scratch.clear();
    scratch.push_str("HTTP_");
    for &b in name {
        scratch.push(if b == b'-' {
            '_'
        } else {
            b.to_ascii_uppercase() as char
        });
    }
    PyString::new(py, scratch)
}

/// What the environ needs from the worker (built once per worker).
pub struct EnvironContext {
    /// The constant keys, copied per request.
    pub template: Py<PyDict>,
}

fn host_and_port(host: &[u8]) -> (&[u8], Option<&[u8]>) {
    if host.first() == Some(&b'[') {
        if let Some(end) = host.iter().position(|&b| b == b']') {
            let rest = &host[end + 1..];
            return (&host[..=end], rest.strip_prefix(b":"));
        }
    }
    match host.iter().rposition(|&b| b == b':') {
        Some(pos) => (&host[..pos], Some(&host[pos + 1..])),
        None => (host, None),
    }
}

/// Builds the environ for the request held in `exchange`.
pub fn build<'py>(
    py: Python<'py>,
    context: &EnvironContext,
    exchange: &Exchange,
    input: &Bound<'py, Input>,
) -> PyResult<Bound<'py, PyDict>> {
    let env = context.template.bind(py).copy()?;
    let method = exchange.method();
    env.set_item(
        intern!(py, "REQUEST_METHOD"),
        match method {
            b"GET" => intern!(py, "GET").clone(),
            b"POST" => intern!(py, "POST").clone(),
            b"HEAD" => intern!(py, "HEAD").clone(),
            other => latin1(py, other),
        },
    )?;
    let target = exchange.target();
    let (path, query) = split_target(target);
    env.set_item(intern!(py, "PATH_INFO"), latin1(py, &percent_decode(path)))?;
    env.set_item(intern!(py, "QUERY_STRING"), latin1(py, query))?;
    let raw_uri = latin1(py, target);
    env.set_item(intern!(py, "RAW_URI"), &raw_uri)?;
    env.set_item(intern!(py, "REQUEST_URI"), raw_uri)?;
    env.set_item(
        intern!(py, "SERVER_PROTOCOL"),
        match exchange.version() {
            Version::Http11 => intern!(py, "HTTP/1.1"),
            Version::Http10 => intern!(py, "HTTP/1.0"),
        },
    )?;
    let decoded_length = exchange.decoded_body_length();
    let mut scratch = String::with_capacity(32);
    let mut host = None;
    let mut forwarded_proto = None;
    for (name, value) in exchange.headers() {
        if name.contains(&b'_') {
            // Dropped: `X_Forwarded_For` would land on the same key as `X-Forwarded-For`
            // and could spoof what a proxy set.
            continue;
        }
        if name.eq_ignore_ascii_case(b"content-type") {
            env.set_item(intern!(py, "CONTENT_TYPE"), latin1(py, value))?;
            continue;
        }
        if name.eq_ignore_ascii_case(b"content-length") {
            env.set_item(intern!(py, "CONTENT_LENGTH"), latin1(py, value))?;
            continue;
        }
        if decoded_length.is_some() && name.eq_ignore_ascii_case(b"transfer-encoding") {
            // The server decoded the chunked body before dispatch: the app gets a plain body
            // of known length (as behind a buffering proxy), `CONTENT_LENGTH` set below.
            continue;
        }
        if name.eq_ignore_ascii_case(b"host") {
            host = Some(value);
        } else if name.eq_ignore_ascii_case(b"x-forwarded-proto") {
            forwarded_proto = Some(value);
        }
        let key = header_key(py, name, &mut scratch);
        let value = latin1(py, value);
        match env.get_item(&key)? {
            Some(existing) => {
                // RFC 9110 5.3: repeated fields combine with ", "; Cookie uses "; " (RFC 6265 5.4).
                let separator = if name.eq_ignore_ascii_case(b"cookie") {
                    "; "
                } else {
                    ", "
                };
                let merged = format!(
                    "{}{separator}{}",
                    existing.extract::<String>()?,
                    value.to_str()?
                );
                env.set_item(key, merged)?;
            }
            None => env.set_item(key, value)?,
        }
    }
    if let Some(length) = decoded_length {
        env.set_item(intern!(py, "CONTENT_LENGTH"), length.to_string())?;
    }
    let (server_name, server_port) = match (host, exchange.local()) {
        (Some(host), local) => {
            let (name, port) = host_and_port(host);
            let default_port = match local {
                Local::Tcp(addr) => addr.port().to_string(),
                Local::Unix(_) => "80".to_string(),
            };
            (
                latin1(py, name),
                port.map(|p| latin1(py, p))
                    .unwrap_or_else(|| PyString::new(py, &default_port)),
            )
        }
        (None, Local::Tcp(addr)) => (
            PyString::new(py, &addr.ip().to_string()),
            PyString::new(py, &addr.port().to_string()),
        ),
        (None, Local::Unix(path)) => (PyString::new(py, path), PyString::new(py, "")),
    };
    env.set_item(intern!(py, "SERVER_NAME"), server_name)?;
    env.set_item(intern!(py, "SERVER_PORT"), server_port)?;
    // The same client address the access log shows (the exchange decides it once).
    let remote = exchange.client_ip().map(|ip| {
        let port = match exchange.peer() {
            Peer::Tcp(addr) => addr.port().to_string(),
            Peer::Unix => String::new(),
        };
        (ip.to_string(), port)
    });
    if exchange.peer_is_trusted_proxy() {
        if let Some(proto) = forwarded_proto {
            let proto = proto
                .split(|&b| b == b',')
                .next()
                .unwrap_or(b"")
                .trim_ascii();
            if proto.eq_ignore_ascii_case(b"https") {
                env.set_item(intern!(py, "wsgi.url_scheme"), intern!(py, "https"))?;
            } else if proto.eq_ignore_ascii_case(b"http") {
                env.set_item(intern!(py, "wsgi.url_scheme"), intern!(py, "http"))?;
            }
        }
    }
    if let Some((addr, port)) = remote {
        env.set_item(intern!(py, "REMOTE_ADDR"), addr)?;
        env.set_item(intern!(py, "REMOTE_PORT"), port)?;
    }
    env.set_item(intern!(py, "wsgi.input"), input)?;
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_origin_and_absolute_targets() {
        assert_eq!(split_target(b"/a/b?x=1"), (&b"/a/b"[..], &b"x=1"[..]));
        assert_eq!(split_target(b"http://h:8/p?q"), (&b"/p"[..], &b"q"[..]));
        assert_eq!(split_target(b"http://h"), (&b"/"[..], &b""[..]));
        assert_eq!(split_target(b"*"), (&b"*"[..], &b""[..]));
    }

    #[test]
    fn percent_decodes_paths_and_keeps_malformed_escapes() {
        assert_eq!(&*percent_decode(b"/a%20b%2Fc"), b"/a b/c");
        assert_eq!(&*percent_decode(b"/100%"), b"/100%");
        assert_eq!(&*percent_decode(b"/%zz%4"), b"/%zz%4");
    }

    #[test]
    fn splits_host_and_port() {
        assert_eq!(
            host_and_port(b"example.com:8080"),
            (&b"example.com"[..], Some(&b"8080"[..]))
        );
        assert_eq!(
            host_and_port(b"[::1]:80"),
            (&b"[::1]"[..], Some(&b"80"[..]))
        );
        assert_eq!(host_and_port(b"example.com"), (&b"example.com"[..], None));
    }
}
