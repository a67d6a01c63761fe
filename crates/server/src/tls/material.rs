//! The server's certificates and keys, read and checked once, in the master (ADR 0032): every
//! file named by the TLS settings is read here, and every problem is one line naming the
//! setting, the file and what is wrong, so that a bad start exits 2 and a bad HUP reload keeps
//! the old generation serving. Workers never read these files: they are forked with the
//! result (`config::server_config`).
//!
//! - Certificates: a PEM chain, leaf first, each certificate issued by the next; the leaf must
//!   be valid now (an expired or not yet valid one is refused; how soon it expires is the
//!   master's to warn about, from [`Identity::not_after`]).
//! - Keys: RSA (2048 to 4096 bits: ring's range), ECDSA P-256/P-384, Ed25519, as PKCS#1,
//!   SEC1, PKCS#8 or encrypted PKCS#8 (PBES2); the legacy OpenSSL `Proc-Type: 4,ENCRYPTED`
//!   form is refused with the command that converts it. The key must match the leaf
//!   (`CertifiedKey::keys_match`; a key whose public half is unknown counts as a mismatch).
//! - Names: each certificate serves the DNS names of its subjectAltName (`config` and
//!   `resolver` choose by SNI); a name served twice is refused there.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64ct::{Base64, Encoding};
use pkcs8::der::asn1::{AnyRef, UintRef};
use pkcs8::der::{Decode, Reader, SliceReader};
use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, SupportedProtocolVersion};
use rustls_pki_types::{
    CertificateDer, CertificateRevocationListDer, PrivateKeyDer, PrivatePkcs1KeyDer,
    PrivatePkcs8KeyDer, PrivateSec1KeyDer, UnixTime,
};
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::SubjectAltName;
use x509_cert::Certificate;
use zeroize::Zeroizing;

use super::info::pem;
use super::{config, verifier};

/// The TLS settings as the registry names and holds them (decision 9 of issue 37's brief);
/// [`Material::load`] checks each one.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// `certfile`: the default certificate chain (PEM, leaf first); may also hold the key.
    pub certfile: PathBuf,
    /// `keyfile`: its key; `None`: the key is in `certfile`.
    pub keyfile: Option<PathBuf>,
    /// `keyfile_password_file`: a file whose first line is the password of encrypted keys.
    pub keyfile_password_file: Option<PathBuf>,
    /// `keyfile_password`: the password itself (from the environment or the config file).
    pub keyfile_password: Option<Zeroizing<String>>,
    /// `sni_certificates`: more chains chosen by server name, each `CERT.pem[:KEY.pem]`.
    pub sni_certificates: Vec<String>,
    /// `tls_unknown_server_name`: `default` (serve `certfile`) or `refuse`.
    pub tls_unknown_server_name: String,
    /// `tls_min_version`: `1.2` or `1.3`.
    pub tls_min_version: String,
    /// `tls_cipher_suites`: IANA names; empty: the provider's list.
    pub tls_cipher_suites: Vec<String>,
    /// `alpn`: the protocols offered by ALPN, in preference order.
    pub alpn: Vec<String>,
    /// `client_cert`: `none`, `optional` or `required`.
    pub client_cert: String,
    /// `client_ca`: the CAs that issue client certificates (PEM bundle).
    pub client_ca: Option<PathBuf>,
    /// `client_crl`: revocation lists of those CAs (PEM or DER).
    pub client_crl: Vec<PathBuf>,
    /// `tls_tickets`: resumption by session tickets.
    pub tls_tickets: bool,
    /// `tls_ticket_rotation`: the ticket key epoch, in seconds.
    pub tls_ticket_rotation: u64,
}

/// Why the material cannot be used: one line, `SETTING [FILE]: problem`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    subject: String,
    problem: String,
}

impl Problem {
    /// A problem with the file `path` named by `setting`.
    pub fn file(setting: &str, path: &Path, problem: impl Into<String>) -> Problem {
        Problem {
            subject: format!("{setting} {}", path.display()),
            problem: problem.into(),
        }
    }

    /// A problem with the value of `setting`.
    pub fn setting(setting: &str, problem: impl Into<String>) -> Problem {
        Problem {
            subject: setting.to_owned(),
            problem: problem.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.subject, self.problem)
    }
}

impl std::error::Error for Problem {}

/// One certificate chain with its key, and what the master logs and checks about it.
#[derive(Debug)]
pub struct Identity {
    /// The file the chain came from.
    pub certfile: PathBuf,
    /// The chain (leaf first) and the signing key, as rustls serves them.
    pub key: Arc<CertifiedKey>,
    /// The leaf as PEM (what the app sees as the server's certificate).
    pub leaf_pem: Arc<str>,
    /// The DNS names of the leaf's subjectAltName, lower-case (`*.example.com` allowed).
    pub names: Vec<String>,
    /// The leaf's notAfter, in seconds since the epoch.
    pub not_after: u64,
}

/// Client certificates are asked for (`client_cert` optional or required).
#[derive(Debug)]
pub struct ClientAuth {
    /// `required`: a client without a valid certificate is refused; else accepted and
    /// reported (mod_ssl's `optional_no_ca`).
    pub required: bool,
    /// The CAs of `client_ca`.
    pub roots: Arc<RootCertStore>,
    /// The lists of `client_crl`.
    pub crls: Vec<CertificateRevocationListDer<'static>>,
}

/// Session tickets are on: the secret every process derives the same ticket keys from.
pub struct Tickets {
    /// The master's 32 random bytes (made before the first fork, carried across USR2).
    pub secret: Zeroizing<[u8; 32]>,
    /// The epoch of a ticket key, in seconds (at least 1).
    pub rotation: u64,
}

impl fmt::Debug for Tickets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tickets")
            .field("rotation", &self.rotation)
            .finish_non_exhaustive()
    }
}

/// Everything a worker's `rustls::ServerConfig` is made of, read and checked.
#[derive(Debug)]
pub struct Material {
    /// The chains served: `certfile`'s first (the default), then `sni_certificates`' in order.
    pub identities: Vec<Identity>,
    /// `tls_unknown_server_name = refuse`: no certificate for an unknown or missing name.
    pub refuse_unknown_names: bool,
    /// The protocol versions offered.
    pub versions: Vec<&'static SupportedProtocolVersion>,
    /// The provider, its suites narrowed to `tls_cipher_suites`.
    pub provider: Arc<CryptoProvider>,
    /// The ALPN protocols offered.
    pub alpn: Vec<Vec<u8>>,
    /// Client certificates, when asked for.
    pub client: Option<ClientAuth>,
    /// Session tickets, when on.
    pub tickets: Option<Tickets>,
    /// Every file read, in order (the master checks that the run user can read them).
    pub files: Vec<PathBuf>,
}

impl Material {
    /// Reads and checks everything the settings name, as of `now` (a leaf must be valid
    /// then); `ticket_secret` is the master's 32 bytes.
    pub fn load(
        settings: &Settings,
        ticket_secret: &[u8],
        now: UnixTime,
    ) -> Result<Material, Problem> {
        let mut files = Vec::new();
        let versions = config::versions(&settings.tls_min_version)?;
        let provider = config::provider_with_suites(&settings.tls_cipher_suites, &versions)?;
        let alpn = config::alpn(&settings.alpn)?;
        let refuse_unknown_names = match settings.tls_unknown_server_name.as_str() {
            "default" => false,
            "refuse" => true,
            other => {
                return Err(Problem::setting(
                    "tls_unknown_server_name",
                    format!("'{other}' is not one of default, refuse"),
                ))
            }
        };
        let tickets = tickets(settings, ticket_secret)?;
        let password = password(settings, &mut files)?;
        let mut identities = Vec::new();
        let certfile = &settings.certfile;
        identities.push(identity(
            ("certfile", certfile),
            settings.keyfile.as_deref().map(|key| ("keyfile", key)),
            password.as_ref().map(|p| p.as_str()),
            &provider,
            now,
            &mut files,
        )?);
        for entry in &settings.sni_certificates {
            let (cert, key) = match entry.split_once(':') {
                Some((cert, key)) => (Path::new(cert), Some(Path::new(key))),
                None => (Path::new(entry.as_str()), None),
            };
            let found = identity(
                ("sni_certificates", cert),
                key.map(|key| ("sni_certificates", key)),
                password.as_ref().map(|p| p.as_str()),
                &provider,
                now,
                &mut files,
            )?;
            if found.names.is_empty() {
                return Err(Problem::file(
                    "sni_certificates",
                    cert,
                    "the certificate has no DNS name in its subjectAltName, so no server name \
                     could choose it",
                ));
            }
            identities.push(found);
        }
        let client = verifier::client_auth(settings, &provider, &mut files)?;
        Ok(Material {
            identities,
            refuse_unknown_names,
            versions,
            provider,
            alpn,
            client,
            tickets,
            files,
        })
    }
}

fn tickets(settings: &Settings, ticket_secret: &[u8]) -> Result<Option<Tickets>, Problem> {
    if !settings.tls_tickets {
        return Ok(None);
    }
    if settings.tls_ticket_rotation == 0 {
        return Err(Problem::setting(
            "tls_ticket_rotation",
            "must be at least 1 second",
        ));
    }
    let secret: [u8; 32] = ticket_secret.try_into().map_err(|_| {
        Problem::setting(
            "ticket_secret",
            format!("32 bytes expected, got {}", ticket_secret.len()),
        )
    })?;
    Ok(Some(Tickets {
        secret: Zeroizing::new(secret),
        rotation: settings.tls_ticket_rotation,
    }))
}

/// The password of encrypted keys: the first line of `keyfile_password_file`, or
/// `keyfile_password`; never both.
fn password(
    settings: &Settings,
    files: &mut Vec<PathBuf>,
) -> Result<Option<Zeroizing<String>>, Problem> {
    match (&settings.keyfile_password_file, &settings.keyfile_password) {
        (Some(_), Some(_)) => Err(Problem::setting(
            "keyfile_password_file",
            "set it or keyfile_password (TINES_KEYFILE_PASSWORD), not both",
        )),
        (Some(path), None) => {
            let text = read("keyfile_password_file", path, files)?;
            let text = std::str::from_utf8(&text).map_err(|_| {
                Problem::file(
                    "keyfile_password_file",
                    path,
                    "the password is not UTF-8 text",
                )
            })?;
            let line = text.lines().next().unwrap_or("");
            if line.is_empty() {
                return Err(Problem::file(
                    "keyfile_password_file",
                    path,
                    "its first line is empty",
                ));
            }
            Ok(Some(Zeroizing::new(line.to_owned())))
        }
        (None, password) => Ok(password.clone()),
    }
}

/// The bytes of `path` (wiped when dropped: it may be a key file), recorded in `files`.
pub(crate) fn read(
    setting: &str,
    path: &Path,
    files: &mut Vec<PathBuf>,
) -> Result<Zeroizing<Vec<u8>>, Problem> {
    files.push(path.to_owned());
    std::fs::read(path)
        .map(Zeroizing::new)
        .map_err(|err| Problem::file(setting, path, format!("cannot read it: {err}")))
}

/// One PEM block: its label and its decoded bytes (wiped when dropped: it may be a key).
pub(crate) struct Block {
    pub(crate) label: String,
    pub(crate) der: Zeroizing<Vec<u8>>,
}

/// The PEM blocks of `text`, in order. A block with RFC 1421 headers (`Proc-Type`) is the
/// legacy OpenSSL encryption, refused with the command that converts it.
pub(crate) fn pem_blocks(text: &[u8]) -> Result<Vec<Block>, String> {
    let text = String::from_utf8_lossy(text);
    let mut blocks = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(label) = line
            .trim()
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
        else {
            continue;
        };
        let end = format!("-----END {label}-----");
        let mut body = Zeroizing::new(String::new());
        let mut closed = false;
        for line in lines.by_ref() {
            let line = line.trim();
            if line == end {
                closed = true;
                break;
            }
            if line.starts_with("Proc-Type:") && line.contains("ENCRYPTED") {
                return Err(format!(
                    "the {label} is encrypted in the legacy OpenSSL form (Proc-Type: 4,ENCRYPTED), \
                     which is not read: convert it with `openssl pkcs8 -topk8 -v2 aes-256-cbc \
                     -in OLD.key -out NEW.key`"
                ));
            }
            body.extend(line.chars().filter(|c| !c.is_ascii_whitespace()));
        }
        if !closed {
            return Err(format!("the {label} block has no END line"));
        }
        let der = Base64::decode_vec(&body)
            .map_err(|_| format!("the {label} block is not valid base64"))?;
        blocks.push(Block {
            label: label.to_owned(),
            der: Zeroizing::new(der),
        });
    }
    Ok(blocks)
}

/// Reads a chain and its key (from `key`, or from the chain's own file) and checks them.
fn identity(
    (cert_setting, cert_path): (&str, &Path),
    key: Option<(&str, &Path)>,
    password: Option<&str>,
    provider: &CryptoProvider,
    now: UnixTime,
    files: &mut Vec<PathBuf>,
) -> Result<Identity, Problem> {
    let cert_problem = |problem: String| Problem::file(cert_setting, cert_path, problem);
    let cert_blocks = pem_blocks(&read(cert_setting, cert_path, files)?).map_err(cert_problem)?;
    let chain: Vec<CertificateDer<'static>> = cert_blocks
        .iter()
        .filter(|block| block.label == "CERTIFICATE")
        .map(|block| CertificateDer::from(block.der.to_vec()))
        .collect();
    if chain.is_empty() {
        return Err(cert_problem("no PEM CERTIFICATE block in it".into()));
    }
    let parsed = chain
        .iter()
        .enumerate()
        .map(|(i, der)| {
            Certificate::from_der(der).map_err(|err| {
                cert_problem(format!("certificate {} is not valid X.509: {err}", i + 1))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    for (i, pair) in parsed.windows(2).enumerate() {
        if pair[0].tbs_certificate.issuer != pair[1].tbs_certificate.subject {
            return Err(cert_problem(format!(
                "certificate {} did not issue certificate {}: the chain must go leaf first, \
                 then each issuer in turn",
                i + 2,
                i + 1
            )));
        }
    }
    let leaf = &parsed[0].tbs_certificate;
    let not_before = leaf.validity.not_before.to_unix_duration().as_secs();
    let not_after = leaf.validity.not_after.to_unix_duration().as_secs();
    if now.as_secs() > not_after {
        return Err(cert_problem(format!(
            "the certificate expired on {}",
            leaf.validity.not_after
        )));
    }
    if now.as_secs() < not_before {
        return Err(cert_problem(format!(
            "the certificate is not valid before {}",
            leaf.validity.not_before
        )));
    }
    let names = dns_names(&parsed[0]).map_err(cert_problem)?;

    let (key_setting, key_path, key_blocks) = match key {
        Some((setting, path)) => {
            let blocks = pem_blocks(&read(setting, path, files)?)
                .map_err(|problem| Problem::file(setting, path, problem))?;
            (setting, path, blocks)
        }
        None => (cert_setting, cert_path, cert_blocks),
    };
    let key_problem = |problem: String| Problem::file(key_setting, key_path, problem);
    let mut keys = key_blocks
        .iter()
        .filter(|block| block.label.ends_with("PRIVATE KEY"));
    let block = match (keys.next(), keys.next()) {
        (Some(block), None) => block,
        (None, _) if key.is_none() => {
            return Err(cert_problem(
                "no private key in it: set keyfile (or give CERT:KEY) to name the key's file"
                    .into(),
            ))
        }
        (None, _) => return Err(key_problem("no PEM PRIVATE KEY block in it".into())),
        (Some(_), Some(_)) => return Err(key_problem("more than one private key in it".into())),
    };
    let key_der = private_key(block, password).map_err(key_problem)?;
    let signing_key = provider
        .key_provider
        .load_private_key(key_der)
        .map_err(|err| key_problem(format!("unsupported key ({err}): RSA of 2048 to 4096 bits, ECDSA P-256 or P-384, or Ed25519 are")))?;
    let certified = CertifiedKey::new(chain, signing_key);
    if certified.keys_match().is_err() {
        return Err(key_problem(format!(
            "the key does not match the first certificate of {} (the chain must start with \
             the certificate of this key)",
            cert_path.display()
        )));
    }
    let leaf_pem = pem("CERTIFICATE", &certified.cert[0]);
    Ok(Identity {
        certfile: cert_path.to_owned(),
        key: Arc::new(certified),
        leaf_pem: leaf_pem.into(),
        names,
        not_after,
    })
}

/// The DNS names of the certificate's subjectAltName, lower-case; a wildcard only as the whole
/// leftmost label.
fn dns_names(cert: &Certificate) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    let extensions = cert.tbs_certificate.extensions.as_deref().unwrap_or(&[]);
    for extension in extensions.iter().filter(|e| e.extn_id == SAN_OID) {
        let san = SubjectAltName::from_der(extension.extn_value.as_bytes())
            .map_err(|err| format!("its subjectAltName does not parse: {err}"))?;
        for name in san.0 {
            if let GeneralName::DnsName(name) = name {
                let name = name.as_str().to_ascii_lowercase();
                let well_placed = match name.strip_prefix("*.") {
                    Some(rest) => !rest.contains('*'),
                    None => !name.contains('*'),
                };
                if !well_placed {
                    return Err(format!(
                        "the name '{name}': a wildcard may only be the whole leftmost label"
                    ));
                }
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
    }
    Ok(names)
}

const SAN_OID: pkcs8::ObjectIdentifier = pkcs8::ObjectIdentifier::new_unwrap("2.5.29.17");
const RSA_OID: pkcs8::ObjectIdentifier =
    pkcs8::ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");

/// The key of a PEM block, decrypted if it is encrypted PKCS#8; RSA keys outside ring's range
/// are refused here with their size.
fn private_key(block: &Block, password: Option<&str>) -> Result<PrivateKeyDer<'static>, String> {
    let key = match block.label.as_str() {
        "PRIVATE KEY" => PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(block.der.to_vec())),
        "RSA PRIVATE KEY" => PrivateKeyDer::Pkcs1(PrivatePkcs1KeyDer::from(block.der.to_vec())),
        "EC PRIVATE KEY" => PrivateKeyDer::Sec1(PrivateSec1KeyDer::from(block.der.to_vec())),
        "ENCRYPTED PRIVATE KEY" => {
            let Some(password) = password else {
                return Err(
                    "the key is encrypted: give its password with keyfile_password_file \
                            or TINES_KEYFILE_PASSWORD"
                        .into(),
                );
            };
            let info = pkcs8::EncryptedPrivateKeyInfo::try_from(block.der.as_slice())
                .map_err(|err| format!("the encrypted key does not parse: {err}"))?;
            let plain = info.decrypt(password).map_err(|err| match err {
                pkcs8::Error::EncryptedPrivateKey(pkcs8::pkcs5::Error::UnsupportedAlgorithm {
                    ..
                })
                | pkcs8::Error::EncryptedPrivateKey(pkcs8::pkcs5::Error::NoPbes1CryptSupport) => {
                    "the key's encryption scheme is not supported (PBES2 with AES-CBC is): \
                     re-encrypt it with `openssl pkcs8 -topk8 -v2 aes-256-cbc`"
                        .to_owned()
                }
                _ => "cannot decrypt the key: wrong password?".to_owned(),
            })?;
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(plain.as_bytes().to_vec()))
        }
        other => return Err(format!("a {other} is not a key type Tines reads")),
    };
    let pkcs1 = match &key {
        PrivateKeyDer::Pkcs1(key) => Some(key.secret_pkcs1_der().to_vec()),
        PrivateKeyDer::Pkcs8(key) => pkcs8::PrivateKeyInfo::try_from(key.secret_pkcs8_der())
            .ok()
            .filter(|info| info.algorithm.oid == RSA_OID)
            .map(|info| info.private_key.to_vec()),
        _ => None,
    };
    if let Some(bits) = pkcs1.map(Zeroizing::new).and_then(|der| rsa_bits(&der)) {
        if !(2048..=4096).contains(&bits) {
            return Err(format!(
                "an RSA key of {bits} bits: 2048 to 4096 are supported"
            ));
        }
    }
    Ok(key)
}

/// The modulus size of a PKCS#1 RSAPrivateKey.
fn rsa_bits(pkcs1: &[u8]) -> Option<usize> {
    let sequence = AnyRef::from_der(pkcs1).ok()?;
    let mut reader = SliceReader::new(sequence.value()).ok()?;
    let _version: UintRef<'_> = reader.decode().ok()?;
    let modulus: UintRef<'_> = reader.decode().ok()?;
    let bytes = modulus.as_bytes();
    let first = *bytes.first()?;
    Some(bytes.len() * 8 - first.leading_zeros() as usize)
}

/// Settings over the test PEMs of crates/server/tests/tls-material (remade by its make.sh).
#[cfg(test)]
pub(crate) mod testing {
    use std::path::PathBuf;

    use super::{Material, Problem, Settings};

    /// The secret of the tests' ticket keys.
    pub(crate) const SECRET: [u8; 32] = [7; 32];

    /// The path of a test PEM.
    pub(crate) fn fixture(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/tls-material")
            .join(name)
    }

    /// The registry's defaults, with `cert` (and `key`) as certfile (and keyfile).
    pub(crate) fn settings(cert: &str, key: Option<&str>) -> Settings {
        Settings {
            certfile: fixture(cert),
            keyfile: key.map(fixture),
            tls_unknown_server_name: "default".into(),
            tls_min_version: "1.2".into(),
            alpn: vec!["http/1.1".into()],
            client_cert: "none".into(),
            tls_tickets: true,
            tls_ticket_rotation: 3600,
            ..Settings::default()
        }
    }

    /// Loads `settings` now.
    pub(crate) fn load(settings: &Settings) -> Result<Material, Problem> {
        Material::load(settings, &SECRET, rustls_pki_types::UnixTime::now())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rustls_pki_types::UnixTime;
    use zeroize::Zeroizing;

    use super::testing::{fixture, load, settings, SECRET};
    use super::*;

    fn error(settings: &Settings) -> String {
        let problem = load(settings).expect_err("refused").to_string();
        assert!(!problem.contains('\n'), "one line: {problem}");
        problem
    }

    fn with_password(mut s: Settings) -> Settings {
        s.keyfile_password = Some(Zeroizing::new("secret".into()));
        s
    }

    #[test]
    fn every_key_format_and_type_loads() {
        for (cert, key) in [
            ("ec256.pem", "ec256.key"),
            ("ec256.pem", "ec256.sec1.key"),
            ("ec384.pem", "ec384.sec1.key"),
            ("ec384.pem", "ec384.key"),
            ("ed25519.pem", "ed25519.key"),
            ("rsa2048.pem", "rsa2048.key"),
            ("rsa2048.pem", "rsa2048.pkcs1.key"),
        ] {
            let material =
                load(&settings(cert, Some(key))).unwrap_or_else(|p| panic!("{cert} {key}: {p}"));
            assert_eq!(material.identities.len(), 1);
            assert_eq!(
                material.identities[0].key.cert.len(),
                2,
                "{cert}: leaf and intermediate"
            );
        }
        let in_one_file = load(&settings("ec256-with-key.pem", None)).expect("key in the certfile");
        assert_eq!(in_one_file.identities[0].names, ["localhost", "a.test"]);
    }

    #[test]
    fn an_encrypted_pkcs8_key_takes_its_password_from_the_file_or_the_setting() {
        let mut s = settings("ec256.pem", Some("ec256.enc.key"));
        assert!(error(&s).contains("the key is encrypted: give its password"));
        s.keyfile_password_file = Some(fixture("password.txt"));
        let material = load(&s).expect("password file");
        assert_eq!(
            material.files,
            [
                fixture("password.txt"),
                fixture("ec256.pem"),
                fixture("ec256.enc.key")
            ]
        );
        load(&with_password(settings(
            "rsa2048.pem",
            Some("rsa2048.enc.key"),
        )))
        .expect("setting");
        let mut wrong = settings("ec256.pem", Some("ec256.enc.key"));
        wrong.keyfile_password = Some(Zeroizing::new("guess".into()));
        let problem = error(&wrong);
        assert!(problem.starts_with(&format!("keyfile {}:", fixture("ec256.enc.key").display())));
        assert!(problem.contains("wrong password"), "{problem}");
        assert!(error(&with_password(s)).contains("not both"));
    }

    #[test]
    fn the_legacy_encrypted_form_is_refused_with_the_command_that_converts_it() {
        let problem = error(&with_password(settings(
            "ec256.pem",
            Some("ec256.legacy.key"),
        )));
        assert!(problem.starts_with(&format!(
            "keyfile {}:",
            fixture("ec256.legacy.key").display()
        )));
        assert!(problem.contains("Proc-Type: 4,ENCRYPTED"), "{problem}");
        assert!(
            problem.contains("openssl pkcs8 -topk8 -v2 aes-256-cbc"),
            "{problem}"
        );
    }

    #[test]
    fn keys_ring_cannot_sign_with_are_refused() {
        assert!(
            error(&settings("rsa1024.pem", Some("rsa1024.key"))).contains("RSA key of 1024 bits")
        );
        let p521 = error(&settings("ec521.pem", Some("ec521.key")));
        assert!(p521.contains("unsupported key"), "{p521}");
    }

    #[test]
    fn a_key_that_does_not_match_the_leaf_is_refused() {
        let problem = error(&settings("ec256.pem", Some("ec384.key")));
        assert!(problem.starts_with(&format!("keyfile {}:", fixture("ec384.key").display())));
        assert!(
            problem.contains("does not match the first certificate"),
            "{problem}"
        );
        // A chain given upside down (its key would match the second certificate).
        let problem = error(&settings("upside-down.pem", Some("ec256.key")));
        assert!(
            problem.contains("certificate 2 did not issue certificate 1"),
            "{problem}"
        );
    }

    #[test]
    fn a_leaf_outside_its_validity_is_refused() {
        let s = settings("ec256.pem", Some("ec256.key"));
        let year = 365 * 24 * 3600;
        let later = UnixTime::since_unix_epoch(Duration::from_secs(230 * year));
        let problem = Material::load(&s, &SECRET, later)
            .expect_err("expired")
            .to_string();
        assert!(
            problem.contains("the certificate expired on 21"),
            "{problem}"
        );
        let earlier = UnixTime::since_unix_epoch(Duration::from_secs(30 * year));
        let problem = Material::load(&s, &SECRET, earlier)
            .expect_err("not yet")
            .to_string();
        assert!(problem.contains("not valid before 20"), "{problem}");
        let material = load(&s).expect("valid now");
        let not_after = material.identities[0].not_after;
        assert!(
            not_after > UnixTime::now().as_secs() + 90 * year,
            "{not_after}"
        );
    }

    #[test]
    fn pem_blocks_are_read_in_order_whatever_their_line_width() {
        let text =
            b"junk\n-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n-----END EC PARAMETERS-----\n\
                     -----BEGIN CERTIFICATE-----\r\nAAEC\r\nAw==\r\n-----END CERTIFICATE-----\r\n";
        let blocks = pem_blocks(text).expect("blocks");
        let labels: Vec<_> = blocks.iter().map(|b| b.label.as_str()).collect();
        assert_eq!(labels, ["EC PARAMETERS", "CERTIFICATE"]);
        assert_eq!(blocks[1].der.as_slice(), [0, 1, 2, 3]);
        let open = pem_blocks(b"-----BEGIN CERTIFICATE-----\nAAEC\n").err();
        assert_eq!(
            open.as_deref(),
            Some("the CERTIFICATE block has no END line")
        );
        let bad =
            pem_blocks(b"-----BEGIN CERTIFICATE-----\n@@@@\n-----END CERTIFICATE-----\n").err();
        assert_eq!(
            bad.as_deref(),
            Some("the CERTIFICATE block is not valid base64")
        );
    }

    #[test]
    fn unreadable_or_empty_files_are_named() {
        let problem = error(&settings("missing.pem", Some("ec256.key")));
        assert!(problem.starts_with(&format!(
            "certfile {}: cannot read it",
            fixture("missing.pem").display()
        )));
        assert!(error(&settings("ec256.key", None)).contains("no PEM CERTIFICATE block"));
        assert!(error(&settings("ec256.pem", None)).contains("no private key in it: set keyfile"));
        assert!(
            error(&settings("ec256.pem", Some("ec256.pem"))).contains("no PEM PRIVATE KEY block")
        );
    }

    #[test]
    fn sni_certificates_take_their_names_from_the_subject_alt_name() {
        let mut s = settings("ec256.pem", Some("ec256.key"));
        s.sni_certificates = vec![format!(
            "{}:{}",
            fixture("ec384.pem").display(),
            fixture("ec384.key").display()
        )];
        let material = load(&s).expect("sni");
        assert_eq!(material.identities[1].names, ["*.b.test"]);
        s.sni_certificates = vec![format!(
            "{}:{}",
            fixture("nonames.pem").display(),
            fixture("ed25519.key").display()
        )];
        assert!(error(&s).contains("no DNS name in its subjectAltName"));
    }

    #[test]
    fn settings_outside_their_choices_are_refused_with_one_line() {
        let base = settings("ec256.pem", Some("ec256.key"));
        let mut s = base.clone();
        s.tls_min_version = "1.1".into();
        assert!(error(&s).starts_with("tls_min_version: '1.1' is not one of 1.2, 1.3"));
        let mut s = base.clone();
        s.tls_cipher_suites = vec!["ECDHE-RSA-AES128-GCM-SHA256".into()];
        let problem = error(&s);
        assert!(
            problem.contains("OpenSSL's name of TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
            "{problem}"
        );
        assert!(
            problem.contains("the valid names: TLS_AES_128_GCM_SHA256,"),
            "{problem}"
        );
        s.tls_cipher_suites = vec!["HIGH:!aNULL".into()];
        assert!(error(&s).contains("an OpenSSL cipher string is not read"));
        s.tls_cipher_suites = vec!["TLS_AES_128_GCM_SHA256".into()];
        assert!(error(&s).contains("no TLS 1.2 suite listed"));
        s.tls_min_version = "1.3".into();
        let material = load(&s).expect("1.3 only");
        assert_eq!(material.provider.cipher_suites.len(), 1);
        let mut s = base.clone();
        s.alpn = vec!["h2".into(), "http/1.1".into()];
        let material = load(&s).expect("h2 is served");
        assert_eq!(material.alpn, [b"h2".to_vec(), b"http/1.1".to_vec()]);
        s.alpn = vec!["spdy/3".into()];
        assert!(error(&s).contains("'spdy/3' is not a protocol Tines serves"));
        let mut s = base.clone();
        s.client_cert = "optional".into();
        assert!(error(&s).starts_with("client_ca: client_cert optional needs client_ca"));
        s.client_ca = Some(fixture("client-ca.pem"));
        s.client_crl = vec![fixture("client-ca.crl.pem")];
        let material = load(&s).expect("client auth");
        assert_eq!(
            material.client.as_ref().map(|c| (c.required, c.crls.len())),
            Some((false, 1))
        );
        s.client_crl = vec![fixture("ec256.pem")];
        assert!(error(&s).contains("no PEM X509 CRL block"));
        let mut s = base;
        s.tls_tickets = true;
        let problem = Material::load(&s, &[1; 16], UnixTime::now())
            .expect_err("short")
            .to_string();
        assert_eq!(problem, "ticket_secret: 32 bytes expected, got 16");
    }
}
