//! The header rules of a static answer, as pure functions: the MIME type of a name, whether a
//! name carries a content hash, the validators (`ETag`, `Last-Modified`) and the conditional
//! requests they answer (RFC 9110 13), byte ranges (RFC 9110 14), and which precompressed
//! representation `Accept-Encoding` chooses (RFC 9110 12.5.3).
//!
//! It must not touch the file system or the exchange: `static_files` feeds it what it read.

use std::io::Write;

/// The MIME type of `name` by its extension (ASCII case ignored); text types carry
/// `charset=utf-8`. Unknown: `application/octet-stream`.
pub(crate) fn mime_type(name: &[u8]) -> &'static str {
    let base = name.rsplit(|&b| b == b'/').next().unwrap_or(name);
    let Some(dot) = base.iter().rposition(|&b| b == b'.') else {
        return "application/octet-stream";
    };
    let mut lower = [0u8; 8];
    let ext = &base[dot + 1..];
    if ext.len() > lower.len() {
        return "application/octet-stream";
    }
    for (to, from) in lower.iter_mut().zip(ext) {
        *to = from.to_ascii_lowercase();
    }
    match &lower[..ext.len()] {
        b"html" | b"htm" => "text/html; charset=utf-8",
        b"css" => "text/css; charset=utf-8",
        b"js" | b"mjs" => "text/javascript; charset=utf-8",
        b"json" | b"map" => "application/json",
        b"webmanifest" => "application/manifest+json",
        b"txt" => "text/plain; charset=utf-8",
        b"md" => "text/markdown; charset=utf-8",
        b"csv" => "text/csv; charset=utf-8",
        b"xml" => "text/xml; charset=utf-8",
        b"svg" => "image/svg+xml",
        b"png" => "image/png",
        b"jpg" | b"jpeg" => "image/jpeg",
        b"gif" => "image/gif",
        b"webp" => "image/webp",
        b"avif" => "image/avif",
        b"ico" => "image/vnd.microsoft.icon",
        b"bmp" => "image/bmp",
        b"woff" => "font/woff",
        b"woff2" => "font/woff2",
        b"ttf" => "font/ttf",
        b"otf" => "font/otf",
        b"wasm" => "application/wasm",
        b"pdf" => "application/pdf",
        b"zip" => "application/zip",
        b"gz" => "application/gzip",
        b"mp4" => "video/mp4",
        b"webm" => "video/webm",
        b"mp3" => "audio/mpeg",
        b"ogg" => "audio/ogg",
        b"wav" => "audio/wav",
        _ => "application/octet-stream",
    }
}

/// Whether a type is worth precompressed siblings: text, and the text-like application types.
/// Only for these are siblings looked for (and `Vary: Accept-Encoding` sent).
pub(crate) fn is_compressible(mime: &str) -> bool {
    mime.starts_with("text/")
        || matches!(
            mime,
            "application/json" | "application/manifest+json" | "image/svg+xml" | "application/wasm"
        )
}

/// Whether `part` looks like a content hash: 8 or more hex digits, at least one a letter
/// (`a`-`f`, either case) and one a digit. Digits only is a date or a counter
/// (`20240115`), not a hash: a file under it may change, so it must not be cached for ever;
/// a real hash is digits only once in about 40 (8 hex: (10/16)^8), and then merely gets the
/// shorter `static_cache_control`.
fn is_hex_hash(part: &[u8]) -> bool {
    part.len() >= 8
        && part.iter().all(u8::is_ascii_hexdigit)
        && part.iter().any(u8::is_ascii_digit)
        && part.iter().any(u8::is_ascii_alphabetic)
}

/// Whether `relative` (a path beneath a mount) names a file whose name changes with its
/// content: a directory that looks like a hash (`3f2a9c1e/app.css`), or a dot-separated part
/// of the file name that does, between its first part and its extension (`app.3f2a9c1e.css`:
/// Django's `ManifestStaticFilesStorage`, webpack's `[contenthash]`). Looking like a hash: 8
/// or more hex digits mixing letters and digits ([`is_hex_hash`]).
pub(crate) fn carries_content_hash(relative: &[u8]) -> bool {
    let mut segments = relative.rsplit(|&b| b == b'/');
    let file = segments.next().unwrap_or(b"");
    if segments.any(is_hex_hash) {
        return true;
    }
    let parts: Vec<&[u8]> = file.split(|&b| b == b'.').collect();
    parts.len() >= 3
        && parts[1..parts.len() - 1]
            .iter()
            .any(|part| is_hex_hash(part))
}

/// A representation's validators, from its file's `fstat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Validators {
    /// Modification time, seconds since the epoch.
    pub mtime: i64,
    /// Its nanoseconds (a file rewritten within the second gets another `ETag`).
    pub mtime_nsec: i64,
    /// The file's size.
    pub size: u64,
}

impl Validators {
    /// The strong `ETag`: `"MTIME.NSEC-SIZE"` in hex, and `-br`/`-zst`/`-gz` for a
    /// precompressed sibling (each representation its own tag, RFC 9110 8.8.3).
    pub(crate) fn etag(&self, encoding: Option<Encoding>, out: &mut Vec<u8>) {
        out.clear();
        let _ = write!(
            out,
            "\"{:x}.{:x}-{:x}",
            self.mtime, self.mtime_nsec, self.size
        );
        if let Some(encoding) = encoding {
            out.push(b'-');
            out.extend_from_slice(encoding.suffix());
        }
        out.push(b'"');
    }
}

/// The opaque part of an entity tag (`W/` dropped): for the weak comparison.
fn opaque(tag: &[u8]) -> &[u8] {
    let tag = tag.trim_ascii();
    tag.strip_prefix(b"W/").unwrap_or(tag)
}

/// `If-None-Match` (RFC 9110 13.1.2): true when `value` lists `etag` by the weak comparison,
/// or is `*`: the answer is then 304.
pub(crate) fn none_match_fails(value: &[u8], etag: &[u8]) -> bool {
    if value.trim_ascii() == b"*" {
        return true;
    }
    value
        .split(|&b| b == b',')
        .any(|tag| !tag.trim_ascii().is_empty() && opaque(tag) == opaque(etag))
}

/// `If-Range` (RFC 9110 13.1.5): the range applies when the value is the current `etag` by
/// the strong comparison (a weak tag never matches), or an HTTP-date equal to the
/// `Last-Modified` sent (`mtime`).
pub(crate) fn if_range_holds(value: &[u8], etag: &[u8], mtime: i64) -> bool {
    let value = value.trim_ascii();
    if value.starts_with(b"W/") {
        return false;
    }
    if value.starts_with(b"\"") {
        return value == etag;
    }
    parse_http_date(value) == Some(mtime)
}

const DAYS: [&[u8]; 7] = [b"Thu", b"Fri", b"Sat", b"Sun", b"Mon", b"Tue", b"Wed"];
const MONTHS: [&[u8]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// Writes `seconds` (since the epoch) as an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`).
pub(crate) fn http_date(seconds: i64, out: &mut Vec<u8>) {
    out.clear();
    let days = seconds.div_euclid(86_400);
    let rest = seconds.rem_euclid(86_400);
    let (year, month, day) = crate::clock::civil_from_days(days);
    let _ = write!(
        out,
        "{}, {:02} {} {:04} {:02}:{:02}:{:02} GMT",
        String::from_utf8_lossy(DAYS[days.rem_euclid(7) as usize]),
        day,
        String::from_utf8_lossy(MONTHS[month as usize - 1]),
        year,
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    );
}

/// Days since the epoch of a civil date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year - era * 400;
    let doy = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Parses an IMF-fixdate (the form every sender must use, RFC 9110 5.6.7) into seconds since
/// the epoch. The obsolete forms are not parsed: a condition in them is ignored, which only
/// costs a full answer.
pub(crate) fn parse_http_date(value: &[u8]) -> Option<i64> {
    let value = value.trim_ascii();
    // "Sun, 06 Nov 1994 08:49:37 GMT"
    if value.len() != 29 || &value[3..5] != b", " || &value[25..] != b" GMT" {
        return None;
    }
    let number = |range: std::ops::Range<usize>| -> Option<i64> {
        let digits = &value[range];
        digits
            .iter()
            .all(u8::is_ascii_digit)
            .then(|| std::str::from_utf8(digits).ok()?.parse().ok())?
    };
    let day = number(5..7)?;
    let month = MONTHS.iter().position(|m| *m == &value[8..11])? as i64 + 1;
    let year = number(12..16)?;
    let (hour, minute, second) = (number(17..19)?, number(20..22)?, number(23..25)?);
    if value[7] != b' ' || value[11] != b' ' || value[16] != b' ' || value[19] != b':' {
        return None;
    }
    if !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second)
}

/// Most ranges one request may ask for; more, or ranges adding up to more than the file, are
/// served as the whole file (RFC 9110 14.2 lets a server ignore a Range: many small ranges
/// cost more than the file, overlapping ones multiply it).
pub(crate) const MAX_RANGES: usize = 16;

/// What a `Range` header asks of a representation of `length` bytes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ranges {
    /// No usable Range (absent, another unit, bad syntax, too many): the whole file, 200.
    Whole,
    /// The satisfiable ranges, in the order asked: `(first, last)` byte positions, inclusive.
    Parts(Vec<(u64, u64)>),
    /// None of the ranges is satisfiable: 416.
    Unsatisfiable,
}

/// Parses `Range` (RFC 9110 14.1.1) against a representation of `length` bytes.
pub(crate) fn parse_ranges(value: &[u8], length: u64) -> Ranges {
    let value = value.trim_ascii();
    let Some(specs) = value
        .get(..6)
        .filter(|unit| unit.eq_ignore_ascii_case(b"bytes="))
        .map(|_| &value[6..])
    else {
        return Ranges::Whole;
    };
    let number = |digits: &[u8]| -> Option<u64> {
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(digits).ok()?.parse().ok()
    };
    let mut parts = Vec::new();
    let mut asked = 0;
    for spec in specs.split(|&b| b == b',') {
        let spec = spec.trim_ascii();
        if spec.is_empty() {
            // Empty list elements are allowed (RFC 9110 5.6.1).
            continue;
        }
        asked += 1;
        if asked > MAX_RANGES {
            return Ranges::Whole;
        }
        let Some(dash) = spec.iter().position(|&b| b == b'-') else {
            return Ranges::Whole;
        };
        let (first, last) = (&spec[..dash], &spec[dash + 1..]);
        if first.is_empty() {
            // A suffix: the last N bytes.
            let Some(suffix) = number(last) else {
                return Ranges::Whole;
            };
            if suffix > 0 && length > 0 {
                parts.push((length - suffix.min(length), length - 1));
            }
            continue;
        }
        let Some(first) = number(first) else {
            return Ranges::Whole;
        };
        let last = if last.is_empty() {
            u64::MAX
        } else {
            match number(last) {
                Some(last) if last >= first => last,
                _ => return Ranges::Whole,
            }
        };
        if first < length {
            parts.push((first, last.min(length - 1)));
        }
    }
    // Overlapping ranges that add up to more than the file (`0-,0-,0-`...) would multiply a
    // large file's bytes (RFC 9110 14.2 lets a server ignore them): the whole file once.
    let total = parts
        .iter()
        .map(|(first, last)| last - first + 1)
        .fold(0u64, u64::saturating_add);
    if asked == 0 || total > length {
        Ranges::Whole
    } else if parts.is_empty() {
        Ranges::Unsatisfiable
    } else {
        Ranges::Parts(parts)
    }
}

/// A precompressed sibling's coding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Encoding {
    /// `.br`, `Content-Encoding: br`.
    Brotli,
    /// `.zst`, `Content-Encoding: zstd`.
    Zstd,
    /// `.gz`, `Content-Encoding: gzip`.
    Gzip,
}

impl Encoding {
    /// In the server's order of preference among codings the client weighs alike (the
    /// smallest first).
    pub(crate) const ALL: [Encoding; 3] = [Encoding::Brotli, Encoding::Zstd, Encoding::Gzip];

    /// The `Content-Encoding` token.
    pub(crate) fn token(self) -> &'static [u8] {
        match self {
            Encoding::Brotli => b"br",
            Encoding::Zstd => b"zstd",
            Encoding::Gzip => b"gzip",
        }
    }

    /// The sibling's suffix (without the dot), also the ETag's.
    pub(crate) fn suffix(self) -> &'static [u8] {
        match self {
            Encoding::Brotli => b"br",
            Encoding::Zstd => b"zst",
            Encoding::Gzip => b"gz",
        }
    }
}

/// A q-value (RFC 9110 12.4.2) in thousandths; `None` when malformed.
fn qvalue(params: &[u8]) -> Option<u16> {
    for param in params.split(|&b| b == b';') {
        let param = param.trim_ascii();
        let Some(value) = param
            .get(..2)
            .filter(|name| name.eq_ignore_ascii_case(b"q="))
            .map(|_| &param[2..])
        else {
            continue;
        };
        let (whole, fraction) = match value.iter().position(|&b| b == b'.') {
            Some(dot) => (&value[..dot], &value[dot + 1..]),
            None => (value, &b""[..]),
        };
        if whole.len() != 1 || fraction.len() > 3 || !fraction.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let mut thousandths = match whole[0] {
            b'0' => 0u16,
            b'1' => 1000,
            _ => return None,
        };
        let mut scale = 100;
        for digit in fraction {
            thousandths += u16::from(digit - b'0') * scale;
            scale /= 10;
        }
        return (thousandths <= 1000).then_some(thousandths);
    }
    Some(1000)
}

/// The weight `Accept-Encoding` gives each coding of [`Encoding::ALL`] (0: not acceptable):
/// by its own token, else `*`, else 0 (RFC 9110 12.5.3; `x-gzip` is `gzip`). No header: none
/// is acceptable here (identity is always served then).
pub(crate) fn accepted(value: Option<&[u8]>) -> [u16; 3] {
    let mut weights = [None::<u16>; 3];
    let mut star = None;
    if let Some(value) = value {
        for item in value.split(|&b| b == b',') {
            let (token, params) = match item.iter().position(|&b| b == b';') {
                Some(semi) => (&item[..semi], &item[semi..]),
                None => (item, &b""[..]),
            };
            let token = token.trim_ascii();
            let Some(q) = qvalue(params) else { continue };
            if token == b"*" {
                star = Some(q);
                continue;
            }
            for (index, encoding) in Encoding::ALL.iter().enumerate() {
                let same = token.eq_ignore_ascii_case(encoding.token())
                    || (*encoding == Encoding::Gzip && token.eq_ignore_ascii_case(b"x-gzip"));
                if same {
                    weights[index] = Some(q);
                }
            }
        }
    }
    weights.map(|weight| weight.or(star).unwrap_or(0))
}

/// The codings acceptable by `weights`, highest weight first, the server's order among equals.
pub(crate) fn preference(weights: [u16; 3]) -> impl Iterator<Item = Encoding> {
    let mut order = [0usize, 1, 2];
    // Stable: equal weights keep the server's order.
    order.sort_by_key(|&index| std::cmp::Reverse(weights[index]));
    order
        .into_iter()
        .filter(move |&index| weights[index] > 0)
        .map(|index| Encoding::ALL[index])
}

#[cfg(test)]
mod tests;
