//! TLS (issue 37, ADR 0030): rustls' buffered `ServerConnection` (itself a sans-IO state
//! machine: `read_tls` / `process_new_packets` / `write_tls`) driven by our own poller on every
//! MPM, as the second variant of [`crate::transport::Transport`].
//!
//! - `conn`: [`conn::TlsConn`], the session and its socket, which the transport owns and every
//!   [`crate::transport::Link`] call reaches.
//! - `material`, `config`, `resolver`, `verifier`, `tickets`, `info` (ADR 0032, 0033): the
//!   server's certificates and keys (read and checked once, in the master), the
//!   `rustls::ServerConfig` made of them (by the master too: its workers are forked with it),
//!   the certificate chosen by SNI, client certificates, session tickets every worker opens,
//!   and [`TlsInfo`], what a finished handshake tells the app.

pub use rustls;

pub mod config;
pub mod conn;
pub mod info;
pub mod material;
pub mod resolver;
pub mod tickets;
pub mod verifier;

use std::sync::Arc;

/// The crypto provider every TLS config of the server and of `tines bench` uses (ADR 0031:
/// ring; one place to change it).
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// How a client certificate was judged (mod_ssl's `SSL_CLIENT_VERIFY`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientVerify {
    /// No certificate was sent (or none was asked for): `NONE`.
    None,
    /// A certificate chained to the client CA and was not revoked: `SUCCESS`.
    Success,
    /// A certificate was sent and accepted (`client_cert = optional`) though it does not
    /// verify; the reason: `FAILED:<reason>`.
    Failed(String),
}

/// What a finished handshake tells the app and the access log; built once per connection
/// when its handshake ends, read by the environ, the ASGI scope and the access log.
#[derive(Clone, Debug)]
pub struct TlsInfo {
    /// `0x0303` (TLS 1.2) or `0x0304` (TLS 1.3), as the ASGI TLS extension's `tls_version`.
    pub version: u16,
    /// mod_ssl's `SSL_PROTOCOL`: `TLSv1.2` or `TLSv1.3`.
    pub protocol: &'static str,
    /// The suite's IANA number (ASGI's `cipher_suite`).
    pub cipher_suite: u16,
    /// The suite's OpenSSL name, as mod_ssl's `SSL_CIPHER` spells it (for example
    /// `TLS_AES_128_GCM_SHA256`, `ECDHE-ECDSA-AES128-GCM-SHA256`).
    pub cipher: &'static str,
    /// The server name the client asked for (SNI), if any.
    pub server_name: Option<String>,
    /// The ALPN protocol agreed on, if any.
    pub alpn: Option<Vec<u8>>,
    /// The session was resumed (a ticket).
    pub resumed: bool,
    /// The leaf certificate the server presented, as PEM (ASGI's `server_cert`).
    pub server_cert_pem: Arc<str>,
    /// The client's chain as PEM, leaf first (empty without a client certificate).
    pub client_chain_pem: Vec<String>,
    /// The client leaf's subject DN (RFC 4514), if a certificate was sent.
    pub client_subject: Option<String>,
    /// The client leaf's issuer DN (RFC 4514), if a certificate was sent.
    pub client_issuer: Option<String>,
    /// The client leaf's serial number in upper-case hex (mod_ssl's `SSL_CLIENT_M_SERIAL`).
    pub client_serial: Option<String>,
    /// How the client certificate was judged.
    pub client_verify: ClientVerify,
}
