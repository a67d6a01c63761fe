//! Whether a response is compressed, from its head alone (the decision table of ADR 0037):
//! never a response without a body (1xx, 204) or a `206` (its range is of the
//! representation as it is), one that has a `Content-Encoding` or says `Cache-Control:
//! no-transform`, one of a type off the allowlist or already compressed (images but SVG,
//! audio, video, archives, web fonts), one whose known length is below the minimum, or one
//! under an excluded path. A response that qualifies is compressed with the client's chosen
//! coding, or, when it chose none, sent as it is with `Vary: Accept-Encoding` (another client
//! would get it compressed). A `304` is decided as its `200` would be, for the fields it
//! shares with it (RFC 9110 15.4.5: `ETag` and `Vary`); as frameworks drop its `Content-Type`,
//! one without that field is taken to be of a compressed type.
//!
//! It must not parse the request itself: the exchange gives it the negotiation as a closure,
//! so that `Accept-Encoding` is read only for a response that qualifies.

use super::{Coding, CompressionConfig};

/// What the response head says, for the decision.
#[derive(Clone, Copy, Debug, Default)]
pub struct ResponseFacts<'a> {
    /// The status code.
    pub status: u16,
    /// The `Content-Type` value, if any.
    pub content_type: Option<&'a [u8]>,
    /// The response has a `Content-Encoding` field.
    pub content_encoding: bool,
    /// A `Cache-Control` field says `no-transform` (RFC 9110 7.7).
    pub no_transform: bool,
    /// The body's length, when known (the app's `Content-Length`, or the whole body's; for
    /// a `304`, only the app's, which is its `200`'s).
    pub length: Option<u64>,
}

/// The outcome for one response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Sent as it is, with no `Vary` of ours.
    Identity,
    /// Sent as it is, with `Vary: Accept-Encoding`: the client accepted no coding offered.
    VaryOnly,
    /// Compressed with this coding.
    Compress(Coding),
}

/// Types never compressed whatever the allowlist says: their bytes are compressed already.
fn already_compressed(media_type: &[u8]) -> bool {
    const FAMILIES: &[&[u8]] = &[b"audio/", b"video/"];
    const TYPES: &[&[u8]] = &[
        b"application/gzip",
        b"application/x-gzip",
        b"application/zip",
        b"application/zstd",
        b"application/x-bzip2",
        b"application/x-xz",
        b"application/x-7z-compressed",
        b"application/x-rar-compressed",
        b"application/pdf",
        b"font/woff",
        b"font/woff2",
    ];
    if media_type.starts_with(b"image/") {
        // Raster formats are compressed; SVG (XML) and the icon and bitmap formats are not.
        return !matches!(
            &media_type[6..],
            b"svg+xml" | b"x-icon" | b"vnd.microsoft.icon" | b"bmp"
        );
    }
    FAMILIES.iter().any(|family| media_type.starts_with(family)) || TYPES.contains(&media_type)
}

/// Whether `content_type` (a `Content-Type` value) is on the allowlist `types`.
pub(crate) fn type_listed(types: &[Vec<u8>], content_type: &[u8]) -> bool {
    let media_type = match memchr::memchr(b';', content_type) {
        Some(semi) => &content_type[..semi],
        None => content_type,
    }
    .trim_ascii();
    let mut lower = [0u8; 128];
    if media_type.is_empty() || media_type.len() > lower.len() {
        return false;
    }
    let lower = &mut lower[..media_type.len()];
    lower.copy_from_slice(media_type);
    lower.make_ascii_lowercase();
    let media_type = &*lower;
    if already_compressed(media_type) {
        return false;
    }
    types.iter().any(|entry| {
        if let Some(family) = entry.strip_suffix(b"*") {
            media_type.starts_with(family)
        } else if entry.first() == Some(&b'+') {
            media_type.ends_with(entry)
        } else {
            media_type == entry.as_slice()
        }
    })
}

/// Decides for the response `facts` to the request for `target` (its query left on);
/// `accepted` runs the negotiation when the response qualifies. `config` is on.
pub fn decide(
    config: &CompressionConfig,
    target: &[u8],
    facts: ResponseFacts<'_>,
    accepted: impl FnOnce() -> Option<Coding>,
) -> Decision {
    let has_body = !(100..200).contains(&facts.status) && facts.status != 204;
    let not_modified = facts.status == 304;
    let qualifies = has_body
        && facts.status != 206
        && !facts.content_encoding
        && !facts.no_transform
        && facts.length.is_none_or(|length| length >= config.min_size)
        && facts.content_type.map_or(not_modified, |content_type| {
            type_listed(&config.types, content_type)
        })
        && !config.excludes(target);
    if !qualifies {
        return Decision::Identity;
    }
    match accepted() {
        Some(coding) => Decision::Compress(coding),
        None => Decision::VaryOnly,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> CompressionConfig {
        CompressionConfig {
            codings: vec![Coding::Gzip, Coding::Brotli],
            exclude_paths: vec![b"/private/".to_vec()],
            ..CompressionConfig::default()
        }
    }

    fn facts(status: u16, content_type: &str, length: Option<u64>) -> ResponseFacts<'_> {
        ResponseFacts {
            status,
            content_type: Some(content_type.as_bytes()),
            length,
            ..ResponseFacts::default()
        }
    }

    fn gzip() -> Option<Coding> {
        Some(Coding::Gzip)
    }

    #[test]
    fn compresses_a_listed_type_of_enough_length() {
        let c = config();
        for content_type in [
            "text/html; charset=utf-8",
            "TEXT/CSS",
            "application/json",
            "application/problem+json",
            "image/svg+xml",
            "text/event-stream",
            "application/wasm",
        ] {
            let got = decide(&c, b"/", facts(200, content_type, Some(4096)), gzip);
            assert_eq!(got, Decision::Compress(Coding::Gzip), "{content_type}");
        }
        // A streamed body (length unknown) qualifies whatever its size.
        let got = decide(&c, b"/", facts(200, "text/plain", None), gzip);
        assert_eq!(got, Decision::Compress(Coding::Gzip));
        let got = decide(&c, b"/", facts(200, "text/plain", Some(1024)), gzip);
        assert_eq!(got, Decision::Compress(Coding::Gzip));
    }

    #[test]
    fn refuses_by_status_type_size_path_and_fields() {
        let c = config();
        let never =
            || -> Option<Coding> { panic!("negotiated for a response that does not qualify") };
        for status in [101, 103, 204, 206] {
            assert_eq!(
                decide(&c, b"/", facts(status, "text/html", None), never),
                Decision::Identity
            );
        }
        for content_type in [
            "image/png",
            "image/jpeg",
            "video/mp4",
            "font/woff2",
            "application/zip",
            "application/octet-stream",
            "",
        ] {
            assert_eq!(
                decide(&c, b"/", facts(200, content_type, None), never),
                Decision::Identity,
                "{content_type}"
            );
        }
        let untyped = ResponseFacts {
            status: 200,
            ..ResponseFacts::default()
        };
        assert_eq!(decide(&c, b"/", untyped, never), Decision::Identity);
        assert_eq!(
            decide(&c, b"/", facts(200, "text/html", Some(1023)), never),
            Decision::Identity
        );
        assert_eq!(
            decide(&c, b"/private/x?a=b", facts(200, "text/html", None), never),
            Decision::Identity
        );
        let encoded = ResponseFacts {
            content_encoding: true,
            ..facts(200, "text/html", None)
        };
        assert_eq!(decide(&c, b"/", encoded, never), Decision::Identity);
        let no_transform = ResponseFacts {
            no_transform: true,
            ..facts(200, "text/html", None)
        };
        assert_eq!(decide(&c, b"/", no_transform, never), Decision::Identity);
    }

    #[test]
    fn an_excluded_prefix_matches_the_path_only() {
        let c = config();
        assert_eq!(
            decide(
                &c,
                b"/public?p=/private/",
                facts(200, "text/html", None),
                gzip
            ),
            Decision::Compress(Coding::Gzip)
        );
        assert_eq!(
            decide(&c, b"/private", facts(200, "text/html", None), gzip),
            Decision::Compress(Coding::Gzip)
        );
    }

    #[test]
    fn a_304_is_decided_as_its_200_would_be() {
        let c = config();
        let never =
            || -> Option<Coding> { panic!("negotiated for a response that does not qualify") };
        let bare = ResponseFacts {
            status: 304,
            ..ResponseFacts::default()
        };
        // Its ETag is weakened and Vary merged as the 200's (the exchange adds no coding).
        assert_eq!(
            decide(&c, b"/", bare, gzip),
            Decision::Compress(Coding::Gzip)
        );
        assert_eq!(
            decide(&c, b"/", facts(304, "text/html", None), gzip),
            Decision::Compress(Coding::Gzip)
        );
        assert_eq!(decide(&c, b"/", bare, || None), Decision::VaryOnly);
        // Left alone where the 200 would be.
        assert_eq!(decide(&c, b"/private/x", bare, never), Decision::Identity);
        assert_eq!(
            decide(&c, b"/", facts(304, "image/png", None), never),
            Decision::Identity
        );
        assert_eq!(
            decide(&c, b"/", facts(304, "text/html", Some(100)), never),
            Decision::Identity
        );
        let encoded = ResponseFacts {
            content_encoding: true,
            ..bare
        };
        assert_eq!(decide(&c, b"/", encoded, never), Decision::Identity);
    }

    #[test]
    fn a_client_without_a_coding_gets_vary_only() {
        let c = config();
        assert_eq!(
            decide(&c, b"/", facts(200, "text/html", None), || None),
            Decision::VaryOnly
        );
    }

    #[test]
    fn the_allowlist_takes_families_suffixes_and_exact_types() {
        let types = vec![
            b"text/*".to_vec(),
            b"+xml".to_vec(),
            b"application/json".to_vec(),
            b"image/*".to_vec(),
        ];
        assert!(type_listed(&types, b"text/plain"));
        assert!(type_listed(&types, b"application/atom+xml"));
        assert!(type_listed(&types, b"application/json; charset=utf-8"));
        assert!(!type_listed(&types, b"application/jsonx"));
        // An already-compressed type stays out even when a family lists it.
        assert!(!type_listed(&types, b"image/webp"));
        assert!(type_listed(&types, b"image/svg+xml"));
    }
}
