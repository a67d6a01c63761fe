//! The PROXY protocol header (HAProxy's `doc/proxy-protocol.txt`, versions 1 and 2): the line
//! or block a proxy sends before any byte of the client's stream, carrying the client's
//! address. Sans-IO like the rest of the crate: [`parse_proxy_header`] takes the bytes that
//! have arrived so far and answers "need more", "complete (n bytes, what it says)" or
//! "invalid (why)"; the server decides whom to believe and what to do with the addresses.
//!
//! Written here rather than taken from a crate (`ppp` is the well-kept one): the parse is about
//! two hundred lines, it must answer on a prefix without allocating (`ppp` builds owned TLV
//! lists and reports an incomplete v1 line the same way as some malformed ones), and the
//! strictness is ours to choose: exactly the grammar of the spec, single spaces, decimal ports
//! without leading zeros, addresses of the announced family, a CRLF within 107 bytes, and a
//! cap on the version 2 length. It must not know of sockets or of which peers are trusted.
//!
//! The version is told by the first byte (`P` for version 1, CR for the version 2 signature),
//! so a client that speaks HTTP straight away (`GET ...`) is refused on its first byte. The
//! outcome is monotonic: once a prefix is complete or invalid, every longer input gives the
//! same answer (`fuzzing::check_proxy_header` checks it).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The longest version 1 header, CRLF included (the spec's worst case:
/// `PROXY UNKNOWN ffff:...:ffff ffff:...:ffff 65535 65535\r\n`).
pub const MAX_V1_LENGTH: usize = 107;

/// The version 2 signature: it cannot start an HTTP request (nor most other protocols).
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// The fixed part of a version 2 header: signature, version and command, family and
/// transport, length.
const V2_FIXED: usize = 16;

/// The most address and TLV bytes a version 2 header may carry here. The spec allows 65535;
/// real senders add a few TLVs (ALPN, authority, SSL details, a unique id, a cloud endpoint
/// id) that stay well under a kilobyte, and the header sits in the connection's 8 KiB first
/// read buffer ahead of the request head: 4 KiB leaves the head its room.
pub const MAX_V2_PAYLOAD: usize = 4096;

/// What a complete PROXY header says about the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyHeader {
    /// A relayed TCP connection: the client's address and the address it connected to.
    Proxied {
        /// The client (what the server reports as the remote address).
        source: SocketAddr,
        /// The address the client connected to, on the proxy.
        destination: SocketAddr,
    },
    /// Version 2 `LOCAL`: the proxy's own connection (a health check); the real connection
    /// endpoints apply.
    Local,
    /// Relayed, but not with IP addresses the header carries (version 1 `UNKNOWN`, version 2
    /// `UNSPEC` family or transport, or a Unix-socket client): the real endpoints apply, as
    /// the spec asks.
    Unknown,
}

/// How far a PROXY header is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyStatus {
    /// The input is a valid beginning of a header: more bytes are needed.
    Partial,
    /// A whole header: it takes the first `consumed` bytes of the input (the client's own
    /// bytes follow).
    Complete {
        /// The header's length.
        consumed: usize,
        /// What it says.
        header: ProxyHeader,
    },
}

/// Why bytes are not a PROXY header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyError {
    /// The first bytes are neither `PROXY ` nor the version 2 signature (a client that did
    /// not go through the proxy, or a proxy not set to send the header).
    NotProxyHeader,
    /// A version 1 line without CRLF within 107 bytes, or a bare CR or LF.
    V1LineEnd,
    /// A version 1 protocol other than `TCP4`, `TCP6`, `UNKNOWN`.
    V1Protocol,
    /// A version 1 line with other than four single-space-separated fields after the protocol.
    V1Fields,
    /// A version 1 address that is not an address of the announced family.
    V1Address,
    /// A version 1 port that is not a decimal 0..=65535 without leading zeros.
    V1Port,
    /// A version 2 version other than 2, or a command other than `LOCAL` and `PROXY`.
    V2Version,
    /// A version 2 family or transport that is not defined (or datagrams on a stream).
    V2Family,
    /// A version 2 length above [`MAX_V2_PAYLOAD`].
    V2TooLong,
    /// A version 2 length too short for the addresses of its family.
    V2AddressLength,
    /// A version 2 TLV that runs past the header's length.
    V2Tlv,
}

impl std::fmt::Display for ProxyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ProxyError::NotProxyHeader => {
                "no PROXY header (the first bytes are not 'PROXY ' nor the v2 signature)"
            }
            ProxyError::V1LineEnd => "PROXY v1 line without CRLF within 107 bytes",
            ProxyError::V1Protocol => "PROXY v1 protocol is not TCP4, TCP6 or UNKNOWN",
            ProxyError::V1Fields => {
                "PROXY v1 line does not have four single-space-separated fields"
            }
            ProxyError::V1Address => "PROXY v1 address is not an address of its family",
            ProxyError::V1Port => "PROXY v1 port is not a decimal 0-65535",
            ProxyError::V2Version => "PROXY v2 version or command is unknown",
            ProxyError::V2Family => {
                "PROXY v2 address family or transport is unknown or not a stream"
            }
            ProxyError::V2TooLong => "PROXY v2 header is longer than 4096 bytes",
            ProxyError::V2AddressLength => "PROXY v2 length is too short for its addresses",
            ProxyError::V2Tlv => "PROXY v2 TLV runs past the header",
        })
    }
}

impl std::error::Error for ProxyError {}

/// Parses a PROXY header (version 1 or 2) at the start of `input`, the bytes received so far.
pub fn parse_proxy_header(input: &[u8]) -> Result<ProxyStatus, ProxyError> {
    match input.first() {
        None => Ok(ProxyStatus::Partial),
        Some(b'P') => parse_v1(input),
        Some(b'\r') => parse_v2(input),
        Some(_) => Err(ProxyError::NotProxyHeader),
    }
}

/// True when `input` and `expected` agree on their common length.
fn agrees(input: &[u8], expected: &[u8]) -> bool {
    let n = input.len().min(expected.len());
    input[..n] == expected[..n]
}

fn parse_v1(input: &[u8]) -> Result<ProxyStatus, ProxyError> {
    const PREFIX: &[u8] = b"PROXY ";
    if !agrees(input, PREFIX) {
        return Err(ProxyError::NotProxyHeader);
    }
    let window = &input[..input.len().min(MAX_V1_LENGTH)];
    let Some(end) = window.iter().position(|&b| b == b'\n') else {
        if window.contains(&b'\r') {
            // A CR must be the line's end, and it is not followed by LF in the window (or the
            // window ends on it: wait for the LF).
            let cr = window.iter().position(|&b| b == b'\r').unwrap_or(0);
            if cr + 1 < window.len() {
                return Err(ProxyError::V1LineEnd);
            }
        }
        return if window.len() == MAX_V1_LENGTH {
            Err(ProxyError::V1LineEnd)
        } else {
            Ok(ProxyStatus::Partial)
        };
    };
    if end == 0 || window[end - 1] != b'\r' {
        return Err(ProxyError::V1LineEnd);
    }
    let line = &window[PREFIX.len()..end - 1];
    if line.contains(&b'\r') {
        return Err(ProxyError::V1LineEnd);
    }
    let consumed = end + 1;
    let mut fields = line.split(|&b| b == b' ');
    let protocol = fields.next().unwrap_or(b"");
    let family = match protocol {
        // The spec: after UNKNOWN the receiver ignores everything up to the CRLF.
        b"UNKNOWN" => {
            return Ok(ProxyStatus::Complete {
                consumed,
                header: ProxyHeader::Unknown,
            })
        }
        b"TCP4" => Family::Inet,
        b"TCP6" => Family::Inet6,
        _ => return Err(ProxyError::V1Protocol),
    };
    let (Some(source), Some(destination), Some(source_port), Some(destination_port), None) = (
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
    ) else {
        return Err(ProxyError::V1Fields);
    };
    let source = parse_v1_address(source, family)?;
    let destination = parse_v1_address(destination, family)?;
    let source_port = parse_v1_port(source_port)?;
    let destination_port = parse_v1_port(destination_port)?;
    Ok(ProxyStatus::Complete {
        consumed,
        header: ProxyHeader::Proxied {
            source: SocketAddr::new(source, source_port),
            destination: SocketAddr::new(destination, destination_port),
        },
    })
}

#[derive(Clone, Copy)]
enum Family {
    Inet,
    Inet6,
}

fn parse_v1_address(field: &[u8], family: Family) -> Result<IpAddr, ProxyError> {
    let text = std::str::from_utf8(field).map_err(|_| ProxyError::V1Address)?;
    // Only the plain forms: no zone index, no brackets (std's parsers refuse both, and refuse
    // IPv4 octets with leading zeros, which some parsers read as octal).
    match family {
        Family::Inet => text.parse::<Ipv4Addr>().map(IpAddr::V4),
        Family::Inet6 => text.parse::<Ipv6Addr>().map(IpAddr::V6),
    }
    .map_err(|_| ProxyError::V1Address)
}

fn parse_v1_port(field: &[u8]) -> Result<u16, ProxyError> {
    let valid = !field.is_empty()
        && field.len() <= 5
        && field.iter().all(u8::is_ascii_digit)
        && (field[0] != b'0' || field.len() == 1);
    if !valid {
        return Err(ProxyError::V1Port);
    }
    // At most five digits: fits a u32.
    let value = field
        .iter()
        .fold(0u32, |acc, &d| acc * 10 + u32::from(d - b'0'));
    u16::try_from(value).map_err(|_| ProxyError::V1Port)
}

fn parse_v2(input: &[u8]) -> Result<ProxyStatus, ProxyError> {
    if !agrees(input, &V2_SIGNATURE) {
        return Err(ProxyError::NotProxyHeader);
    }
    if input.len() < V2_FIXED {
        return Ok(ProxyStatus::Partial);
    }
    let version_command = input[12];
    let family_transport = input[13];
    let length = usize::from(u16::from_be_bytes([input[14], input[15]]));
    let local = match version_command {
        0x20 => true,
        0x21 => false,
        _ => return Err(ProxyError::V2Version),
    };
    // Family in the high nibble (UNSPEC, INET, INET6, UNIX), transport in the low one
    // (UNSPEC, STREAM, DGRAM).
    let family = family_transport >> 4;
    let transport = family_transport & 0x0f;
    if family > 3 || transport > 2 {
        return Err(ProxyError::V2Family);
    }
    if length > MAX_V2_PAYLOAD {
        return Err(ProxyError::V2TooLong);
    }
    let consumed = V2_FIXED + length;
    if input.len() < consumed {
        return Ok(ProxyStatus::Partial);
    }
    let payload = &input[V2_FIXED..consumed];
    if local {
        // The spec: the receiver discards the block, family included, and uses the real
        // endpoints (a proxy's health check).
        return Ok(ProxyStatus::Complete {
            consumed,
            header: ProxyHeader::Local,
        });
    }
    if transport == 2 {
        // Datagrams relayed over a stream connection: not something an HTTP proxy sends.
        return Err(ProxyError::V2Family);
    }
    let address_length = match family {
        1 => 12,
        2 => 36,
        3 => 216,
        _ => 0,
    };
    if payload.len() < address_length {
        return Err(ProxyError::V2AddressLength);
    }
    check_tlvs(&payload[address_length..])?;
    let header = match (family, transport) {
        (1, 1) => {
            let ip = |at: usize| {
                IpAddr::V4(Ipv4Addr::new(
                    payload[at],
                    payload[at + 1],
                    payload[at + 2],
                    payload[at + 3],
                ))
            };
            let port = |at: usize| u16::from_be_bytes([payload[at], payload[at + 1]]);
            ProxyHeader::Proxied {
                source: SocketAddr::new(ip(0), port(8)),
                destination: SocketAddr::new(ip(4), port(10)),
            }
        }
        (2, 1) => {
            let ip = |at: usize| {
                let mut octets = [0u8; 16];
                octets.copy_from_slice(&payload[at..at + 16]);
                IpAddr::V6(Ipv6Addr::from(octets))
            };
            let port = |at: usize| u16::from_be_bytes([payload[at], payload[at + 1]]);
            ProxyHeader::Proxied {
                source: SocketAddr::new(ip(0), port(32)),
                destination: SocketAddr::new(ip(16), port(34)),
            }
        }
        // UNSPEC family or transport, or a Unix-socket client: no IP address to report.
        _ => ProxyHeader::Unknown,
    };
    Ok(ProxyStatus::Complete { consumed, header })
}

/// Checks that the TLVs after the addresses (type, 16-bit length, value) tile the rest of the
/// header exactly; their contents are not read.
fn check_tlvs(mut rest: &[u8]) -> Result<(), ProxyError> {
    while !rest.is_empty() {
        if rest.len() < 3 {
            return Err(ProxyError::V2Tlv);
        }
        let length = usize::from(u16::from_be_bytes([rest[1], rest[2]]));
        let end = 3 + length;
        if rest.len() < end {
            return Err(ProxyError::V2Tlv);
        }
        rest = &rest[end..];
    }
    Ok(())
}

#[cfg(test)]
mod tests;
