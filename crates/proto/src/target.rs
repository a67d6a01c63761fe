//! The four request-target forms of RFC 9112 section 3.2 and which method may
//! use which.
//!
//! Owns: deciding whether a target is acceptable. Must not: decode
//! percent-escapes or split path from query (the WSGI layer does that).

use crate::syntax::is_valid_authority;

/// Why a target was refused; the request module maps every kind to a 400.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TargetFault {
    /// A byte outside visible US-ASCII (RFC 3986 section 2 allows no other;
    /// raw UTF-8 must be percent-encoded by the client).
    InvalidByte,
    /// None of the four forms, or a form the method may not use.
    InvalidForm,
}

/// Checks `target` against `method` (RFC 9112 section 3.2):
///
/// - origin-form (`/path?query`) for any method but CONNECT;
/// - absolute-form, `http` or `https` only, with a valid, non-empty authority
///   and no userinfo (RFC 9110 section 4.2.4), for any method but CONNECT;
/// - authority-form (`host:port`) for CONNECT only (section 3.2.3);
/// - asterisk-form (`*`) for OPTIONS only (section 3.2.4).
///
/// A `#fragment` is tolerated in origin- and absolute-form: it is not part of
/// the request-target grammar, but it is plain ASCII, cannot change framing,
/// and some clients send it; the WSGI layer strips it.
pub(crate) fn check_target(method: &[u8], target: &[u8]) -> Result<(), TargetFault> {
    if !target.iter().all(|&b| (b'!'..=b'~').contains(&b)) {
        return Err(TargetFault::InvalidByte);
    }
    let is_connect = method == b"CONNECT";
    let form_ok = if is_connect {
        is_valid_authority(target, true)
    } else if target.first() == Some(&b'/') {
        true
    } else if target == b"*" {
        method == b"OPTIONS"
    } else {
        is_absolute_http_uri(target)
    };
    if form_ok {
        Ok(())
    } else {
        Err(TargetFault::InvalidForm)
    }
}

/// `http://authority[/path][?query]` or the same with `https`; scheme
/// case-insensitive (RFC 3986 section 3.1).
fn is_absolute_http_uri(target: &[u8]) -> bool {
    let Some(colon) = memchr::memchr(b':', target) else {
        return false;
    };
    let scheme = &target[..colon];
    if !(scheme.eq_ignore_ascii_case(b"http") || scheme.eq_ignore_ascii_case(b"https")) {
        return false;
    }
    let Some(rest) = target[colon + 1..].strip_prefix(b"//") else {
        return false;
    };
    let authority_end = rest
        .iter()
        .position(|&b| matches!(b, b'/' | b'?' | b'#'))
        .unwrap_or(rest.len());
    is_valid_authority(&rest[..authority_end], false)
}

/// The authority of an absolute-form target (`http://a.example:8080/p`), which must name the
/// same origin as Host (RFC 9110 section 7.2: a client sends Host identical to it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TargetAuthority<'t> {
    host: &'t [u8],
    port: &'t [u8],
    https: bool,
}

impl<'t> TargetAuthority<'t> {
    /// The authority of `target` when it is in absolute form (already checked by
    /// [`check_target`]); `None` for the other forms, at the cost of one byte compare for
    /// origin-form.
    pub(crate) fn of(target: &'t [u8]) -> Option<Self> {
        if matches!(target.first(), Some(b'/' | b'*') | None) {
            return None;
        }
        let colon = memchr::memchr(b':', target)?;
        let https = target[..colon].eq_ignore_ascii_case(b"https");
        let rest = target[colon + 1..].strip_prefix(b"//")?;
        let end = rest
            .iter()
            .position(|&b| matches!(b, b'/' | b'?' | b'#'))
            .unwrap_or(rest.len());
        let (host, port) = split_port(&rest[..end]);
        Some(Self { host, port, https })
    }

    /// Whether a Host value names this authority: the same host (ASCII case-insensitive,
    /// RFC 3986 section 6.2.2.1) and the same port, an absent or empty one being the scheme's
    /// default (80 or 443; section 6.2.3) and leading zeros not counting.
    pub(crate) fn matches(&self, host_field: &[u8]) -> bool {
        let (host, port) = split_port(host_field);
        let default: &[u8] = if self.https { b"443" } else { b"80" };
        host.eq_ignore_ascii_case(self.host)
            && effective_port(port, default) == effective_port(self.port, default)
    }
}

/// A port as compared: the scheme's `default` when empty, else without leading zeros.
fn effective_port<'a>(port: &'a [u8], default: &'a [u8]) -> &'a [u8] {
    if port.is_empty() {
        return default;
    }
    &port[port.iter().position(|&b| b != b'0').unwrap_or(port.len())..]
}

/// `host` and `port` of a valid authority (`[v6]:port`, `name:port`, `name`); the port is
/// empty when absent or empty.
fn split_port(authority: &[u8]) -> (&[u8], &[u8]) {
    let host_end = if authority.first() == Some(&b'[') {
        memchr::memchr(b']', authority).map_or(authority.len(), |end| end + 1)
    } else {
        memchr::memchr(b':', authority).unwrap_or(authority.len())
    };
    let (host, rest) = authority.split_at(host_end);
    (host, rest.strip_prefix(b":").unwrap_or(rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_each_form_with_its_methods() {
        assert_eq!(check_target(b"GET", b"/a?b=c"), Ok(()));
        assert_eq!(check_target(b"GET", b"///keeping_slashes"), Ok(()));
        assert_eq!(check_target(b"GET", b"/forums?page=1#posts"), Ok(()));
        assert_eq!(check_target(b"GET", b"http://example.com/foo?q=1"), Ok(()));
        assert_eq!(check_target(b"GET", b"HTTPS://example.com"), Ok(()));
        assert_eq!(check_target(b"GET", b"http://[::1]:8080/foo"), Ok(()));
        assert_eq!(check_target(b"CONNECT", b"example.com:443"), Ok(()));
        assert_eq!(check_target(b"CONNECT", b"[::1]:443"), Ok(()));
        assert_eq!(check_target(b"OPTIONS", b"*"), Ok(()));
        assert_eq!(check_target(b"OPTIONS", b"/"), Ok(()));
    }

    #[test]
    fn rejects_forms_used_with_the_wrong_method() {
        assert_eq!(check_target(b"GET", b"*"), Err(TargetFault::InvalidForm));
        assert_eq!(
            check_target(b"GET", b"example.com:443"),
            Err(TargetFault::InvalidForm)
        );
        assert_eq!(
            check_target(b"CONNECT", b"/"),
            Err(TargetFault::InvalidForm)
        );
        assert_eq!(
            check_target(b"CONNECT", b"http://a:1/"),
            Err(TargetFault::InvalidForm)
        );
        assert_eq!(
            check_target(b"CONNECT", b"example.com"),
            Err(TargetFault::InvalidForm)
        );
    }

    #[test]
    fn rejects_relative_and_odd_absolute_targets() {
        for bad in [
            &b"foo/bar"[..],
            b"s://]ufd/:",
            b"ftp://example.com/",
            b"http:/example.com",
            b"http://",
            b"http:///path",
            b"http://user:pass@example.com/",
            b"http://a b/",
        ] {
            assert!(check_target(b"GET", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn rejects_raw_non_ascii_and_control_bytes() {
        assert_eq!(
            check_target(b"GET", "/\u{e0}".as_bytes()),
            Err(TargetFault::InvalidByte)
        );
        assert_eq!(
            check_target(b"GET", b"/a\x7fb"),
            Err(TargetFault::InvalidByte)
        );
        assert_eq!(
            check_target(b"GET", b"/a\0b"),
            Err(TargetFault::InvalidByte)
        );
    }
}
