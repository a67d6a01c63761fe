//! The client side of `https://` and `wss://` (issue 37): one rustls `ClientConfig` per run,
//! built from the flags before the run and shared by every connection of every thread.
//!
//! Owns: which certificates are trusted (the system's CA bundle, `--cacert FILE`, or any with
//! `--insecure`), ALPN (`http/1.1`, or `h2` with `--http2`), and resumption (rustls' in-memory session store, shared
//! by the threads, unless `--no-resumption`). The provider is ring, as the server's (ADR 0031;
//! the same `rustls` of the workspace, so no second copy of the crypto is built). Must not:
//! touch a socket (`engine::connection` drives the session).

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::Resumption;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// Where the system's CA bundle is looked for when `--cacert` is not given (`SSL_CERT_FILE`
/// first, as OpenSSL does; then Debian's, Fedora's and Alpine's paths).
const SYSTEM_BUNDLES: [&str; 3] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// Which certificates a run trusts.
#[derive(Debug, Clone, Copy)]
pub enum Trust<'a> {
    /// The system's CA bundle.
    System,
    /// The CA certificates of this PEM file (`--cacert`), and no others.
    File(&'a Path),
    /// Any certificate (`--insecure`); the handshake's signatures are still checked, so the
    /// server still proves it holds the key of the certificate it sent.
    Any,
}

/// The run's client configuration: `trust`, ALPN `http/1.1` (`h2` alone for an HTTP/2 run:
/// a server that does not choose it fails the run rather than measuring HTTP/1.1 under an
/// HTTP/2 label), and session resumption unless `resumption` is false (then every new
/// connection makes a full handshake). The error is the one-line usage message.
pub fn client_config(
    trust: Trust<'_>,
    resumption: bool,
    http2: bool,
) -> Result<Arc<ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS set-up: {e}"))?;
    let mut config = match trust {
        Trust::Any => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth(),
        Trust::File(path) => builder
            .with_root_certificates(roots_from(path, "--cacert")?)
            .with_no_client_auth(),
        Trust::System => builder
            .with_root_certificates(system_roots()?)
            .with_no_client_auth(),
    };
    config.alpn_protocols = if http2 {
        vec![b"h2".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    config.resumption = if resumption {
        Resumption::default()
    } else {
        Resumption::disabled()
    };
    Ok(Arc::new(config))
}

/// The name the handshake sends (SNI) and checks the certificate against: a DNS name, or an
/// IP address (no SNI is sent for one, RFC 6066 3).
pub fn server_name(host: &str) -> Result<ServerName<'static>, String> {
    ServerName::try_from(host.to_string())
        .map_err(|_| format!("'{host}' is not a valid TLS server name"))
}

fn roots_from(path: &Path, what: &str) -> Result<RootCertStore, String> {
    let certificates = CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("cannot read {what} {}: {e}", path.display()))?;
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(certificates);
    if added == 0 {
        return Err(format!(
            "{what} {}: no usable CA certificate in it (want PEM CERTIFICATE blocks)",
            path.display()
        ));
    }
    Ok(roots)
}

fn system_roots() -> Result<RootCertStore, String> {
    if let Some(path) = std::env::var_os("SSL_CERT_FILE") {
        return roots_from(Path::new(&path), "SSL_CERT_FILE");
    }
    match SYSTEM_BUNDLES.iter().map(Path::new).find(|p| p.is_file()) {
        Some(path) => roots_from(path, "the system CA bundle"),
        None => Err(
            "no system CA bundle found (SSL_CERT_FILE, /etc/ssl/certs/ca-certificates.crt...): \
             give --cacert FILE, or --insecure"
                .into(),
        ),
    }
}

/// `--insecure`: any certificate chain is accepted, but the handshake signatures are checked
/// with the provider's algorithms, so the server must hold the key of the leaf it sent.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The message of a failed handshake, with what to do about an untrusted certificate.
pub fn describe(error: &rustls::Error) -> String {
    use rustls::{CertificateError, Error};
    let hint = match error {
        Error::InvalidCertificate(
            CertificateError::UnknownIssuer | CertificateError::BadSignature,
        ) => " (trust its CA with --cacert FILE, or accept any certificate with --insecure)",
        Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => " (the certificate does not name the URL's host; --insecure accepts it)",
        Error::InvalidMessage(_) => " (is it a TLS port?)",
        _ => "",
    };
    format!("TLS handshake failed: {error}{hint}")
}
