//! The client's choice of content coding (RFC 9110 12.5.3): `Accept-Encoding` lists codings
//! with optional q-values; `q=0` refuses one, `*` stands for every coding not listed, and
//! `identity` (no coding) is acceptable unless refused. Among the codings the server offers,
//! the highest q wins, a tie going to the server's order; `identity` wins when it is ranked
//! strictly above them.
//!
//! It must not allocate: it runs on every response the server could compress.

use super::Coding;

/// A q-value in thousandths (0 to 1000); a malformed one is treated as absent (1).
fn quality(params: &[u8]) -> u16 {
    for param in params.split(|&b| b == b';') {
        let param = param.trim_ascii();
        let Some(eq) = memchr::memchr(b'=', param) else {
            continue;
        };
        if !param[..eq].trim_ascii().eq_ignore_ascii_case(b"q") {
            continue;
        }
        let value = param[eq + 1..].trim_ascii();
        let (int, frac) = match memchr::memchr(b'.', value) {
            Some(dot) => (&value[..dot], &value[dot + 1..]),
            None => (value, &b""[..]),
        };
        if frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
            return 1000;
        }
        let mut thousandths = 0u16;
        for position in 0..3 {
            let digit = frac.get(position).map_or(0, |d| (d - b'0') as u16);
            thousandths = thousandths * 10 + digit;
        }
        // `1` and anything above it or malformed count as 1.
        return if int == b"0" { thousandths } else { 1000 };
    }
    1000
}

/// The coding of `offered` (the server's order) that the `Accept-Encoding` field lines
/// `values` choose, or `None` for none (identity). No field at all: `None`.
pub fn negotiate<'a>(values: impl Iterator<Item = &'a [u8]>, offered: &[Coding]) -> Option<Coding> {
    // (q of each offered coding as listed, q of `*`, q of `identity`), None when unlisted.
    let mut listed = [None::<u16>; 3];
    let mut star = None::<u16>;
    let mut identity = None::<u16>;
    let mut any_field = false;
    for value in values {
        any_field = true;
        for element in value.split(|&b| b == b',') {
            let (token, params) = match memchr::memchr(b';', element) {
                Some(semi) => (&element[..semi], &element[semi + 1..]),
                None => (element, &b""[..]),
            };
            let token = token.trim_ascii();
            if token.is_empty() {
                continue;
            }
            let q = quality(params);
            if token == b"*" {
                star = Some(q);
            } else if token.eq_ignore_ascii_case(b"identity") {
                identity = Some(q);
            } else if let Some(index) = offered.iter().position(|coding| {
                token.eq_ignore_ascii_case(coding.token())
                    || (*coding == Coding::Gzip && token.eq_ignore_ascii_case(b"x-gzip"))
            }) {
                if let Some(slot) = listed.get_mut(index) {
                    *slot = Some(q);
                }
            }
        }
    }
    if !any_field {
        return None;
    }
    let mut best: Option<(Coding, u16)> = None;
    for (index, &coding) in offered.iter().enumerate() {
        let q = listed.get(index).copied().flatten().or(star).unwrap_or(0);
        if q > 0 && !matches!(best, Some((_, top)) if top >= q) {
            best = Some((coding, q));
        }
    }
    let (coding, q) = best?;
    // Identity stays acceptable unless refused (itself, or by `*;q=0` without it listed).
    let identity_q = identity.unwrap_or(1);
    if identity_q > q {
        return None;
    }
    Some(coding)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: &[Coding] = &[Coding::Gzip, Coding::Brotli, Coding::Zstd];

    fn pick(value: &str, offered: &[Coding]) -> Option<Coding> {
        negotiate(std::iter::once(value.as_bytes()), offered)
    }

    #[test]
    fn no_field_or_empty_is_identity() {
        assert_eq!(negotiate(std::iter::empty(), ALL), None);
        assert_eq!(pick("", ALL), None);
        assert_eq!(pick("identity", ALL), None);
    }

    #[test]
    fn browser_list_takes_the_server_order() {
        assert_eq!(pick("gzip, deflate, br, zstd", ALL), Some(Coding::Gzip));
        let server = [Coding::Zstd, Coding::Brotli, Coding::Gzip];
        assert_eq!(pick("gzip, deflate, br, zstd", &server), Some(Coding::Zstd));
        assert_eq!(pick("deflate, br", ALL), Some(Coding::Brotli));
    }

    #[test]
    fn q_values_rank_and_zero_refuses() {
        assert_eq!(pick("gzip;q=0.5, br;q=0.9", ALL), Some(Coding::Brotli));
        assert_eq!(pick("gzip;q=0, br;q=0", ALL), None);
        assert_eq!(pick("GZIP ; Q=0.001", ALL), Some(Coding::Gzip));
        assert_eq!(pick("gzip;q=0.000", ALL), None);
        assert_eq!(pick("br;q=1.0, gzip", ALL), Some(Coding::Gzip));
        assert_eq!(pick("x-gzip", ALL), Some(Coding::Gzip));
    }

    #[test]
    fn star_covers_what_is_not_listed() {
        assert_eq!(pick("*", ALL), Some(Coding::Gzip));
        assert_eq!(pick("*;q=0.5, gzip;q=0", ALL), Some(Coding::Brotli));
        assert_eq!(pick("*;q=0", ALL), None);
        assert_eq!(pick("zstd;q=0.1, *;q=0", ALL), Some(Coding::Zstd));
    }

    #[test]
    fn identity_ranked_above_wins() {
        assert_eq!(pick("gzip;q=0.5, identity", ALL), None);
        assert_eq!(pick("gzip;q=0.5, identity;q=0.5", ALL), Some(Coding::Gzip));
        assert_eq!(pick("gzip, identity;q=0", ALL), Some(Coding::Gzip));
    }

    #[test]
    fn lines_combine_and_unoffered_codings_are_ignored() {
        let lines = [&b"deflate"[..], &b"br;q=0.2"[..]];
        assert_eq!(negotiate(lines.iter().copied(), ALL), Some(Coding::Brotli));
        assert_eq!(pick("br, zstd", &[Coding::Gzip]), None);
    }
}
