//! [`TlsInfo`] from a finished handshake: what the environ (mod_ssl's variables), the ASGI
//! TLS extension and the access log show. Built once per connection, when its handshake ends.
//!
//! Two facts are not in the session: which leaf was served (rustls does not say; the resolver
//! answers again for the same name) and why an `optional` client certificate failed (the
//! verifier judges it). Both belong to the config, which offers no room for our own data nor a
//! way to downcast its parts; so [`super::config::server_config`] registers them here, keyed
//! by the config's address, and [`TlsInfo::from_session`] finds them with the config the
//! session was made from. One entry per config (one per worker generation); a lock per
//! finished handshake, none per request. A config made elsewhere (a test's) has no entry:
//! its info has an empty `server_cert_pem` and judges a client certificate `Success`.

use std::sync::{Arc, Mutex, Weak};

use rustls::{HandshakeKind, ProtocolVersion, ServerConfig, ServerConnection};
use rustls_pki_types::{CertificateDer, UnixTime};
use x509_cert::der::Decode;
use x509_cert::Certificate;

use super::config::SUITES;
use super::material::pem;
use super::resolver::SniResolver;
use super::verifier::ReportingVerifier;
use super::{ClientVerify, TlsInfo};

/// How a client certificate of a finished handshake is judged.
#[derive(Debug)]
pub(crate) enum Judge {
    /// None is asked for.
    NoClientAuth,
    /// `required`: the handshake finished, so webpki accepted it.
    Required,
    /// `optional`: accepted whatever it is; judged now.
    Optional(Arc<ReportingVerifier>),
}

struct Source {
    config: Weak<ServerConfig>,
    resolver: Arc<SniResolver>,
    judge: Judge,
}

static SOURCES: Mutex<Vec<Source>> = Mutex::new(Vec::new());

/// Records what [`TlsInfo::from_session`] needs of `config` (and forgets the configs gone).
pub(crate) fn register(config: &Arc<ServerConfig>, resolver: Arc<SniResolver>, judge: Judge) {
    let mut sources = SOURCES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    sources.retain(|source| source.config.strong_count() > 0);
    sources.push(Source {
        config: Arc::downgrade(config),
        resolver,
        judge,
    });
}

impl TlsInfo {
    /// What the finished handshake of `session` tells, `config` being the config the session
    /// was made from.
    pub fn from_session(session: &ServerConnection, config: &Arc<ServerConfig>) -> TlsInfo {
        let version = session.protocol_version().map_or(0, u16::from);
        let protocol = match session.protocol_version() {
            Some(ProtocolVersion::TLSv1_3) => "TLSv1.3",
            Some(ProtocolVersion::TLSv1_2) => "TLSv1.2",
            _ => "",
        };
        let cipher_suite = session
            .negotiated_cipher_suite()
            .map_or(0, |s| u16::from(s.suite()));
        let cipher = SUITES
            .iter()
            .find(|s| s.0 == cipher_suite)
            .map(|s| s.2)
            .or_else(|| {
                session
                    .negotiated_cipher_suite()
                    .and_then(|s| s.suite().as_str())
            })
            .unwrap_or("");
        let server_name = session.server_name().map(str::to_owned);
        let chain = session.peer_certificates().unwrap_or(&[]);
        let (server_cert_pem, client_verify) = {
            let sources = SOURCES
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            match sources
                .iter()
                .find(|s| std::ptr::eq(s.config.as_ptr(), Arc::as_ptr(config)))
            {
                Some(source) => (
                    source
                        .resolver
                        .leaf_pem(server_name.as_deref())
                        .unwrap_or_else(|| "".into()),
                    judge(&source.judge, chain),
                ),
                None => ("".into(), judge(&Judge::Required, chain)),
            }
        };
        let leaf = chain
            .first()
            .and_then(|der| Certificate::from_der(der).ok());
        let leaf = leaf.as_ref().map(|cert| &cert.tbs_certificate);
        TlsInfo {
            version,
            protocol,
            cipher_suite,
            cipher,
            server_name,
            alpn: session.alpn_protocol().map(<[u8]>::to_vec),
            resumed: session.handshake_kind() == Some(HandshakeKind::Resumed),
            server_cert_pem,
            client_chain_pem: chain.iter().map(|der| pem("CERTIFICATE", der)).collect(),
            client_subject: leaf.map(|tbs| tbs.subject.to_string()),
            client_issuer: leaf.map(|tbs| tbs.issuer.to_string()),
            client_serial: leaf.map(|tbs| serial_hex(tbs.serial_number.as_bytes())),
            client_verify,
        }
    }
}

fn judge(judge: &Judge, chain: &[CertificateDer<'static>]) -> ClientVerify {
    match (judge, chain.is_empty()) {
        (_, true) | (Judge::NoClientAuth, _) => ClientVerify::None,
        (Judge::Required, false) => ClientVerify::Success,
        (Judge::Optional(verifier), false) => verifier.judge(chain, UnixTime::now()),
    }
}

/// A serial number as OpenSSL prints it (`BN_bn2hex`): upper-case hex, no leading zero byte.
fn serial_hex(bytes: &[u8]) -> String {
    let start = bytes
        .iter()
        .position(|&b| b != 0)
        .unwrap_or(bytes.len().saturating_sub(1));
    let mut hex = String::with_capacity(2 * bytes.len());
    for byte in &bytes[start..] {
        hex.push_str(&format!("{byte:02X}"));
    }
    if hex.is_empty() {
        hex.push_str("00");
    }
    hex
}
