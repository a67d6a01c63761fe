use super::*;

#[test]
fn types_come_from_the_extension_and_text_says_utf_8() {
    assert_eq!(mime_type(b"a/app.CSS"), "text/css; charset=utf-8");
    assert_eq!(mime_type(b"index.html"), "text/html; charset=utf-8");
    assert_eq!(mime_type(b"x.js"), "text/javascript; charset=utf-8");
    assert_eq!(mime_type(b"logo.svg"), "image/svg+xml");
    assert_eq!(mime_type(b"f.woff2"), "font/woff2");
    assert_eq!(mime_type(b"noext"), "application/octet-stream");
    assert_eq!(mime_type(b"dir.css/file"), "application/octet-stream");
    assert_eq!(
        mime_type(b"a.verylongextension"),
        "application/octet-stream"
    );
    assert!(is_compressible(mime_type(b"a.css")));
    assert!(is_compressible(mime_type(b"a.svg")));
    assert!(!is_compressible(mime_type(b"a.png")));
}

#[test]
fn a_content_hash_is_a_hex_part_before_the_extension_or_a_hex_directory() {
    assert!(carries_content_hash(b"app.3f2a9c1e.css"));
    assert!(carries_content_hash(b"css/app.3f2a9c1e0b7d.min.css"));
    assert!(carries_content_hash(b"3f2a9c1e/app.css"));
    assert!(!carries_content_hash(b"app.css"));
    assert!(
        !carries_content_hash(b"deadbeef.css"),
        "the name itself is not a hash"
    );
    assert!(!carries_content_hash(b"app.3f2a9c1.css"), "7 digits");
    assert!(!carries_content_hash(b"app.version1.css"));
    assert!(!carries_content_hash(b"app.css.3f2a9c1e"), "the extension");
}

#[test]
fn a_content_hash_mixes_hex_letters_and_digits() {
    assert!(
        !carries_content_hash(b"uploads/20240115/photo.jpg"),
        "a date directory"
    );
    assert!(!carries_content_hash(b"report.20240115.pdf"), "a date part");
    assert!(!carries_content_hash(b"a.1234567890.css"), "digits only");
    assert!(!carries_content_hash(b"deadbeef/app.css"), "letters only");
    assert!(
        !carries_content_hash(b"app.deadbeefcafe.css"),
        "letters only"
    );
    assert!(carries_content_hash(b"app.2024011a.css"));
    assert!(carries_content_hash(b"3F2A9C1E/app.css"), "upper case");
}

#[test]
fn each_representation_has_its_own_strong_etag() {
    let validators = Validators {
        mtime: 0x5f00_0000,
        mtime_nsec: 0x10,
        size: 0x400,
    };
    let mut tag = Vec::new();
    validators.etag(None, &mut tag);
    assert_eq!(tag, b"\"5f000000.10-400\"");
    validators.etag(Some(Encoding::Brotli), &mut tag);
    assert_eq!(tag, b"\"5f000000.10-400-br\"");
    validators.etag(Some(Encoding::Zstd), &mut tag);
    assert_eq!(tag, b"\"5f000000.10-400-zst\"");
}

#[test]
fn if_none_match_compares_weakly() {
    let etag = b"\"a-1\"";
    assert!(none_match_fails(b"\"a-1\"", etag));
    assert!(none_match_fails(b"W/\"a-1\"", etag));
    assert!(none_match_fails(b"\"x\", W/\"a-1\"", etag));
    assert!(none_match_fails(b"*", etag));
    assert!(!none_match_fails(b"\"a-2\"", etag));
    assert!(!none_match_fails(b"", etag));
}

#[test]
fn if_range_compares_strongly_or_by_the_exact_date() {
    let etag = b"\"a-1\"";
    assert!(if_range_holds(b"\"a-1\"", etag, 0));
    assert!(!if_range_holds(b"W/\"a-1\"", etag, 0));
    assert!(!if_range_holds(b"\"a-2\"", etag, 0));
    assert!(if_range_holds(
        b"Sun, 06 Nov 1994 08:49:37 GMT",
        etag,
        784_111_777
    ));
    assert!(!if_range_holds(
        b"Sun, 06 Nov 1994 08:49:38 GMT",
        etag,
        784_111_777
    ));
}

#[test]
fn dates_are_written_and_read_as_imf_fixdate() {
    let mut out = Vec::new();
    http_date(784_111_777, &mut out);
    assert_eq!(out, b"Sun, 06 Nov 1994 08:49:37 GMT");
    http_date(0, &mut out);
    assert_eq!(out, b"Thu, 01 Jan 1970 00:00:00 GMT");
    http_date(1_709_210_096, &mut out);
    assert_eq!(out, b"Thu, 29 Feb 2024 12:34:56 GMT");
    for seconds in [0, 784_111_777, 1_709_210_096, 4_102_444_799] {
        http_date(seconds, &mut out);
        assert_eq!(parse_http_date(&out), Some(seconds));
    }
    assert_eq!(parse_http_date(b"Sunday, 06-Nov-94 08:49:37 GMT"), None);
    assert_eq!(parse_http_date(b"Sun Nov  6 08:49:37 1994"), None);
    assert_eq!(parse_http_date(b"Sun, 06 Nov 1994 25:49:37 GMT"), None);
    assert_eq!(parse_http_date(b"Sun, 06 Xyz 1994 08:49:37 GMT"), None);
}

#[test]
fn ranges_single_several_suffix_open_and_unsatisfiable() {
    assert_eq!(
        parse_ranges(b"bytes=0-99", 1000),
        Ranges::Parts(vec![(0, 99)])
    );
    assert_eq!(
        parse_ranges(b"bytes=900-", 1000),
        Ranges::Parts(vec![(900, 999)])
    );
    assert_eq!(
        parse_ranges(b"bytes=-100", 1000),
        Ranges::Parts(vec![(900, 999)])
    );
    assert_eq!(
        parse_ranges(b"bytes=-5000", 1000),
        Ranges::Parts(vec![(0, 999)])
    );
    assert_eq!(
        parse_ranges(b"bytes=990-5000", 1000),
        Ranges::Parts(vec![(990, 999)])
    );
    assert_eq!(
        parse_ranges(b"bytes=0-0, 10-19 ,-1", 1000),
        Ranges::Parts(vec![(0, 0), (10, 19), (999, 999)])
    );
    assert_eq!(parse_ranges(b"BYTES=1-2", 10), Ranges::Parts(vec![(1, 2)]));
    // Unsatisfiable ones are dropped; none left: 416.
    assert_eq!(
        parse_ranges(b"bytes=5-9, 2000-", 1000),
        Ranges::Parts(vec![(5, 9)])
    );
    assert_eq!(parse_ranges(b"bytes=1000-", 1000), Ranges::Unsatisfiable);
    assert_eq!(parse_ranges(b"bytes=-0", 1000), Ranges::Unsatisfiable);
    assert_eq!(parse_ranges(b"bytes=0-", 0), Ranges::Unsatisfiable);
    // Not understood: the whole file.
    for bad in [
        &b"items=0-1"[..],
        b"bytes=",
        b"bytes=a-b",
        b"bytes=5-1",
        b"bytes=1",
        b"bytes=--1",
        b"bytes=+1-2",
        b"",
    ] {
        assert_eq!(parse_ranges(bad, 1000), Ranges::Whole, "{:?}", bad);
    }
    let many = format!(
        "bytes={}",
        (0..=MAX_RANGES)
            .map(|i| format!("{i}-{i}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    assert_eq!(parse_ranges(many.as_bytes(), 1000), Ranges::Whole);
    // Overlaps adding up to more than the file: the file once.
    assert_eq!(parse_ranges(b"bytes=0-,0-", 1000), Ranges::Whole);
    assert_eq!(parse_ranges(b"bytes=0-599,400-999", 1000), Ranges::Whole);
    assert_eq!(
        parse_ranges(b"bytes=0-499,400-899", 1000),
        Ranges::Parts(vec![(0, 499), (400, 899)])
    );
}

fn chosen(header: Option<&str>) -> Vec<Encoding> {
    preference(accepted(header.map(str::as_bytes))).collect()
}

#[test]
fn accept_encoding_q_values_choose_the_sibling() {
    use Encoding::{Brotli, Gzip, Zstd};
    // A browser's: the server's order among equals.
    assert_eq!(
        chosen(Some("gzip, deflate, br, zstd")),
        [Brotli, Zstd, Gzip]
    );
    assert_eq!(chosen(Some("gzip, deflate, br")), [Brotli, Gzip]);
    assert_eq!(chosen(Some("gzip;q=1.0, br;q=0.5")), [Gzip, Brotli]);
    assert_eq!(chosen(Some("br;q=0, gzip")), [Gzip]);
    assert_eq!(chosen(Some("*")), [Brotli, Zstd, Gzip]);
    assert_eq!(chosen(Some("*;q=0.1, gzip;q=0.2")), [Gzip, Brotli, Zstd]);
    assert_eq!(chosen(Some("*;q=0, zstd")), [Zstd]);
    assert_eq!(chosen(Some("x-gzip")), [Gzip]);
    assert_eq!(chosen(Some("GZIP;Q=0.5")), [Gzip]);
    assert_eq!(chosen(Some("identity")), []);
    assert_eq!(chosen(Some("")), []);
    assert_eq!(chosen(None), []);
    // A malformed q-value drops its item.
    assert_eq!(chosen(Some("br;q=2, gzip;q=0.1234, zstd;q=0.001")), [Zstd]);
}
