//! A request target's path as the server's path rules see it (`rate_limit_paths`,
//! `compression_exclude_paths`, `stream_body_paths`): the path of an origin- or absolute-form target, its query
//! and fragment cut, percent-decoded once, repeated `/` collapsed; and the prefix match on a
//! segment boundary those rules use. The rules must see the path the app routes on, or
//! `http://host/login`, `/%6cogin` or `//login` would slip past a `/login` rule.
//!
//! A path with no single reading ([`PathFault`]: a bad escape, an encoded `/` or NUL, a `.`
//! or `..` segment, a target that is no path) is reported, not guessed at: each caller takes
//! the side its rule cannot be escaped by (the rate limits count it under their strictest
//! rule; compression leaves it uncompressed).
//!
//! It is also the one decoder of static files, which take [`target_path`] (the raw path) and
//! [`decode_name`] (decoded once into a name, refusing what a file name must not hold), so
//! that every rule reads a target alike. `stream_body_paths` compares the normal form as a
//! byte prefix (`/up` holds `/upload`), the other rules on a segment boundary
//! ([`NormalPath::is_under`]).
//!
//! Must not allocate: the decoded bytes are produced as they are compared ([`decode_name`]
//! writes into its caller's buffer).

/// Why a request target's path has no normal form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathFault {
    /// Not origin- or absolute-form (`*`, an authority).
    NotAPath,
    /// `%` not followed by two hex digits.
    BadEscape,
    /// `%2F`: a separator the app may or may not split on.
    EncodedSlash,
    /// `%00`.
    Nul,
    /// A `.` or `..` segment (decoded): clients resolve them; one that sends them raw is
    /// aiming at a path other than the one it names.
    DotSegment,
    /// A control byte other than NUL (raw or decoded): no file name holds one
    /// ([`decode_name`] only).
    Control,
    /// The decoded bytes are not UTF-8 ([`decode_name`] only).
    NotUtf8,
}

/// The path of a request target, checked to have a normal form. Compare it with
/// [`NormalPath::is_under`]; [`NormalPath::bytes`] gives the normal form itself.
#[derive(Debug, Clone, Copy)]
pub struct NormalPath<'t> {
    /// The raw path: starts with `/`, no query or fragment.
    raw: &'t [u8],
}

/// The raw path of `target` (not decoded): origin-form up to `?` or `#`; an absolute-form
/// (`http://a/p`, `https`, any case) loses its scheme and authority, an empty path being `/`.
/// `None` for any other form (`*`, an authority).
pub fn target_path(target: &[u8]) -> Option<&[u8]> {
    let path = if target.first() == Some(&b'/') {
        target
    } else {
        let colon = target.iter().position(|&b| b == b':')?;
        let scheme = &target[..colon];
        if !(scheme.eq_ignore_ascii_case(b"http") || scheme.eq_ignore_ascii_case(b"https")) {
            return None;
        }
        let after = target[colon + 1..].strip_prefix(b"//")?;
        let end = after
            .iter()
            .position(|&b| matches!(b, b'/' | b'?' | b'#'))
            .unwrap_or(after.len());
        match after.get(end) {
            Some(b'/') => &after[end..],
            _ => b"/",
        }
    };
    let end = path
        .iter()
        .position(|&b| b == b'?' || b == b'#')
        .unwrap_or(path.len());
    Some(&path[..end])
}

fn hex(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

/// The byte the escape at `raw[at]` (a `%`) stands for; refused when it has no two hex
/// digits, or stands for a `/` (a separator the app may or may not split on) or NUL.
fn unescape(raw: &[u8], at: usize) -> Result<u8, PathFault> {
    let (Some(high), Some(low)) = (
        raw.get(at + 1).copied().and_then(hex),
        raw.get(at + 2).copied().and_then(hex),
    ) else {
        return Err(PathFault::BadEscape);
    };
    match high << 4 | low {
        b'/' => Err(PathFault::EncodedSlash),
        0 => Err(PathFault::Nul),
        other => Ok(other),
    }
}

/// Decodes `raw` (a raw path or the part of one after a prefix, as [`target_path`] gives it)
/// once into `name` (cleared first), for a caller that turns it into a file name: refused as
/// [`NormalPath::of`] refuses an escape (a bad one, `%2F`, `%00`), and when a byte of the
/// result is a control byte or the result is not UTF-8. Repeated `/` and `.` segments are
/// left as they are: the caller's rules for names are stricter than a prefix match's.
pub fn decode_name(raw: &[u8], name: &mut Vec<u8>) -> Result<(), PathFault> {
    name.clear();
    let mut at = 0;
    while let Some(&byte) = raw.get(at) {
        let decoded = if byte == b'%' {
            let decoded = unescape(raw, at)?;
            at += 3;
            decoded
        } else {
            at += 1;
            byte
        };
        if decoded == 0 {
            return Err(PathFault::Nul);
        }
        if decoded < 0x20 || decoded == 0x7f {
            return Err(PathFault::Control);
        }
        name.push(decoded);
    }
    std::str::from_utf8(name).map_err(|_| PathFault::NotUtf8)?;
    Ok(())
}

/// The decoded bytes of a checked raw path, repeated `/` collapsed.
struct Decoded<'t> {
    raw: &'t [u8],
    at: usize,
    last: u8,
}

impl Iterator for Decoded<'_> {
    type Item = u8;

    fn next(&mut self) -> Option<u8> {
        loop {
            let byte = *self.raw.get(self.at)?;
            let decoded = if byte == b'%' {
                // Checked by `NormalPath::of`: two hex digits follow.
                let high = hex(self.raw[self.at + 1]).unwrap_or(0);
                let low = hex(self.raw[self.at + 2]).unwrap_or(0);
                self.at += 3;
                high << 4 | low
            } else {
                self.at += 1;
                byte
            };
            if decoded == b'/' && self.last == b'/' {
                continue;
            }
            self.last = decoded;
            return Some(decoded);
        }
    }
}

impl<'t> NormalPath<'t> {
    /// The path of `target` (a request target as the parser accepted it), or why it has no
    /// single reading. One pass over the path; no allocation.
    pub fn of(target: &'t [u8]) -> Result<NormalPath<'t>, PathFault> {
        let raw = target_path(target).ok_or(PathFault::NotAPath)?;
        let mut at = 0;
        // The decoded segment so far: its length, and whether it is all dots.
        let mut segment_len = 0usize;
        let mut all_dots = true;
        while at <= raw.len() {
            let decoded = match raw.get(at) {
                None => b'/',
                Some(b'%') => {
                    let decoded = unescape(raw, at)?;
                    at += 2;
                    decoded
                }
                Some(&byte) => byte,
            };
            at += 1;
            if decoded == b'/' {
                if all_dots && (segment_len == 1 || segment_len == 2) {
                    return Err(PathFault::DotSegment);
                }
                segment_len = 0;
                all_dots = true;
            } else {
                segment_len += 1;
                all_dots &= decoded == b'.';
            }
        }
        Ok(NormalPath { raw })
    }

    /// The normal form, byte by byte: decoded once, repeated `/` collapsed.
    pub fn bytes(&self) -> impl Iterator<Item = u8> + 't {
        Decoded {
            raw: self.raw,
            at: 0,
            last: 0,
        }
    }

    /// Whether the path is `prefix` or under it, on a segment boundary: `/login` is under
    /// `/login`, as are `/login/x` and `//login`; `/loginx` is not. A prefix ending in `/`
    /// holds its subtree (`/account/` holds `/account/x`, not `/account`); the empty prefix
    /// and `/` hold every path. `prefix` is compared as written: a decoded path (see
    /// [`normal_prefix`]).
    pub fn is_under(&self, prefix: &[u8]) -> bool {
        let mut bytes = self.bytes();
        for &want in prefix {
            if bytes.next() != Some(want) {
                return false;
            }
        }
        matches!(prefix.last(), None | Some(b'/')) || matches!(bytes.next(), None | Some(b'/'))
    }
}

/// A rule's prefix as [`NormalPath::is_under`] compares it: `prefix` (which must start with
/// `/`) in normal form, so that a rule written `/a%2db` or `/a//b` matches what it names.
/// `None` when it has none (as [`NormalPath::of`] would refuse it).
pub fn normal_prefix(prefix: &[u8]) -> Option<Vec<u8>> {
    if prefix.first() != Some(&b'/') {
        return None;
    }
    let path = NormalPath::of(prefix).ok()?;
    // The query cut from a request target is part of no rule's prefix.
    if path.raw.len() != prefix.len() {
        return None;
    }
    Some(path.bytes().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn normal(target: &str) -> Result<String, PathFault> {
        NormalPath::of(target.as_bytes())
            .map(|path| String::from_utf8(path.bytes().collect()).unwrap())
    }

    fn under(target: &str, prefix: &str) -> bool {
        NormalPath::of(target.as_bytes())
            .unwrap()
            .is_under(prefix.as_bytes())
    }

    #[test]
    fn a_target_s_path_is_decoded_once_its_query_cut_and_its_slashes_collapsed() {
        assert_eq!(normal("/login"), Ok("/login".into()));
        assert_eq!(normal("/login?next=/admin"), Ok("/login".into()));
        assert_eq!(normal("/login#top"), Ok("/login".into()));
        assert_eq!(normal("/%6cogin"), Ok("/login".into()));
        assert_eq!(normal("/%6Cogin"), Ok("/login".into()));
        assert_eq!(normal("//login///x/"), Ok("/login/x/".into()));
        assert_eq!(normal("/a%20b"), Ok("/a b".into()));
        // Once: `%2561` is `%61`, not `a`.
        assert_eq!(normal("/%2561"), Ok("/%61".into()));
        // A decoded `?` is part of the path, not a query.
        assert_eq!(normal("/a%3Fb?c"), Ok("/a?b".into()));
        assert_eq!(normal("/..."), Ok("/...".into()));
        assert_eq!(normal("/.well-known/x"), Ok("/.well-known/x".into()));
    }

    #[test]
    fn absolute_form_loses_its_scheme_and_authority() {
        assert_eq!(normal("http://example.com/login"), Ok("/login".into()));
        assert_eq!(
            normal("HTTPS://example.com:8443/login?x"),
            Ok("/login".into())
        );
        assert_eq!(normal("http://example.com"), Ok("/".into()));
        assert_eq!(normal("http://example.com?a=/login"), Ok("/".into()));
        assert_eq!(normal("http://[::1]:80//%6cogin"), Ok("/login".into()));
    }

    #[test]
    fn paths_without_one_reading_are_faults() {
        assert_eq!(normal("*"), Err(PathFault::NotAPath));
        assert_eq!(normal("example.com:443"), Err(PathFault::NotAPath));
        assert_eq!(normal("ftp://example.com/login"), Err(PathFault::NotAPath));
        assert_eq!(normal("/a%zz"), Err(PathFault::BadEscape));
        assert_eq!(normal("/a%2"), Err(PathFault::BadEscape));
        assert_eq!(normal("/a%"), Err(PathFault::BadEscape));
        assert_eq!(normal("/log%2Fin"), Err(PathFault::EncodedSlash));
        assert_eq!(normal("/log%2fin"), Err(PathFault::EncodedSlash));
        assert_eq!(normal("/login%00"), Err(PathFault::Nul));
        assert_eq!(normal("/x/../login"), Err(PathFault::DotSegment));
        assert_eq!(normal("/x/%2e%2e/login"), Err(PathFault::DotSegment));
        assert_eq!(normal("/./login"), Err(PathFault::DotSegment));
        assert_eq!(normal("/login/.."), Err(PathFault::DotSegment));
        assert_eq!(normal("/login/.?x"), Err(PathFault::DotSegment));
        // The query is not the path: anything goes there.
        assert_eq!(normal("/login?a=%zz&b=%2F"), Ok("/login".into()));
    }

    #[test]
    fn prefixes_match_on_a_segment_boundary() {
        for target in [
            "/login",
            "/login/",
            "/login/x",
            "/login?x",
            "//login",
            "/%6cogin/x",
        ] {
            assert!(under(target, "/login"), "{target}");
        }
        for target in ["/login/", "/login//x", "/login/x?y", "/%6cogin/x"] {
            assert!(under(target, "/login/"), "{target}");
        }
        // A prefix ending in `/` holds its subtree, not the bare name.
        assert!(!under("/login", "/login/"));
        assert!(!under("/login?x", "/login/"));
        for target in ["/loginx", "/logi", "/", "/log/in", "/x/login"] {
            assert!(!under(target, "/login"), "{target}");
            assert!(!under(target, "/login/"), "{target}");
        }
        for target in ["/", "/a", "/a/b"] {
            assert!(under(target, ""), "{target}");
            assert!(under(target, "/"), "{target}");
        }
        assert!(under("/api/v1/x", "/api/v1"));
        assert!(!under("/api/v10", "/api/v1"));
    }

    fn name(raw: &str) -> Result<Vec<u8>, PathFault> {
        let mut name = b"stale".to_vec();
        decode_name(raw.as_bytes(), &mut name).map(|()| name)
    }

    #[test]
    fn a_name_is_decoded_once_with_its_slashes_and_dots_left_to_the_caller() {
        assert_eq!(name("/a%20b/c"), Ok(b"/a b/c".to_vec()));
        assert_eq!(name(""), Ok(Vec::new()));
        assert_eq!(name("/%252e%252e/x"), Ok(b"/%2e%2e/x".to_vec()));
        assert_eq!(name("//a/../.b/"), Ok(b"//a/../.b/".to_vec()));
        assert_eq!(name("/caf%C3%A9"), Ok("/caf\u{e9}".as_bytes().to_vec()));
        assert_eq!(name("/a%5Cb"), Ok(b"/a\\b".to_vec()));
    }

    #[test]
    fn a_name_refuses_what_no_file_name_may_hold() {
        use PathFault::{BadEscape, Control, EncodedSlash, NotUtf8, Nul};
        let refused = [
            ("/a%2Fb", EncodedSlash),
            ("/a%00", Nul),
            ("/a\0", Nul),
            ("/a%0a", Control),
            ("/a\t", Control),
            ("/a%7f", Control),
            ("/%c0%ae", NotUtf8),
            ("/%", BadEscape),
            ("/%2", BadEscape),
            ("/%zz", BadEscape),
        ];
        for (raw, fault) in refused {
            assert_eq!(name(raw), Err(fault), "{raw:?}");
        }
    }

    #[test]
    fn rule_prefixes_are_put_in_normal_form() {
        assert_eq!(normal_prefix(b"/login"), Some(b"/login".to_vec()));
        assert_eq!(normal_prefix(b"//account//"), Some(b"/account/".to_vec()));
        assert_eq!(normal_prefix(b"/%61ccount/"), Some(b"/account/".to_vec()));
        assert_eq!(normal_prefix(b"login"), None);
        assert_eq!(normal_prefix(b"/a?b"), None);
        assert_eq!(normal_prefix(b"/a%2Fb"), None);
        assert_eq!(normal_prefix(b"/a/../b"), None);
    }
}
