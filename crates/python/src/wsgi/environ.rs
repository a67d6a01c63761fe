//! The WSGI environ (PEP 3333 and the CGI variables it inherits), built per request from a
//! per-worker template dict (the constant keys) and the parsed head. Keys are interned
//! strings; header values are decoded as latin-1, as PEP 3333 requires of native strings.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use pyo3::{intern, Bound};
use std::net::IpAddr;

use tines_proto::Version;
use tines_server::{Exchange, Local, Peer};

use super::input::Input;

/// Decodes bytes as latin-1 into a Python str: CPython's own decoder, one pass over the
/// bytes (checking for UTF-8 and ASCII first, then decoding UTF-8, was three).
pub fn latin1<'py>(py: Python<'py>, bytes: &[u8]) -> PyResult<Bound<'py, PyString>> {
    // SAFETY: the pointer and length describe `bytes`, alive for the call; latin-1 decodes
    // any byte sequence, so the call fails only when memory runs out.
    let decoded = unsafe {
        pyo3::ffi::PyUnicode_DecodeLatin1(
            bytes.as_ptr().cast(),
            bytes.len() as pyo3::ffi::Py_ssize_t,
            std::ptr::null(),
        )
    };
    if decoded.is_null() {
        // Out of memory: a MemoryError, and the request a 500.
        return Err(PyErr::fetch(py));
    }
    // SAFETY: a new reference to a str, as PyUnicode_DecodeLatin1 documents.
    Ok(unsafe { Bound::from_owned_ptr(py, decoded).cast_into_unchecked() })
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

/// The keys every request sets, or deletes when it has no value (`REMOTE_ADDR` and
/// `REMOTE_PORT` on a Unix socket without a forwarded client).
const PER_REQUEST_KEYS: [&str; 11] = [
    "REQUEST_METHOD",
    "PATH_INFO",
    "QUERY_STRING",
    "RAW_URI",
    "REQUEST_URI",
    "SERVER_PROTOCOL",
    "SERVER_NAME",
    "SERVER_PORT",
    "REMOTE_ADDR",
    "REMOTE_PORT",
    "wsgi.input",
];

/// What the environ needs from the worker (built once per worker).
pub struct EnvironContext {
    /// The constant keys, and `None` under each per-request key (set or removed by every
    /// request), copied per request.
    template: Py<PyDict>,
}

impl EnvironContext {
    /// A context whose template holds `constants`, `None` under each of
    /// [`PER_REQUEST_KEYS`], and room for about twenty request headers.
    ///
    /// Why: CPython copies a dict by cloning its hash table at the same size. A copy of the
    /// constants alone (a table of 16) grew twice per request as the per-request keys and
    /// headers went in, each time rebuilding its index (about 0.1 µs of a 10 µs request). With
    /// the per-request keys present, setting them replaces values in place; and one table
    /// growth forced here (padding keys inserted, then removed) leaves the copies room for the
    /// headers. Behaviour does not depend on it: only the number of resizes does.
    pub fn new<'py>(py: Python<'py>, constants: &Bound<'py, PyDict>) -> PyResult<Self> {
        // Interned keys, the same objects as the `intern!` keys `build` sets: a lookup then
        // matches by identity instead of comparing the characters.
        let template = PyDict::new(py);
        for (key, value) in constants.iter() {
            template.set_item(PyString::intern(py, key.extract::<&str>()?), value)?;
        }
        for key in PER_REQUEST_KEYS {
            template.set_item(PyString::intern(py, key), py.None())?;
        }
        let size_of = py.import("sys")?.getattr("getsizeof")?;
        let size =
            |dict: &Bound<'py, PyDict>| -> PyResult<usize> { size_of.call1((dict,))?.extract() };
        let initial = size(&template)?;
        let mut padding = Vec::new();
        // A table at least doubles when it grows: 64 keys always get there.
        while size(&template)? == initial && padding.len() < 64 {
            let key = PyString::new(py, &format!("tines.padding.{}", padding.len()));
            template.set_item(&key, py.None())?;
            padding.push(key);
        }
        for key in padding {
            template.del_item(key)?;
        }
        Ok(EnvironContext {
            template: template.unbind(),
        })
    }
}

/// Writes an IPv4 address the way `Display` does, without allocating.
fn ipv4_text(ip: std::net::Ipv4Addr, out: &mut [u8; 15]) -> &str {
    let mut len = 0;
    for (index, octet) in ip.octets().into_iter().enumerate() {
        if index > 0 {
            out[len] = b'.';
            len += 1;
        }
        let mut buffer = itoa::Buffer::new();
        let digits = buffer.format(octet).as_bytes();
        out[len..len + digits.len()].copy_from_slice(digits);
        len += digits.len();
    }
    std::str::from_utf8(&out[..len]).expect("digits and dots are ASCII")
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
            other => latin1(py, other)?,
        },
    )?;
    let target = exchange.target();
    let (path, query) = split_target(target);
    env.set_item(intern!(py, "PATH_INFO"), latin1(py, &percent_decode(path))?)?;
    env.set_item(intern!(py, "QUERY_STRING"), latin1(py, query)?)?;
    let raw_uri = latin1(py, target)?;
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
            env.set_item(intern!(py, "CONTENT_TYPE"), latin1(py, value)?)?;
            continue;
        }
        if name.eq_ignore_ascii_case(b"content-length") {
            env.set_item(intern!(py, "CONTENT_LENGTH"), latin1(py, value)?)?;
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
        let value = latin1(py, value)?;
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
    let mut port_digits = itoa::Buffer::new();
    let (server_name, server_port) = match (host, exchange.local()) {
        (Some(host), local) => {
            let (name, port) = host_and_port(host);
            let port = match (port, local) {
                (Some(port), _) => latin1(py, port)?,
                (None, Local::Tcp(addr)) => PyString::new(py, port_digits.format(addr.port())),
                (None, Local::Unix(_)) => intern!(py, "80").clone(),
            };
            (latin1(py, name)?, port)
        }
        (None, Local::Tcp(addr)) => (
            PyString::new(py, &addr.ip().to_string()),
            PyString::new(py, port_digits.format(addr.port())),
        ),
        (None, Local::Unix(path)) => (PyString::new(py, path), PyString::new(py, "")),
    };
    env.set_item(intern!(py, "SERVER_NAME"), server_name)?;
    env.set_item(intern!(py, "SERVER_PORT"), server_port)?;
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
    // The same client address the access log shows (the exchange decides it once).
    match exchange.client_ip() {
        Some(ip) => {
            let mut text = [0; 15];
            let addr = match ip {
                IpAddr::V4(v4) => PyString::new(py, ipv4_text(v4, &mut text)),
                IpAddr::V6(v6) => PyString::new(py, &v6.to_string()),
            };
            let port = match exchange.peer() {
                Peer::Tcp(addr) => PyString::new(py, port_digits.format(addr.port())),
                Peer::Unix => intern!(py, "").clone(),
            };
            env.set_item(intern!(py, "REMOTE_ADDR"), addr)?;
            env.set_item(intern!(py, "REMOTE_PORT"), port)?;
        }
        None => {
            // The template's `None`s go: CGI leaves the variables out when unknown.
            env.del_item(intern!(py, "REMOTE_ADDR"))?;
            env.del_item(intern!(py, "REMOTE_PORT"))?;
        }
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

    #[test]
    fn writes_ipv4_addresses_as_display_does() {
        for ip in [
            "0.0.0.0",
            "127.0.0.1",
            "10.20.255.9",
            "255.255.255.255",
            "1.22.103.4",
        ] {
            let ip: std::net::Ipv4Addr = ip.parse().unwrap();
            assert_eq!(ipv4_text(ip, &mut [0; 15]), ip.to_string());
        }
    }
}
