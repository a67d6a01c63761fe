//! The CGI helpers that WSGI's environ, ASGI's scope and the status output share: decoding a
//! request's bytes into what an app sees (latin-1 text, a percent-decoded path, the path and
//! query of a target, the host and port of a `Host` header, an IPv4 address as text). Pure
//! functions of bytes: no per-request state, no allocation where the input can be borrowed.

use pyo3::prelude::*;
use pyo3::types::PyString;

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

/// The rest of the decoded `path` after `root` (`root_path`, not empty) when the path is under
/// it on a segment boundary: `root` itself (the rest is empty) or `root/...` (the rest starts
/// with `/`); `None` otherwise (`/apix` is not under `/api`). Both WSGI's split of
/// `SCRIPT_NAME` and `PATH_INFO` and ASGI's "the path already holds the root" ask it.
pub fn under_root<'a>(path: &'a [u8], root: &[u8]) -> Option<&'a [u8]> {
    path.strip_prefix(root)
        .filter(|rest| rest.is_empty() || rest[0] == b'/')
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

/// Splits a `Host` header into the host (an IPv6 address keeps its brackets) and the port.
pub fn host_and_port(host: &[u8]) -> (&[u8], Option<&[u8]>) {
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

/// Writes an IPv4 address the way `Display` does, without allocating.
pub fn ipv4_text(ip: std::net::Ipv4Addr, out: &mut [u8; 15]) -> &str {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_under_the_root_only_on_a_segment_boundary() {
        assert_eq!(under_root(b"/api/items", b"/api"), Some(&b"/items"[..]));
        assert_eq!(under_root(b"/api", b"/api"), Some(&b""[..]));
        assert_eq!(under_root(b"/api/", b"/api"), Some(&b"/"[..]));
        assert_eq!(under_root(b"/apix", b"/api"), None);
        assert_eq!(under_root(b"/items", b"/api"), None);
        assert_eq!(under_root(b"/a/b/c", b"/a/b"), Some(&b"/c"[..]));
        assert_eq!(under_root(b"*", b"/api"), None);
    }

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
