//! From a request path under a mount to the relative name opened beneath the mount's
//! directory: decoded once, and refused unless every segment is a plain name. The kernel's
//! `RESOLVE_BENEATH` is the guarantee; these checks refuse early what must never reach it and
//! what the kernel would accept but we must not serve (hidden files, encoded separators).
//!
//! It must not touch the file system.

/// What a request path under a mount names.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Named {
    /// A file or directory: the relative name to open beneath the mount (empty: the mount's
    /// directory itself), and whether the path ended with `/`.
    Path { relative: Vec<u8>, slash: bool },
    /// A path that may not be served (an encoded `/`, `\`, NUL or control byte, a bad escape,
    /// a `.`/`..` or empty segment, a hidden segment, not UTF-8).
    Refused,
}

/// The raw path of a request target: the one reading every path rule of the server shares
/// (`tines_proto::path`).
pub(crate) use tines_proto::path::target_path;

/// Decodes `rest` (what follows the mount's prefix: empty or starting with `/`) once and
/// checks each segment. `hidden`: segments starting with `.` are allowed.
pub(crate) fn name_under_mount(rest: &[u8], hidden: bool) -> Named {
    let mut relative = Vec::with_capacity(rest.len());
    // Decoded once (`%252e` is the three bytes `%2e`, a plain name, never a dot) by the
    // shared decoder, which refuses an encoded separator (it would join segments the checks
    // below saw apart), NUL and control bytes, and a name that is not UTF-8.
    if tines_proto::path::decode_name(rest, &mut relative).is_err() || relative.contains(&b'\\') {
        return Named::Refused;
    }
    let slash = relative.last() == Some(&b'/');
    if slash {
        relative.pop();
    }
    // `relative` is now empty or `/a/b`: every segment after the first `/` must be a name.
    if !relative.is_empty() {
        let mut segments = relative.split(|&b| b == b'/');
        // What precedes the first `/`: nothing.
        let _ = segments.next();
        for segment in segments {
            if segment.is_empty() || segment == b"." || segment == b".." {
                return Named::Refused;
            }
            if segment[0] == b'.' && !hidden {
                return Named::Refused;
            }
        }
        relative.remove(0);
    }
    Named::Path { relative, slash }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(rest: &str) -> Named {
        name_under_mount(rest.as_bytes(), false)
    }

    fn path(relative: &str, slash: bool) -> Named {
        Named::Path {
            relative: relative.as_bytes().to_vec(),
            slash,
        }
    }

    #[test]
    fn plain_names_are_decoded_once() {
        assert_eq!(named("/a/b.css"), path("a/b.css", false));
        assert_eq!(named("/a%20b/c"), path("a b/c", false));
        assert_eq!(named("/dir/"), path("dir", true));
        assert_eq!(named(""), path("", false));
        assert_eq!(named("/"), path("", true));
        // `%252e%252e` decodes to the name `%2e%2e`: no dot segment.
        assert_eq!(named("/%252e%252e/x"), path("%2e%2e/x", false));
        assert_eq!(named("/caf%C3%A9"), path("café", false));
    }

    #[test]
    fn traversal_and_its_encodings_are_refused() {
        for rest in [
            "/..",
            "/../etc/passwd",
            "/a/../../b",
            "/%2e%2e/etc/passwd",
            "/%2E%2E/x",
            "/.%2e/x",
            "/a/./b",
            "/a%2f..%2f..%2fetc",
            "/..%5c..%5cetc",
            "/a\\b",
            "/a%00.css",
            "/a%0a",
            "//etc/passwd",
            "/a//b",
            "/%c0%ae%c0%ae/x",
            "/%",
            "/%2",
            "/%zz",
            "/.env",
            "/a/.git/config",
            "/%2egit",
        ] {
            assert_eq!(named(rest), Named::Refused, "{rest}");
        }
    }

    /// Every path of up to five pieces from the traversal alphabet: what is accepted is a
    /// relative name of plain segments (no `.`, `..`, empty or hidden one, no NUL, no `\`).
    #[test]
    fn whatever_the_pieces_an_accepted_name_holds_only_plain_segments() {
        const PIECES: [&str; 13] = [
            "/", ".", "..", "%2e", "%2E", "%2f", "%5c", "a", "%00", "%", "%25", "\\", ".a",
        ];
        let mut paths = vec![String::new()];
        let mut checked = 0;
        for _ in 0..5 {
            let mut longer = Vec::new();
            for path in &paths {
                for piece in PIECES {
                    let candidate = format!("{path}{piece}");
                    let rest = format!("/{candidate}");
                    if let Named::Path { relative, .. } = name_under_mount(rest.as_bytes(), false) {
                        assert!(!relative.starts_with(b"/"), "{rest}");
                        assert!(
                            !relative.contains(&0) && !relative.contains(&b'\\'),
                            "{rest}"
                        );
                        if !relative.is_empty() {
                            for segment in relative.split(|&b| b == b'/') {
                                assert!(!segment.is_empty() && segment[0] != b'.', "{rest}");
                            }
                        }
                    }
                    checked += 1;
                    longer.push(candidate);
                }
            }
            paths = longer;
        }
        assert!(checked > 400_000);
    }

    #[test]
    fn hidden_segments_may_be_allowed_but_never_dot_segments() {
        assert_eq!(
            name_under_mount(b"/.well-known/a", true),
            path(".well-known/a", false)
        );
        assert_eq!(name_under_mount(b"/../a", true), Named::Refused);
        assert_eq!(name_under_mount(b"/./a", true), Named::Refused);
    }

    #[test]
    fn the_path_of_a_target_drops_the_query_and_an_absolute_forms_authority() {
        assert_eq!(target_path(b"/s/a.css?v=1"), Some(&b"/s/a.css"[..]));
        assert_eq!(target_path(b"/s/a#frag"), Some(&b"/s/a"[..]));
        assert_eq!(target_path(b"http://example.com/s/a?x"), Some(&b"/s/a"[..]));
        assert_eq!(target_path(b"HTTPS://h"), Some(&b"/"[..]));
        assert_eq!(target_path(b"*"), None);
        assert_eq!(target_path(b"ftp://h/s"), None);
    }
}
