//! Client certificates (ADR 0032): `client_cert = required` is rustls' webpki verifier over
//! `client_ca` and `client_crl`; `optional` is mod_ssl's `optional_no_ca`, "accept and
//! report": [`ReportingVerifier`] asks for a certificate, does not require one, accepts a
//! chain webpki refuses, and still checks the handshake signature, so the client proves it
//! holds the certificate's key. The judgement (`SSL_CLIENT_VERIFY`, ASGI's
//! `client_cert_error`) is made once, when the handshake ends ([`super::TlsInfo`]), by the
//! same webpki verifier. `client_auth` reads `client_ca` and `client_crl` for the material.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, Error, RootCertStore,
    SignatureScheme,
};
use std::path::PathBuf;

use rustls_pki_types::{CertificateDer, CertificateRevocationListDer, UnixTime};

use super::info::Judge;
use super::material::{pem_blocks, read, ClientAuth, Problem, Settings};
use super::ClientVerify;

/// The verifier of `client`, and how a finished handshake's certificate is judged.
pub(crate) fn client_verifier(
    client: &ClientAuth,
    provider: &Arc<CryptoProvider>,
) -> Result<(Arc<dyn ClientCertVerifier>, Judge), Problem> {
    // A CRL covers the certificates its issuer signed; an issuer without one is not checked
    // (rather than every certificate it issued refused).
    let webpki = WebPkiClientVerifier::builder_with_provider(
        Arc::clone(&client.roots),
        Arc::clone(provider),
    )
    .with_crls(client.crls.iter().cloned())
    .allow_unknown_revocation_status()
    .build()
    .map_err(|err| Problem::setting("client_ca", format!("not usable: {err}")))?;
    if client.required {
        return Ok((webpki, Judge::Required));
    }
    let reporting = Arc::new(ReportingVerifier { webpki });
    Ok((Arc::clone(&reporting) as _, Judge::Optional(reporting)))
}

/// `client_cert = optional`: accept and report.
#[derive(Debug)]
pub struct ReportingVerifier {
    webpki: Arc<dyn ClientCertVerifier>,
}

impl ReportingVerifier {
    /// How `chain` (leaf first) is judged at `now`: `Success` when webpki accepts it, else
    /// `Failed` with the reason in OpenSSL's words (what mod_ssl reports).
    pub fn judge(&self, chain: &[CertificateDer<'_>], now: UnixTime) -> ClientVerify {
        let Some((leaf, intermediates)) = chain.split_first() else {
            return ClientVerify::None;
        };
        match self.webpki.verify_client_cert(leaf, intermediates, now) {
            Ok(_) => ClientVerify::Success,
            Err(err) => ClientVerify::Failed(reason(&err)),
        }
    }
}

impl ClientCertVerifier for ReportingVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.webpki.root_hint_subjects()
    }

    /// Accepts any chain: [`ReportingVerifier::judge`] reports it after the handshake.
    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// A verification error in OpenSSL's words (`X509_verify_cert_error_string`, which mod_ssl
/// puts after `FAILED:`), or rustls' for the rest.
pub(crate) fn reason(err: &Error) -> String {
    let Error::InvalidCertificate(err) = err else {
        return err.to_string();
    };
    match err {
        CertificateError::UnknownIssuer => "unable to get local issuer certificate".into(),
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
            "certificate has expired".into()
        }
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            "certificate is not yet valid".into()
        }
        CertificateError::Revoked => "certificate revoked".into(),
        CertificateError::BadSignature => "certificate signature failure".into(),
        CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
            "unsupported certificate purpose".into()
        }
        other => format!("{other:?}"),
    }
}

/// `client_ca` and `client_crl`, when `client_cert` asks for certificates.
pub(crate) fn client_auth(
    settings: &Settings,
    provider: &Arc<CryptoProvider>,
    files: &mut Vec<PathBuf>,
) -> Result<Option<ClientAuth>, Problem> {
    let required = match settings.client_cert.as_str() {
        "none" => return Ok(None),
        "optional" => false,
        "required" => true,
        other => {
            return Err(Problem::setting(
                "client_cert",
                format!("'{other}' is not one of none, optional, required"),
            ))
        }
    };
    let Some(ca) = &settings.client_ca else {
        return Err(Problem::setting(
            "client_ca",
            format!(
                "client_cert {} needs client_ca, the PEM bundle of the CAs that issue client \
                 certificates",
                settings.client_cert
            ),
        ));
    };
    let mut store = RootCertStore::empty();
    let blocks = pem_blocks(&read("client_ca", ca, files)?)
        .map_err(|problem| Problem::file("client_ca", ca, problem))?;
    for (i, block) in blocks
        .iter()
        .filter(|b| b.label == "CERTIFICATE")
        .enumerate()
    {
        store
            .add(CertificateDer::from(block.der.to_vec()))
            .map_err(|err| {
                Problem::file("client_ca", ca, format!("certificate {}: {err}", i + 1))
            })?;
    }
    if store.is_empty() {
        return Err(Problem::file(
            "client_ca",
            ca,
            "no PEM CERTIFICATE block in it",
        ));
    }
    let roots = Arc::new(store);
    let mut crls = Vec::new();
    for path in &settings.client_crl {
        let bytes = read("client_crl", path, files)?;
        let problem = |problem: String| Problem::file("client_crl", path, problem);
        let mut ders: Vec<Vec<u8>> = pem_blocks(&bytes)
            .map_err(problem)?
            .iter()
            .filter(|b| b.label == "X509 CRL")
            .map(|b| b.der.to_vec())
            .collect();
        if ders.is_empty() && bytes.first() == Some(&0x30) {
            ders.push(bytes.to_vec());
        }
        if ders.is_empty() {
            return Err(problem(
                "no PEM X509 CRL block in it (nor a DER list)".into(),
            ));
        }
        for der in ders {
            let crl = CertificateRevocationListDer::from(der);
            // Tried alone, so that a list webpki cannot use is named with its file.
            rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::clone(&roots),
                Arc::clone(provider),
            )
            .with_crls([crl.clone()])
            .build()
            .map_err(|err| problem(format!("a revocation list is not usable: {err}")))?;
            crls.push(crl);
        }
    }
    Ok(Some(ClientAuth {
        required,
        roots,
        crls,
    }))
}
