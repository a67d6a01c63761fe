//! Response compression (ADR 0037): which content codings the server offers and for which
//! responses ([`CompressionConfig`]), the client's choice among them by `Accept-Encoding`
//! ([`negotiate`]), whether a response is compressed ([`decide`]) and the per-response encoder
//! that compresses a body block by block ([`Encoder`]).
//!
//! Sans-IO: it takes header values and body bytes and gives back a decision and compressed
//! bytes. It must not touch a socket, frame a response (chunked or not) or know an exchange;
//! the exchange (`exchange::response`) asks it and frames what it returns.

mod decide;
mod encoder;
mod negotiate;

pub use decide::{decide, Decision, ResponseFacts};
pub use encoder::{Encoder, Gzip, Spare, Zstd};
pub use negotiate::negotiate;

/// A content coding the server can apply (RFC 9110 8.4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coding {
    /// `gzip` (RFC 1952), through flate2 on zlib-rs.
    Gzip,
    /// `br` (RFC 7932), through the pure-Rust `brotli` crate.
    Brotli,
    /// `zstd` (RFC 8878), through the `zstd` crate (the C library).
    Zstd,
}

impl Coding {
    /// The coding's token in `Accept-Encoding` and `Content-Encoding`.
    pub fn token(self) -> &'static [u8] {
        match self {
            Coding::Gzip => b"gzip",
            Coding::Brotli => b"br",
            Coding::Zstd => b"zstd",
        }
    }

    /// The coding named `token` (the setting's spelling, any case), if the server has it.
    pub fn from_token(token: &[u8]) -> Option<Coding> {
        [Coding::Gzip, Coding::Brotli, Coding::Zstd]
            .into_iter()
            .find(|coding| token.eq_ignore_ascii_case(coding.token()))
    }
}

/// The compression settings (the registry's "Compression" section): off while `codings` is
/// empty, and then it costs a request one branch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompressionConfig {
    /// The codings offered, in the server's order of preference (a tie between the client's
    /// q-values goes to the first): `compression`.
    pub codings: Vec<Coding>,
    /// Responses whose length is known and below this many bytes are sent as they are:
    /// `compression_min_size`.
    pub min_size: u64,
    /// The media types compressed, lower-case: `type/subtype` exactly, `type/*` a whole
    /// type, `+suffix` a structured syntax suffix (`+json`): `compression_types`.
    pub types: Vec<Vec<u8>>,
    /// gzip's level, 1 to 9: `compression_gzip_level`.
    pub gzip_level: u32,
    /// brotli's quality, 0 to 11: `compression_brotli_level`.
    pub brotli_level: u32,
    /// zstd's level, 1 to 19: `compression_zstd_level`.
    pub zstd_level: i32,
    /// Path prefixes whose responses are never compressed: `compression_exclude_paths`.
    pub exclude_paths: Vec<Vec<u8>>,
}

/// The registry's default `compression_types`.
pub const DEFAULT_TYPES: &[&str] = &[
    "text/*",
    "application/json",
    "application/javascript",
    "application/xml",
    "application/wasm",
    "image/svg+xml",
    "+json",
    "+xml",
];

impl Default for CompressionConfig {
    fn default() -> Self {
        CompressionConfig {
            codings: Vec::new(),
            min_size: 1024,
            types: DEFAULT_TYPES
                .iter()
                .map(|t| t.as_bytes().to_vec())
                .collect(),
            gzip_level: 5,
            brotli_level: 4,
            zstd_level: 3,
            exclude_paths: Vec::new(),
        }
    }
}

impl CompressionConfig {
    /// Whether any coding is offered (the one branch an off setting costs).
    #[inline]
    pub fn is_on(&self) -> bool {
        !self.codings.is_empty()
    }

    /// Whether request target `target` is under an excluded prefix: its path in normal form
    /// (`tines_proto::NormalPath`: absolute-form stripped, decoded once, `//` collapsed) is
    /// one of them or under one, on a segment boundary. A path with no normal form (an
    /// encoded `/` or NUL, a bad escape, a dot segment) is excluded when any prefix is set:
    /// no spelling may get an excluded page compressed (BREACH, docs).
    pub fn excludes(&self, target: &[u8]) -> bool {
        if self.exclude_paths.is_empty() {
            return false;
        }
        match tines_proto::NormalPath::of(target) {
            Ok(path) => self
                .exclude_paths
                .iter()
                .any(|prefix| path.is_under(prefix)),
            Err(_) => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excluded_prefixes_hold_every_spelling_of_their_paths() {
        let config = CompressionConfig {
            exclude_paths: vec![b"/account/".to_vec(), b"/api/tokens".to_vec()],
            ..CompressionConfig::default()
        };
        for target in [
            &b"/account/x"[..],
            b"/%61ccount/x",
            b"//account//x",
            b"http://example.com/account/x?y",
            b"/api/tokens",
            b"/api/tokens/1",
            b"/api/%74okens?x",
            // No single reading: never compressed while a prefix is set.
            b"/public%2Fx",
            b"/public/../account/x",
            b"/a%zz",
        ] {
            assert!(config.excludes(target), "{target:?}");
        }
        for target in [
            &b"/accounts/x"[..],
            b"/account",
            b"/api/tokensx",
            b"/?p=/account/",
        ] {
            assert!(!config.excludes(target), "{target:?}");
        }
        assert!(!CompressionConfig::default().excludes(b"/a%zz"));
    }
}
