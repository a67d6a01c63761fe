//! The `rustls::ServerConfig` made from checked [`Material`] (ADR 0032, 0033): the versions,
//! suites and ALPN protocols the settings allow, the SNI resolver, the client verifier, the
//! ticketer shared by every worker, and no 0-RTT. The master makes it once, as its last check
//! of the material; workers are forked with it (a worker reads no TLS file).
//!
//! No server-side session cache: resumption is by tickets, which any worker can open (ADR
//! 0033); a per-process cache would only help when the same worker happens to accept the
//! resumed connection, and would hold memory for it in every worker.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::server::NoServerSessionStorage;
use rustls::{ServerConfig, SupportedCipherSuite, SupportedProtocolVersion};

use super::info::{self, Judge};
use super::material::{ClientAuth, Material, Problem};
use super::resolver::SniResolver;
use super::tickets::EpochTicketer;
use super::verifier;

/// The suites of the ring provider: IANA number, IANA name, OpenSSL name (mod_ssl's
/// `SSL_CIPHER` spelling).
pub(crate) const SUITES: [(u16, &str, &str); 9] = [
    (0x1301, "TLS_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256"),
    (0x1302, "TLS_AES_256_GCM_SHA384", "TLS_AES_256_GCM_SHA384"),
    (
        0x1303,
        "TLS_CHACHA20_POLY1305_SHA256",
        "TLS_CHACHA20_POLY1305_SHA256",
    ),
    (
        0xc02b,
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        "ECDHE-ECDSA-AES128-GCM-SHA256",
    ),
    (
        0xc02c,
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        "ECDHE-ECDSA-AES256-GCM-SHA384",
    ),
    (
        0xcca9,
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        "ECDHE-ECDSA-CHACHA20-POLY1305",
    ),
    (
        0xc02f,
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        "ECDHE-RSA-AES128-GCM-SHA256",
    ),
    (
        0xc030,
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        "ECDHE-RSA-AES256-GCM-SHA384",
    ),
    (
        0xcca8,
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
        "ECDHE-RSA-CHACHA20-POLY1305",
    ),
];

/// The ALPN protocols Tines serves (`h2`: HTTP/2, ADR 0035; the master lists it first when
/// the `http2` setting is on, and the loop reads ALPN's choice after the handshake).
const ALPN_SERVED: [&str; 3] = ["h2", "http/1.1", "http/1.0"];

/// The server config of checked material (its facts for [`super::TlsInfo`] registered with
/// it). Fails only where rustls refuses what the checks let through.
pub fn server_config(material: &Material) -> Result<Arc<ServerConfig>, Problem> {
    let resolver = Arc::new(SniResolver::new(
        &material.identities,
        material.refuse_unknown_names,
    )?);
    let builder = ServerConfig::builder_with_provider(Arc::clone(&material.provider))
        .with_protocol_versions(&material.versions)
        .map_err(|err| Problem::setting("tls_cipher_suites", err.to_string()))?;
    let (builder, judge) = match &material.client {
        None => (builder.with_no_client_auth(), Judge::NoClientAuth),
        Some(client) => {
            let (verifier, judge) = verifier::client_verifier(client, &material.provider)?;
            (builder.with_client_cert_verifier(verifier), judge)
        }
    };
    let mut config = builder.with_cert_resolver(Arc::clone(&resolver) as _);
    config.alpn_protocols = material.alpn.clone();
    config.max_early_data_size = 0;
    config.session_storage = Arc::new(NoServerSessionStorage {});
    match &material.tickets {
        Some(tickets) => {
            config.ticketer = Arc::new(EpochTicketer::new(
                &tickets.secret,
                tickets.rotation,
                client_auth_digest(material.client.as_ref()),
            ));
            // One ticket per full handshake: a client resumes with one (ADR 0033).
            config.send_tls13_tickets = 1;
        }
        None => config.send_tls13_tickets = 0,
    }
    let config = Arc::new(config);
    info::register(&config, resolver, judge);
    Ok(config)
}

/// SHA-256 of the settings that judge a client certificate (the mode, each CA's subject and
/// key, each CRL): the ticket keys depend on it (ADR 0033), so a session resumed from a ticket
/// was judged by the client-certificate settings in force now, never by older ones.
pub(crate) fn client_auth_digest(client: Option<&ClientAuth>) -> [u8; 32] {
    let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
    let mut part = |bytes: &[u8]| {
        digest.update(&(bytes.len() as u64).to_be_bytes());
        digest.update(bytes);
    };
    match client {
        None => part(b"none"),
        Some(client) => {
            part(if client.required {
                b"required"
            } else {
                b"optional"
            });
            for root in &client.roots.roots {
                part(root.subject.as_ref());
                part(root.subject_public_key_info.as_ref());
            }
            for crl in &client.crls {
                part(crl.as_ref());
            }
        }
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.finish().as_ref());
    out
}

/// The versions from `tls_min_version`.
pub(crate) fn versions(min: &str) -> Result<Vec<&'static SupportedProtocolVersion>, Problem> {
    match min {
        "1.2" => Ok(vec![&rustls::version::TLS13, &rustls::version::TLS12]),
        "1.3" => Ok(vec![&rustls::version::TLS13]),
        other => Err(Problem::setting(
            "tls_min_version",
            format!("'{other}' is not one of 1.2, 1.3 (TLS 1.0 and 1.1 are not offered)"),
        )),
    }
}

/// The provider with its suites narrowed to `names` (IANA names; empty: all of them), each
/// version offered keeping at least one.
pub(crate) fn provider_with_suites(
    names: &[String],
    versions: &[&'static SupportedProtocolVersion],
) -> Result<Arc<CryptoProvider>, Problem> {
    let mut provider = (*super::provider()).clone();
    if names.is_empty() {
        return Ok(Arc::new(provider));
    }
    let valid = || SUITES.iter().map(|s| s.1).collect::<Vec<_>>().join(", ");
    let mut chosen: Vec<SupportedCipherSuite> = Vec::new();
    for name in names {
        let Some(&(number, ..)) = SUITES.iter().find(|s| s.1.eq_ignore_ascii_case(name)) else {
            let hint = match SUITES.iter().find(|s| s.2.eq_ignore_ascii_case(name)) {
                Some((_, iana, _)) => format!(" ('{name}' is OpenSSL's name of {iana})"),
                None if name.contains([':', '!', '+', ' ']) => {
                    " (an OpenSSL cipher string is not read: list the suites by name)".to_owned()
                }
                None => String::new(),
            };
            return Err(Problem::setting(
                "tls_cipher_suites",
                format!("unknown suite '{name}'{hint}; the valid names: {}", valid()),
            ));
        };
        let suite = provider
            .cipher_suites
            .iter()
            .find(|s| u16::from(s.suite()) == number);
        if let Some(suite) = suite {
            if !chosen.iter().any(|c| c.suite() == suite.suite()) {
                chosen.push(*suite);
            }
        }
    }
    for version in versions {
        if !chosen.iter().any(|s| s.version() == *version) {
            let name = if version.version == rustls::ProtocolVersion::TLSv1_3 {
                "1.3"
            } else {
                "1.2"
            };
            return Err(Problem::setting(
                "tls_cipher_suites",
                format!(
                    "no TLS {name} suite listed, so TLS {name} could never be agreed (list one, \
                     or set tls_min_version to 1.3); the valid names: {}",
                    valid()
                ),
            ));
        }
    }
    provider.cipher_suites = chosen;
    Ok(Arc::new(provider))
}

/// The ALPN protocols of `alpn`.
pub(crate) fn alpn(protocols: &[String]) -> Result<Vec<Vec<u8>>, Problem> {
    protocols
        .iter()
        .map(|protocol| match protocol.as_str() {
            p if ALPN_SERVED.contains(&p) => Ok(p.as_bytes().to_vec()),
            other => Err(Problem::setting(
                "alpn",
                format!(
                    "'{other}' is not a protocol Tines serves ({})",
                    ALPN_SERVED.join(", ")
                ),
            )),
        })
        .collect()
}
