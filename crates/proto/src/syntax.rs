//! Byte classes and small grammar helpers shared by the request, chunked and
//! response modules (RFC 9110 section 5.6, RFC 3986 section 3.2).
//!
//! Owns: which bytes are a token, a field value, a URI authority; decimal
//! parsing for Content-Length. Must not: know anything about whole messages.

/// `tchar` from RFC 9110 section 5.6.2.
pub(crate) fn is_tchar(b: u8) -> bool {
    BYTE_CLASS[usize::from(b)] & TCHAR != 0
}

/// `token = 1*tchar` (RFC 9110 section 5.6.2).
pub fn is_token(bytes: &[u8]) -> bool {
    !bytes.is_empty() && bytes.iter().all(|&b| is_tchar(b))
}

/// One byte of `field-value` (RFC 9110 section 5.5): HTAB, SP, VCHAR or
/// obs-text. Every other control byte (NUL, CR, LF, DEL, ...) is refused.
pub(crate) fn is_field_value_byte(b: u8) -> bool {
    BYTE_CLASS[usize::from(b)] & FIELD_VALUE != 0
}

/// Whether every byte may appear in a field value.
pub(crate) fn is_field_value(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| is_field_value_byte(b))
}

/// [`BYTE_CLASS`] bit: a `tchar`.
const TCHAR: u8 = 1;
/// [`BYTE_CLASS`] bit: a byte of a `field-value`.
const FIELD_VALUE: u8 = 2;
/// [`BYTE_CLASS`] bit: a byte of a `reg-name` other than `%` (`unreserved / sub-delims`,
/// RFC 3986 section 2).
const REG_NAME: u8 = 4;

/// The classes of each byte, looked up instead of compared range by range: every byte of
/// every header name and value, request and response, goes through these checks (a table
/// made checking a response's headers cost half as many instructions).
static BYTE_CLASS: [u8; 256] = byte_classes();

const fn byte_classes() -> [u8; 256] {
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        let tchar = matches!(b,
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9'
            | b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+'
            | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~');
        let field_value = b == b'\t' || (b >= b' ' && b <= b'~') || b >= 0x80;
        let reg_name = matches!(b,
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9'
            | b'-' | b'.' | b'_' | b'~' | b'!' | b'$' | b'&' | b'\'' | b'(' | b')'
            | b'*' | b'+' | b',' | b';' | b'=');
        table[i] = (if tchar { TCHAR } else { 0 })
            | (if field_value { FIELD_VALUE } else { 0 })
            | (if reg_name { REG_NAME } else { 0 });
        i += 1;
    }
    table
}

/// Optional whitespace, `OWS` (RFC 9110 section 5.6.3).
pub(crate) fn is_ows(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// The bytes without leading and trailing OWS.
pub(crate) fn trim_ows(mut bytes: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = bytes {
        if !is_ows(*first) {
            break;
        }
        bytes = rest;
    }
    while let [rest @ .., last] = bytes {
        if !is_ows(*last) {
            break;
        }
        bytes = rest;
    }
    bytes
}

/// Parses `1*DIGIT` as a u64: no sign, no whitespace, no list, no overflow
/// (RFC 9110 section 8.6). Leading zeros are allowed by the grammar.
pub(crate) fn parse_decimal(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() {
        return None;
    }
    bytes.iter().try_fold(0u64, |acc, &b| {
        let digit = (b as char).to_digit(10)?;
        acc.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

/// Splits a comma-separated list field (RFC 9110 section 5.6.1) into its
/// elements without OWS. Empty elements are kept so callers can refuse them.
pub(crate) fn list_elements(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(trim_ows)
}

/// `unreserved / sub-delims` from RFC 3986 section 2, the bytes of a `reg-name` besides
/// pct-encoded triples (by the table: every Host header goes through it).
fn is_reg_name_byte(b: u8) -> bool {
    BYTE_CLASS[usize::from(b)] & REG_NAME != 0
}

/// Why a port has at most 5 digits: 65535 is the largest TCP port, and a
/// longer run of digits is only useful to confuse a parser downstream.
const MAX_PORT_DIGITS: usize = 5;

/// Checks `uri-host [ ":" port ]` (RFC 3986 section 3.2.2 and 3.2.3), the
/// shape of the Host field, of an absolute-form authority and (with
/// `require_port`) of the CONNECT authority-form. The host must not be empty
/// (RFC 9110 section 4.2.1). Userinfo (`@`) is refused: RFC 9110 section 4.2.4
/// asks recipients to treat it as an error.
pub(crate) fn is_valid_authority(bytes: &[u8], require_port: bool) -> bool {
    let (host_ok, rest) = if let Some(inner) = bytes.strip_prefix(b"[") {
        // IP-literal: only IPv6 addresses (hex, ':' and '.' for an embedded
        // IPv4 tail); IPvFuture is not accepted.
        match memchr::memchr(b']', inner) {
            Some(end) => {
                let addr = &inner[..end];
                let ok = !addr.is_empty()
                    && addr
                        .iter()
                        .all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.');
                (ok, &inner[end + 1..])
            }
            None => (false, &inner[..0]),
        }
    } else {
        // One pass over the reg-name, to the ':' of a port (which no pct-encoded triple
        // holds): every request's Host comes here.
        let mut end = 0;
        let mut ok = true;
        while end < bytes.len() && bytes[end] != b':' {
            if is_reg_name_byte(bytes[end]) {
                end += 1;
            } else if bytes[end] == b'%' && is_pct_triple(&bytes[end..]) {
                end += 3;
            } else {
                ok = false;
                break;
            }
        }
        (ok && end > 0, &bytes[end..])
    };
    if !host_ok {
        return false;
    }
    match rest {
        [] => !require_port,
        [b':', port @ ..] => {
            port.len() <= MAX_PORT_DIGITS
                && port.iter().all(u8::is_ascii_digit)
                && !(require_port && port.is_empty())
        }
        _ => false,
    }
}

/// A non-empty `reg-name` (IPv4 addresses are a subset of it).
/// Whether `bytes` starts with a pct-encoded triple (`%` and two hex digits).
fn is_pct_triple(bytes: &[u8]) -> bool {
    matches!(bytes, [b'%', high, low, ..] if high.is_ascii_hexdigit() && low.is_ascii_hexdigit())
}

/// Whether `a` and `b` are the same bytes. Short ones (most values here: a method, a path,
/// a port, a header block) are compared inline, by words.
///
/// Why: `==` on slices calls `memcmp`, whose dispatch on the length mispredicts when lengths
/// vary from call to call: nine calls per hello-world request took 1.6% of the worker's CPU
/// (perf) for 130 instructions.
#[inline]
pub fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let len = a.len();
    if len != b.len() {
        return false;
    }
    let word = |bytes: &[u8], at: usize| -> u64 {
        u64::from_le_bytes(bytes[at..at + 8].try_into().expect("eight bytes"))
    };
    let half = |bytes: &[u8], at: usize| -> u32 {
        u32::from_le_bytes(bytes[at..at + 4].try_into().expect("four bytes"))
    };
    match len {
        0 => true,
        1..=3 => a.iter().zip(b).all(|(x, y)| x == y),
        // Two loads that overlap cover every byte.
        4..=7 => half(a, 0) == half(b, 0) && half(a, len - 4) == half(b, len - 4),
        8..=64 => {
            (0..len / 8).all(|i| word(a, i * 8) == word(b, i * 8))
                && word(a, len - 8) == word(b, len - 8)
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_bytes_of_every_length_as_slices_do() {
        for len in 0..80usize {
            let a: Vec<u8> = (0..len as u8).collect();
            assert!(same_bytes(&a, &a.clone()), "{len}");
            assert!(!same_bytes(&a, &a[..len.saturating_sub(1)]) || len == 0);
            for at in 0..len {
                let mut b = a.clone();
                b[at] ^= 0x20;
                assert!(!same_bytes(&a, &b), "{len} differs at {at}");
            }
        }
    }

    #[test]
    fn the_byte_table_matches_rfc_9110() {
        // tchar: any VCHAR except delimiters (RFC 9110 5.6.2); field-value bytes: HTAB, SP,
        // VCHAR, obs-text (5.5).
        let delimiters = b"\"(),/:;<=>?@[\\]{}";
        for b in 0..=255u8 {
            let vchar = (0x21..=0x7e).contains(&b);
            assert_eq!(
                is_tchar(b),
                vchar && !delimiters.contains(&b),
                "tchar {b:#04x}"
            );
            let field = b == b'\t' || b == b' ' || vchar || b >= 0x80;
            assert_eq!(is_field_value_byte(b), field, "field value {b:#04x}");
            // reg-name bytes: unreserved / sub-delims (RFC 3986 2.2, 2.3).
            let reg_name = b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=".contains(&b);
            assert_eq!(is_reg_name_byte(b), reg_name, "reg-name {b:#04x}");
        }
    }

    #[test]
    fn parses_plain_decimals_and_refuses_everything_else() {
        assert_eq!(parse_decimal(b"0"), Some(0));
        assert_eq!(parse_decimal(b"0005"), Some(5));
        assert_eq!(parse_decimal(b"18446744073709551615"), Some(u64::MAX));
        for bad in [
            &b""[..],
            b"18446744073709551616",
            b"+1",
            b"-0",
            b"1 ",
            b"0x1",
            b"1,1",
            b"0_1",
        ] {
            assert_eq!(parse_decimal(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn trims_only_spaces_and_tabs() {
        assert_eq!(trim_ows(b" \t a b \t"), b"a b");
        assert_eq!(trim_ows(b" \t "), b"");
        assert_eq!(trim_ows(b"\r"), b"\r");
    }

    #[test]
    fn accepts_common_authorities() {
        for ok in [
            &b"example.com"[..],
            b"example.com:443",
            b"0.0.0.0=5000",
            b"[::1]:8080",
            b"a%20b",
            b"%41%42:80",
            b"h:",
        ] {
            assert!(is_valid_authority(ok, false), "{ok:?}");
        }
        assert!(is_valid_authority(b"[::1]:443", true));
    }

    #[test]
    fn refuses_malformed_authorities() {
        for bad in [
            &b""[..],
            b":80",
            b"user@host",
            b"a b",
            b"host:80:80",
            b"host:123456",
            b"]ufd",
            b"[::1",
            b"[]",
            b"[::1]x",
            b"a%2",
            b"a%2:80",
            b"a%:b",
            b"a%g0",
            b"a/b",
            b"host:8a",
        ] {
            assert!(!is_valid_authority(bad, false), "{bad:?}");
        }
        assert!(!is_valid_authority(b"example.com", true));
        assert!(!is_valid_authority(b"example.com:", true));
    }

    #[test]
    fn splits_lists_keeping_empty_elements() {
        let parts: Vec<&[u8]> = list_elements(b"gzip , chunked,,").collect();
        assert_eq!(parts, [&b"gzip"[..], b"chunked", b"", b""]);
    }
}
