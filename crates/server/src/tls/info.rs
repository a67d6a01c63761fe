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

use base64ct::{Base64, Encoding};
use rustls::{HandshakeKind, ProtocolVersion, ServerConfig, ServerConnection};
use rustls_pki_types::{CertificateDer, UnixTime};
use x509_cert::der::Decode;
use x509_cert::Certificate;

use super::config::SUITES;
use super::resolver::SniResolver;
use super::verifier::ReportingVerifier;
use super::{ClientVerify, TlsInfo};

/// How a client certificate of a finished handshake is judged.
#[derive(Clone, Debug)]
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
        // The registry's lock covers the lookup only: judging an optional client certificate
        // (webpki's path building and signatures) runs outside it.
        let (server_cert_pem, judged_by) = {
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
                    source.judge.clone(),
                ),
                None => ("".into(), Judge::Required),
            }
        };
        let client_verify = judge(&judged_by, chain);
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

/// `der` as a PEM block.
pub(crate) fn pem(label: &str, der: &[u8]) -> String {
    let mut text = format!("-----BEGIN {label}-----\n");
    let encoded = Base64::encode_string(der);
    for line in encoded.as_bytes().chunks(64) {
        text.push_str(std::str::from_utf8(line).unwrap_or_default());
        text.push('\n');
    }
    text.push_str(&format!("-----END {label}-----\n"));
    text
}

/// Handshakes between a rustls client and a server config of ours, in memory (two buffers),
/// and what [`TlsInfo`] says of them.
#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rustls::pki_types::{PrivateKeyDer, ServerName};
    use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection};

    use super::super::config::server_config;
    use super::super::material::testing::{fixture, load, settings};
    use super::super::material::{pem_blocks, Settings};
    use super::super::{provider, ClientVerify, TlsInfo};
    use super::pem;

    fn blocks(name: &str, label: &str) -> Vec<Vec<u8>> {
        let bytes = std::fs::read(fixture(name)).expect("fixture");
        let blocks = pem_blocks(&bytes).expect("pem");
        blocks
            .iter()
            .filter(|b| b.label.ends_with(label))
            .map(|b| b.der.to_vec())
            .collect()
    }

    /// A client trusting the test root, with the client certificate `who` (`alice`,
    /// `mallory`, `stranger`) if any, at most `max` TLS 1.2 when `tls12`.
    fn client(who: Option<&str>, tls12: bool) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        roots
            .add(blocks("root.pem", "CERTIFICATE").remove(0).into())
            .expect("root");
        let versions: &[&rustls::SupportedProtocolVersion] = if tls12 {
            &[&rustls::version::TLS12]
        } else {
            &[&rustls::version::TLS13]
        };
        let builder = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(versions)
            .expect("versions")
            .with_root_certificates(roots);
        let mut config = match who {
            None => builder.with_no_client_auth(),
            Some(who) => {
                let chain = blocks(&format!("{who}.pem"), "CERTIFICATE")
                    .into_iter()
                    .map(Into::into)
                    .collect();
                let key =
                    PrivateKeyDer::try_from(blocks(&format!("{who}.key"), "PRIVATE KEY").remove(0))
                        .expect("key");
                builder
                    .with_client_auth_cert(chain, key)
                    .expect("client cert")
            }
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }

    fn server(client_cert: &str) -> Arc<ServerConfig> {
        let mut s: Settings = settings("ec256.pem", Some("ec256.key"));
        s.sni_certificates = vec![format!(
            "{}:{}",
            fixture("ed25519.pem").display(),
            fixture("ed25519.key").display()
        )];
        s.client_cert = client_cert.into();
        s.client_ca = Some(fixture("client-ca.pem"));
        s.client_crl = vec![fixture("client-ca.crl.pem")];
        server_config(&load(&s).expect("material")).expect("config")
    }

    /// Moves every byte each side has for the other until neither has more.
    fn pump(
        client: &mut ClientConnection,
        server: &mut ServerConnection,
    ) -> Result<(), rustls::Error> {
        loop {
            let mut moved = false;
            let mut buf = Vec::new();
            while client.wants_write() {
                client.write_tls(&mut buf).expect("client write");
            }
            let mut slice = &buf[..];
            while !slice.is_empty() {
                moved = true;
                server.read_tls(&mut slice).expect("server read");
                server.process_new_packets()?;
            }
            buf.clear();
            while server.wants_write() {
                server.write_tls(&mut buf).expect("server write");
            }
            let mut slice = &buf[..];
            while !slice.is_empty() {
                moved = true;
                client.read_tls(&mut slice).expect("client read");
                client.process_new_packets()?;
            }
            if !moved {
                return Ok(());
            }
        }
    }

    fn connect(
        client: &Arc<ClientConfig>,
        server: &Arc<ServerConfig>,
        name: &str,
    ) -> Result<TlsInfo, rustls::Error> {
        let name = ServerName::try_from(name.to_owned()).expect("name");
        let mut c = ClientConnection::new(Arc::clone(client), name).expect("client");
        let mut s = ServerConnection::new(Arc::clone(server)).expect("server");
        pump(&mut c, &mut s)?;
        assert!(!s.is_handshaking() && !c.is_handshaking());
        Ok(TlsInfo::from_session(&s, server))
    }

    fn leaf_pem(name: &str) -> String {
        pem("CERTIFICATE", &blocks(name, "CERTIFICATE")[0])
    }

    #[test]
    fn a_required_client_certificate_is_reported_with_its_names() {
        let server = server("required");
        let info = connect(&client(Some("alice"), false), &server, "a.test").expect("handshake");
        assert_eq!((info.version, info.protocol), (0x0304, "TLSv1.3"));
        assert_eq!(
            info.cipher,
            super::SUITES
                .iter()
                .find(|s| s.0 == info.cipher_suite)
                .expect("suite")
                .2
        );
        assert!(info.cipher.starts_with("TLS_AES_") || info.cipher.starts_with("TLS_CHACHA20"));
        assert_eq!(info.server_name.as_deref(), Some("a.test"));
        assert_eq!(info.alpn.as_deref(), Some(&b"http/1.1"[..]));
        assert!(!info.resumed);
        assert_eq!(&*info.server_cert_pem, leaf_pem("ec256.pem"));
        assert_eq!(info.client_verify, ClientVerify::Success);
        assert_eq!(
            info.client_subject.as_deref(),
            Some("CN=alice,O=Example\\, Inc.,C=FR")
        );
        assert_eq!(
            info.client_issuer.as_deref(),
            Some("CN=Client CA,O=Tines Test")
        );
        assert_eq!(info.client_serial.as_deref(), Some("0ABCDEF0"));
        assert_eq!(info.client_chain_pem, [leaf_pem("alice.pem")]);
        // Without a certificate, or with one the CA did not issue, or a revoked one: refused.
        for who in [None, Some("stranger"), Some("mallory")] {
            assert!(
                connect(&client(who, false), &server, "a.test").is_err(),
                "{who:?}"
            );
        }
    }

    #[test]
    fn an_optional_client_certificate_is_accepted_and_judged() {
        let server = server("optional");
        let judged =
            |who, tls12| connect(&client(who, tls12), &server, "ed.test").expect("accepted");
        assert_eq!(judged(None, false).client_verify, ClientVerify::None);
        assert_eq!(judged(None, false).client_subject, None);
        assert_eq!(
            judged(Some("alice"), false).client_verify,
            ClientVerify::Success
        );
        let stranger = judged(Some("stranger"), true);
        assert_eq!(
            stranger.client_verify,
            ClientVerify::Failed("unable to get local issuer certificate".into())
        );
        assert_eq!(stranger.client_subject.as_deref(), Some("CN=stranger"));
        assert_eq!(stranger.protocol, "TLSv1.2");
        assert!(
            stranger.cipher.starts_with("ECDHE-ECDSA-"),
            "{}",
            stranger.cipher
        );
        assert_eq!(
            &*stranger.server_cert_pem,
            leaf_pem("ed25519.pem"),
            "chosen by SNI"
        );
        let revoked = judged(Some("mallory"), false);
        assert_eq!(
            revoked.client_verify,
            ClientVerify::Failed("certificate revoked".into())
        );
    }

    #[test]
    fn a_ticket_from_one_config_resumes_on_another_made_from_the_same_secret() {
        let client = client(None, false);
        let first_worker = server("none");
        let second_worker = server("none");
        assert!(
            !connect(&client, &first_worker, "a.test")
                .expect("full")
                .resumed
        );
        let resumed = connect(&client, &second_worker, "a.test").expect("resumed");
        assert!(resumed.resumed);
        assert_eq!(&*resumed.server_cert_pem, leaf_pem("ec256.pem"));
        // TLS 1.2 tickets too.
        let tls12 = self::client(None, true);
        assert!(
            !connect(&tls12, &first_worker, "a.test")
                .expect("full")
                .resumed
        );
        let resumed = connect(&tls12, &second_worker, "a.test").expect("resumed");
        assert!(resumed.resumed);
        assert_eq!(resumed.protocol, "TLSv1.2");
        // Tickets off: no resumption.
        let mut s = settings("ec256.pem", Some("ec256.key"));
        s.tls_tickets = false;
        let no_tickets = server_config(&load(&s).expect("material")).expect("config");
        assert!(
            !connect(&client, &no_tickets, "a.test")
                .expect("full")
                .resumed
        );
        assert!(
            !connect(&client, &no_tickets, "a.test")
                .expect("full")
                .resumed
        );
    }

    #[test]
    fn an_unknown_name_is_refused_when_asked() {
        let mut s = settings("ec256.pem", Some("ec256.key"));
        s.tls_unknown_server_name = "refuse".into();
        let server = server_config(&load(&s).expect("material")).expect("config");
        let client = client(None, false);
        assert!(connect(&client, &server, "localhost").is_ok());
        // rustls' server answers a resolver's "none" with a fatal access_denied alert (ADR 0032).
        let refused = connect(&client, &server, "other.test").expect_err("refused");
        assert_eq!(
            refused,
            rustls::Error::General("no server certificate chain resolved".into())
        );
    }
}
