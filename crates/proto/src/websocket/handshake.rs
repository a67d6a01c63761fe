//! The opening handshake (RFC 6455 4.2): whether a parsed request asks for a WebSocket, and
//! whether it asks properly; the `Sec-WebSocket-Accept` value of the server's 101.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use sha1::{Digest, Sha1};

use crate::{RequestHead, Version};

/// The GUID RFC 6455 1.3 appends to the client's key.
const GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// A valid handshake: what the server needs to answer it.
#[derive(Debug, PartialEq, Eq)]
pub struct Handshake<'a> {
    /// `Sec-WebSocket-Key`, as sent (base64 of 16 bytes).
    pub key: &'a [u8],
    /// The subprotocols the client offers, in its order (`Sec-WebSocket-Protocol`).
    pub protocols: Vec<&'a [u8]>,
    /// The extensions it offers, each header line's value as sent (`Sec-WebSocket-Extensions`).
    pub extensions: Vec<&'a [u8]>,
}

/// A request that asks for a WebSocket the wrong way: answered with `status` (400, or 426
/// with `Sec-WebSocket-Version: 13` for a version the server does not speak).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandshakeError {
    /// The response status.
    pub status: u16,
    /// Why, for the response body and the log.
    pub reason: &'static str,
}

const fn refuse(reason: &'static str) -> HandshakeError {
    HandshakeError {
        status: 400,
        reason,
    }
}

/// The items of a comma-separated header list (RFC 9110 5.6.1), trimmed, empty ones left out.
fn list_items(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|item| !item.is_empty())
}

impl<'a> Handshake<'a> {
    /// `Ok(None)` for a request that does not ask for a WebSocket (no `Upgrade: websocket`):
    /// an ordinary request. `Ok(Some)` for a valid handshake; `Err` with the status for one
    /// that asks but breaks a rule of RFC 6455 4.2.1.
    pub fn from_head(head: &RequestHead, buf: &'a [u8]) -> Result<Option<Self>, HandshakeError> {
        let headers = || {
            head.headers
                .iter()
                .map(move |(name, value)| (name.of(buf), value.of(buf)))
        };
        let named = |wanted: &'static [u8]| {
            headers()
                .filter(move |(name, _)| name.eq_ignore_ascii_case(wanted))
                .map(|(_, value)| value)
        };
        let has_token = |header: &'static [u8], token: &[u8]| {
            named(header)
                .any(|value| list_items(value).any(|item| item.eq_ignore_ascii_case(token)))
        };
        if !has_token(b"upgrade", b"websocket") {
            return Ok(None);
        }
        if head.method.of(buf) != b"GET" {
            return Err(refuse("a WebSocket handshake must be a GET request"));
        }
        if head.version != Version::Http11 {
            return Err(refuse("a WebSocket handshake must be HTTP/1.1"));
        }
        if !has_token(b"connection", b"upgrade") {
            return Err(refuse("a WebSocket handshake needs Connection: Upgrade"));
        }
        let mut versions = named(b"sec-websocket-version");
        match (versions.next(), versions.next()) {
            (Some(version), None) if version.trim_ascii() == b"13" => {}
            _ => {
                return Err(HandshakeError {
                    status: 426,
                    reason: "only WebSocket version 13 is spoken",
                })
            }
        }
        let mut keys = named(b"sec-websocket-key");
        let key = match (keys.next(), keys.next()) {
            (Some(key), None) => key.trim_ascii(),
            _ => return Err(refuse("a WebSocket handshake needs one Sec-WebSocket-Key")),
        };
        if !matches!(STANDARD.decode(key), Ok(bytes) if bytes.len() == 16) {
            return Err(refuse("Sec-WebSocket-Key is not 16 bytes in base64"));
        }
        Ok(Some(Handshake {
            key,
            protocols: named(b"sec-websocket-protocol")
                .flat_map(list_items)
                .collect(),
            extensions: named(b"sec-websocket-extensions").collect(),
        }))
    }
}

/// The `Sec-WebSocket-Accept` value for `key`: base64 of SHA-1 of the key and the GUID.
pub fn accept_key(key: &[u8]) -> String {
    let mut sha = Sha1::new();
    sha.update(key);
    sha.update(GUID);
    STANDARD.encode(sha.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse_request_head, HeadStatus, Limits};

    /// A handshake's key, subprotocols and how many extension lines it offers.
    type Found = (Vec<u8>, Vec<Vec<u8>>, usize);

    fn handshake(request: &[u8]) -> Result<Option<Found>, HandshakeError> {
        let mut head = RequestHead::default();
        assert_eq!(
            parse_request_head(request, &Limits::default(), &mut head),
            Ok(HeadStatus::Complete)
        );
        Handshake::from_head(&head, request).map(|found| {
            found.map(|h| {
                (
                    h.key.to_vec(),
                    h.protocols.iter().map(|p| p.to_vec()).collect(),
                    h.extensions.len(),
                )
            })
        })
    }

    const GOOD: &str = "GET /chat HTTP/1.1\r\nHost: server.example.com\r\nUpgrade: websocket\r\n\
        Connection: keep-alive, Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
        Sec-WebSocket-Protocol: chat, superchat\r\nSec-WebSocket-Version: 13\r\n\
        Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n";

    #[test]
    fn the_rfc_s_example_is_accepted_with_its_accept_value() {
        let (key, protocols, extensions) = handshake(GOOD.as_bytes()).unwrap().unwrap();
        assert_eq!(key, b"dGhlIHNhbXBsZSBub25jZQ==");
        assert_eq!(protocols, [b"chat".to_vec(), b"superchat".to_vec()]);
        assert_eq!(extensions, 1);
        // RFC 6455 1.3's worked example.
        assert_eq!(accept_key(&key), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    }

    #[test]
    fn a_request_without_upgrade_websocket_is_an_ordinary_one() {
        let plain = "GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n";
        assert_eq!(handshake(plain.as_bytes()), Ok(None));
    }

    #[test]
    fn each_broken_rule_gets_its_status() {
        let cases = [
            (GOOD.replacen("GET", "POST", 1), 400),
            (GOOD.replacen("HTTP/1.1", "HTTP/1.0", 1), 400),
            (
                GOOD.replace("Connection: keep-alive, Upgrade", "Connection: keep-alive"),
                400,
            ),
            (
                GOOD.replace("Sec-WebSocket-Version: 13", "Sec-WebSocket-Version: 8"),
                426,
            ),
            (GOOD.replace("Sec-WebSocket-Version: 13\r\n", ""), 426),
            (GOOD.replace("dGhlIHNhbXBsZSBub25jZQ==", "c2hvcnQ="), 400),
            (GOOD.replace("dGhlIHNhbXBsZSBub25jZQ==", "not base64!"), 400),
            (
                GOOD.replace("Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", ""),
                400,
            ),
        ];
        for (request, status) in cases {
            let error = handshake(request.as_bytes()).unwrap_err();
            assert_eq!(error.status, status, "{request}: {error:?}");
        }
        // Header names and tokens are not case-sensitive.
        let shouting = GOOD.replace("Upgrade: websocket", "UPGRADE: WebSocket");
        assert!(handshake(shouting.as_bytes()).unwrap().is_some());
    }
}
