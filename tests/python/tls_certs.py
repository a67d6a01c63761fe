"""Certificates for the TLS tests, made by the test with the ``cryptography`` package: no file
is checked in, nothing expires between runs.

``make_certs(directory)`` writes a small PKI and returns a ``TlsCerts`` naming every file:

- a root CA (ECDSA P-384: what the clients trust) and an intermediate (ECDSA P-256) that
  issues the server leaves, so a server must send the full chain (``Leaf.chain``: leaf, then
  intermediate) for a client that trusts only the root to accept it;
- server leaves: ``localhost`` (ECDSA P-256, also the IP 127.0.0.1: the default), another one
  for the same names with another serial (``localhost_next``: what a rotation installs),
  ``a.test``, ``*.b.test``, RSA-2048, ECDSA P-384 and Ed25519 leaves for ``localhost``, an
  expired one, and a key that belongs to no certificate (``mismatched_key``);
- every key format the server must read (``key_formats``: PKCS#1, SEC1, PKCS#8 for each key
  type), ``localhost``'s key as encrypted PKCS#8 (``encrypted_key``, password in
  ``password_file``) and in the legacy ``Proc-Type: 4,ENCRYPTED`` form the server refuses;
- client certificates from a client CA: ``client_good``, ``client_revoked`` (on the CRL
  ``client_crl``) and ``client_other_ca`` (from a CA the server does not trust).

The fixture ``tls_certs`` (session scope: keys are made once per run) puts them in a temporary
directory. ``Authority.issue`` makes more leaves, for a test that needs its own.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PrivateKey = Union[ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey, ed25519.Ed25519PrivateKey]

PASSWORD = "correct horse battery staple"
"""The password of the encrypted keys."""

ORGANIZATION = "Tines Tests"
NOW = datetime.datetime.now(datetime.timezone.utc)
VALID_FROM = NOW - datetime.timedelta(days=1)
VALID_UNTIL = NOW + datetime.timedelta(days=30)


def new_key(kind: str) -> PrivateKey:
    """A fresh private key: ``p256``, ``p384``, ``rsa`` (2048 bits) or ``ed25519``."""
    if kind == "p256":
        return ec.generate_private_key(ec.SECP256R1())
    if kind == "p384":
        return ec.generate_private_key(ec.SECP384R1())
    if kind == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    if kind == "ed25519":
        return ed25519.Ed25519PrivateKey.generate()
    raise ValueError(f"unknown key kind {kind!r}")


def name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


def key_pem(key: PrivateKey, form: str = "pkcs8", password: str | None = None) -> bytes:
    """``key`` as PEM: ``pkcs8`` (``PRIVATE KEY``, or ``ENCRYPTED PRIVATE KEY`` with a
    password) or ``traditional`` (``RSA PRIVATE KEY`` = PKCS#1, ``EC PRIVATE KEY`` = SEC1;
    with a password, the legacy ``Proc-Type: 4,ENCRYPTED`` form)."""
    encoding = serialization.Encoding.PEM
    private_format = (serialization.PrivateFormat.PKCS8 if form == "pkcs8"
                      else serialization.PrivateFormat.TraditionalOpenSSL)
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password is not None
        else serialization.NoEncryption())
    return key.private_bytes(encoding, private_format, encryption)


def signing_hash(key: PrivateKey) -> hashes.SHA256 | hashes.SHA384 | None:
    """The hash an issuer with ``key`` signs with (Ed25519 takes none)."""
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return None
    if isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.key_size >= 384:
        return hashes.SHA384()
    return hashes.SHA256()


@dataclass
class Authority:
    """A CA that can issue certificates (and a CRL)."""

    key: PrivateKey
    certificate: x509.Certificate
    path: Path
    """Its certificate, PEM."""

    @classmethod
    def root(cls, directory: Path, common_name: str, kind: str = "p256") -> "Authority":
        key = new_key(kind)
        certificate = (builder(name(common_name), name(common_name), key, VALID_FROM, VALID_UNTIL)
                       .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                       .add_extension(ca_key_usage(), critical=True)
                       .sign(key, signing_hash(key)))
        path = directory / f"{slug(common_name)}.pem"
        path.write_bytes(pem(certificate))
        return cls(key, certificate, path)

    def intermediate(self, directory: Path, common_name: str, kind: str = "p256") -> "Authority":
        key = new_key(kind)
        certificate = (builder(name(common_name), self.certificate.subject, key, VALID_FROM, VALID_UNTIL)
                       .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                       .add_extension(ca_key_usage(), critical=True)
                       .add_extension(self.authority_key_id(), critical=False)
                       .sign(self.key, signing_hash(self.key)))
        path = directory / f"{slug(common_name)}.pem"
        path.write_bytes(pem(certificate))
        return Authority(key, certificate, path)

    def authority_key_id(self) -> x509.AuthorityKeyIdentifier:
        return x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key())

    def issue(self, directory: Path, stem: str, names: Sequence[str] = ("localhost", "127.0.0.1"),
              kind: str = "p256", client: bool = False, chain: Sequence["Authority"] = (),
              valid_from: datetime.datetime = VALID_FROM,
              valid_until: datetime.datetime = VALID_UNTIL) -> "Leaf":
        """A leaf for ``names`` (DNS names or IP addresses; the first is its CN) with a new key
        of ``kind``; a server leaf unless ``client``. Writes STEM.crt (the leaf), STEM.pem (the
        leaf then ``chain``'s certificates: what a server or client is given) and STEM.key
        (PKCS#8)."""
        key = new_key(kind)
        usage = x509.KeyUsage(digital_signature=True, key_encipherment=kind == "rsa", content_commitment=False,
                              data_encipherment=False, key_agreement=False, key_cert_sign=False,
                              crl_sign=False, encipher_only=False, decipher_only=False)
        purpose = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        alternative: list[x509.GeneralName] = []
        for entry in names:
            try:
                alternative.append(x509.IPAddress(ipaddress.ip_address(entry)))
            except ValueError:
                alternative.append(x509.DNSName(entry))
        certificate = (builder(name(names[0]), self.certificate.subject, key, valid_from, valid_until)
                       .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                       .add_extension(usage, critical=True)
                       .add_extension(x509.ExtendedKeyUsage([purpose]), critical=False)
                       .add_extension(x509.SubjectAlternativeName(alternative), critical=False)
                       .add_extension(self.authority_key_id(), critical=False)
                       .sign(self.key, signing_hash(self.key)))
        leaf = Leaf(cert=directory / f"{stem}.crt", chain=directory / f"{stem}.pem",
                    key=directory / f"{stem}.key", certificate=certificate, private_key=key)
        leaf.cert.write_bytes(pem(certificate))
        leaf.chain.write_bytes(pem(certificate) + b"".join(pem(ca.certificate) for ca in chain))
        leaf.key.write_bytes(key_pem(key))
        return leaf

    def crl(self, path: Path, revoked: Sequence[x509.Certificate]) -> Path:
        """A CRL of this CA revoking ``revoked``, PEM."""
        crl = (x509.CertificateRevocationListBuilder()
               .issuer_name(self.certificate.subject)
               .last_update(VALID_FROM)
               .next_update(VALID_UNTIL)
               .add_extension(x509.CRLNumber(1), critical=False)
               .add_extension(self.authority_key_id(), critical=False))
        for certificate in revoked:
            crl = crl.add_revoked_certificate(
                x509.RevokedCertificateBuilder().serial_number(certificate.serial_number)
                .revocation_date(VALID_FROM).build())
        path.write_bytes(crl.sign(self.key, signing_hash(self.key)).public_bytes(serialization.Encoding.PEM))
        return path


@dataclass
class Leaf:
    """A certificate with its key, as files."""

    cert: Path
    """The leaf alone, PEM."""
    chain: Path
    """The leaf then its issuers up to (not including) the root, PEM: a server's certfile."""
    key: Path
    """Its key, unencrypted PKCS#8."""
    certificate: x509.Certificate
    private_key: PrivateKey = field(repr=False)

    @property
    def serial(self) -> int:
        return self.certificate.serial_number

    @property
    def der(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.DER)


def builder(subject: x509.Name, issuer: x509.Name, key: PrivateKey, valid_from: datetime.datetime,
            valid_until: datetime.datetime) -> x509.CertificateBuilder:
    public = key.public_key()
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public)
            .serial_number(x509.random_serial_number()).not_valid_before(valid_from)
            .not_valid_after(valid_until)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False))


def ca_key_usage() -> x509.KeyUsage:
    return x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                         key_encipherment=False, data_encipherment=False, key_agreement=False,
                         encipher_only=False, decipher_only=False)


def slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")


@dataclass
class TlsCerts:
    """Every file the TLS tests use (see the module's docstring)."""

    directory: Path
    root: Path
    """The root CA's certificate: what clients verify the server against."""
    root_ca: Authority
    intermediate_ca: Authority
    localhost: Leaf
    localhost_next: Leaf
    a_test: Leaf
    b_test_wildcard: Leaf
    rsa: Leaf
    p384: Leaf
    ed25519: Leaf
    expired: Leaf
    """Expired yesterday (its files are named ``lapsed``, so that a message saying "expired"
    says it, not the path)."""
    mismatched_key: Path
    """A P-256 key of no certificate (PKCS#8)."""
    key_formats: dict[str, tuple[Leaf, Path]]
    """Format name (``p256-sec1``, ``rsa-pkcs1``, ...) -> (the leaf, its key in that format)."""
    encrypted_key: Path
    """``localhost``'s key as encrypted PKCS#8 (PBES2), password ``PASSWORD``."""
    legacy_encrypted_key: Path
    """``localhost``'s key as SEC1 with ``Proc-Type: 4,ENCRYPTED`` (refused by the server)."""
    password: str
    password_file: Path
    """``PASSWORD`` and a newline."""
    client_ca: Path
    client_ca_authority: Authority
    client_crl: Path
    client_good: Leaf
    client_revoked: Leaf
    client_other_ca: Leaf

    def server_leaves(self) -> list[Leaf]:
        return [self.localhost, self.localhost_next, self.a_test, self.b_test_wildcard, self.rsa, self.p384,
                self.ed25519, self.expired]


def make_certs(directory: Path) -> TlsCerts:
    """Write the test PKI into ``directory`` (see the module's docstring)."""
    directory.mkdir(parents=True, exist_ok=True)
    root = Authority.root(directory, "Tines Test Root CA", kind="p384")
    intermediate = root.intermediate(directory, "Tines Test Intermediate CA")

    def server(stem: str, names: Sequence[str] = ("localhost", "127.0.0.1"), kind: str = "p256",
               valid_from: datetime.datetime = VALID_FROM, valid_until: datetime.datetime = VALID_UNTIL) -> Leaf:
        return intermediate.issue(directory, stem, names, kind, chain=[intermediate], valid_from=valid_from,
                                  valid_until=valid_until)

    localhost = server("localhost")
    rsa_leaf = server("rsa", kind="rsa")
    p384 = server("p384", kind="p384")
    ed = server("ed25519", kind="ed25519")
    formats: dict[str, tuple[Leaf, Path]] = {}
    for label, leaf, traditional in (("p256", localhost, "sec1"), ("p384", p384, "sec1"),
                                     ("rsa", rsa_leaf, "pkcs1"), ("ed25519", ed, None)):
        formats[f"{label}-pkcs8"] = (leaf, leaf.key)
        if traditional is not None:  # Ed25519 has no traditional (pre-PKCS#8) form
            path = directory / f"{leaf.key.stem}.{traditional}.key"
            path.write_bytes(key_pem(leaf.private_key, "traditional"))
            formats[f"{label}-{traditional}"] = (leaf, path)
    encrypted = directory / "localhost.encrypted.key"
    encrypted.write_bytes(key_pem(localhost.private_key, "pkcs8", PASSWORD))
    legacy = directory / "localhost.legacy.key"
    legacy.write_bytes(key_pem(localhost.private_key, "traditional", PASSWORD))
    password_file = directory / "password.txt"
    password_file.write_text(PASSWORD + "\n")
    mismatched = directory / "mismatched.key"
    mismatched.write_bytes(key_pem(new_key("p256")))

    client_ca = Authority.root(directory, "Tines Test Client CA")
    other_ca = Authority.root(directory, "Tines Test Other CA")
    client_good = client_ca.issue(directory, "client-good", ["alice"], client=True)
    client_revoked = client_ca.issue(directory, "client-revoked", ["mallory"], client=True)
    client_other = other_ca.issue(directory, "client-other-ca", ["eve"], client=True)
    crl = client_ca.crl(directory / "client.crl", [client_revoked.certificate])
    return TlsCerts(
        directory=directory, root=root.path, root_ca=root, intermediate_ca=intermediate,
        localhost=localhost, localhost_next=server("localhost-next"),
        a_test=server("a-test", ["a.test"]), b_test_wildcard=server("b-test-wildcard", ["*.b.test"]),
        rsa=rsa_leaf, p384=p384, ed25519=ed,
        expired=server("lapsed", valid_from=NOW - datetime.timedelta(days=30),
                       valid_until=NOW - datetime.timedelta(days=1)),
        mismatched_key=mismatched, key_formats=formats, encrypted_key=encrypted, legacy_encrypted_key=legacy,
        password=PASSWORD, password_file=password_file, client_ca=client_ca.path, client_ca_authority=client_ca,
        client_crl=crl, client_good=client_good, client_revoked=client_revoked, client_other_ca=client_other)


@pytest.fixture(scope="session")
def tls_certs(tmp_path_factory: pytest.TempPathFactory) -> TlsCerts:
    """The test PKI (``make_certs``), made once per test run in a temporary directory."""
    return make_certs(tmp_path_factory.mktemp("tls-certs"))
