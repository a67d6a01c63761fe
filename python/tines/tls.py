"""TLS in the master: the files the settings name, the material made from them, and what is
said about them (docs/tls.md; the certificates and rotation: ADR 0032).

Owns: the dict of TLS settings ``tines._core.TlsMaterial`` reads (``material_settings``: the
registry's "TLS" section, paths made absolute from the directory ``tines`` starts in), the files
those settings name (``files``) and the check that each can be read (``check_readable``, which
``tines.preflight`` runs as the user the master switches to), making the material once per
generation before any fork (``make_material``: Rust's one-line ValueError, naming the file and the
problem, becomes a ``ConfigError``: exit 2 at start, one log line and the old generation on HUP),
the ticket secret (``new_ticket_secret``: made once per master; ``tines.upgrade`` hands it to the
new master of a USR2), the warning for a certificate that expires within a week
(``expiry_warnings``: its ``notAfter`` read from the DER here) and the line ``check-config``
prints (``describe``).

Why the master: a worker starts from material the master checked (no file is read after fork),
so a rotation that fails (HUP with a key that does not match) never reaches a worker, and every
worker shares the ticket keys the secret derives.

Must not: import ``ssl`` or ``asyncio`` (a WSGI master holds neither: every fork would copy them),
start threads, fork, or log (its callers say what it finds).
"""

from __future__ import annotations

import binascii
import os
import re
import time
from tines.config import SETTINGS, Config
from tines.config.validators import PLAIN_PREFIX
from tines.errors import ConfigError

SECTION = "TLS"
"""The registry's section whose settings ``TlsMaterial`` reads."""

SECRET_SIZE = 32
"""Bytes of the ticket secret (the first key of the ticket-key ratchet, ADR 0033)."""

EXPIRY_WARNING = 7 * 86400
"""A certificate that expires within this many seconds is warned about at start and on HUP."""

FILE_SETTINGS = ("certfile", "keyfile", "keyfile_password_file", "client_ca")
"""The TLS settings that name one file (``sni_certificates`` and ``client_crl`` name several)."""


def new_ticket_secret() -> bytes:
    """A new ticket secret: made once by a master (before its first fork) and kept across its
    reloads, so tickets stay valid across a HUP; a new master of an upgrade takes its old
    master's (``tines.upgrade``), so they stay valid across a USR2 too."""
    return os.urandom(SECRET_SIZE)


def enabled(cfg: Config) -> bool:
    """TLS is on: ``certfile`` is set."""
    return cfg.certfile is not None


def files(cfg: Config, base: str) -> list[tuple[str, str]]:
    """``(setting, absolute path)`` for every file the TLS settings name, in the order they are
    read; none when TLS is off. Relative paths are taken from ``base``."""
    if not enabled(cfg):
        return []
    named = [(name, path) for name in FILE_SETTINGS if isinstance(path := cfg.value(name), str)]
    for item in cfg.sni_certificates:
        named += [("sni_certificates", part) for part in item.split(":")]
    named += [("client_crl", path) for path in cfg.client_crl]
    return [(name, os.path.join(base, path)) for name, path in named]


def material_settings(cfg: Config, base: str) -> dict[str, object]:
    """The dict ``tines._core.TlsMaterial`` reads: every setting of the "TLS" section by name,
    tuples as lists, the paths absolute (taken from ``base``; an ``sni_certificates`` item stays
    ``CERT[:KEY]``)."""
    settings: dict[str, object] = {}
    for setting in SETTINGS.values():
        if setting.section != SECTION:
            continue
        value = cfg.value(setting.name)
        if setting.name in FILE_SETTINGS and isinstance(value, str):
            value = os.path.join(base, value)
        elif setting.name == "sni_certificates":
            value = [":".join(os.path.join(base, part) for part in item.split(":")) for item in cfg.sni_certificates]
        elif setting.name == "client_crl":
            value = [os.path.join(base, path) for path in cfg.client_crl]
        settings[setting.name] = list(value) if isinstance(value, tuple) else value
    return settings


def check_readable(paths: list[tuple[str, str]]) -> None:
    """Open each file for reading, as this process is: ConfigError (one line naming the setting,
    the file and the reason) for the first that cannot be."""
    for name, path in paths:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as error:
            raise ConfigError(f"{name}: cannot read {path}: {error.strerror}") from None
        os.close(fd)


def make_material(cfg: Config, base: str, ticket_secret: bytes) -> object | None:
    """The generation's TLS material (``tines._core.TlsMaterial``: the certificates and keys read
    and checked, the rustls configuration's parts, the ticket keys from ``ticket_secret``), or
    None when TLS is off. ConfigError with Rust's one line (it names the file and the problem)."""
    if not enabled(cfg):
        return None
    import tines._core as _core

    try:
        material: object = _core.TlsMaterial(material_settings(cfg, base), ticket_secret)
        return material
    except ValueError as error:
        raise ConfigError(str(error)) from None


def expiry_warnings(paths: list[tuple[str, str]], now: float) -> list[str]:
    """One line for each certificate (``certfile``, ``sni_certificates``) whose leaf expires
    within ``EXPIRY_WARNING`` of ``now``. A file that is no PEM certificate is passed over: the
    material refused it already, with the reason."""
    found = []
    for name, path in paths:
        if name not in ("certfile", "sni_certificates"):
            continue
        expires = leaf_not_after(path)
        if expires is not None and expires - now < EXPIRY_WARNING:
            days = (expires - now) / 86400
            when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(expires))
            found.append(f"{name}: the certificate in {path} expires on {when} (in {days:.1f} days): "
                         "renew it, then HUP the master")
    return found


_PEM_CERTIFICATE = re.compile(rb"-----BEGIN CERTIFICATE-----(.+?)-----END CERTIFICATE-----", re.S)


def leaf_not_after(path: str) -> float | None:
    """The ``notAfter`` (Unix time) of the first certificate in a PEM file; None when the file
    holds none that this DER walk reads."""
    try:
        with open(path, "rb") as file:
            match = _PEM_CERTIFICATE.search(file.read())
        if match is None:
            return None
        return not_after(binascii.a2b_base64(match.group(1)))
    except (OSError, ValueError, binascii.Error):
        return None


def _element(der: bytes, at: int) -> tuple[int, int, int]:
    """The DER element at ``at``: (tag, start of its content, end of its content)."""
    tag, length = der[at], der[at + 1]
    at += 2
    if length & 0x80:
        count = length & 0x7F
        if count == 0 or count > 4:
            raise ValueError("unsupported DER length")
        length = int.from_bytes(der[at:at + count], "big")
        at += count
    if at + length > len(der):
        raise ValueError("truncated DER")
    return tag, at, at + length


def not_after(der: bytes) -> float:
    """The ``notAfter`` of an X.509 certificate (RFC 5280: Certificate, tbsCertificate, then
    [0] version, serialNumber, signature, issuer, validity), as Unix time; ValueError when
    ``der`` is not one."""
    _, body, _ = _element(der, 0)  # Certificate
    tag, at, end = _element(der, body)  # tbsCertificate
    if tag != 0x30:
        raise ValueError("not a certificate")
    if der[at] == 0xA0:  # [0] EXPLICIT version
        at = _element(der, at)[2]
    for _ in range(3):  # serialNumber, signature, issuer
        at = _element(der, at)[2]
    tag, validity, _ = _element(der, at)
    if tag != 0x30:
        raise ValueError("no validity")
    at = _element(der, validity)[2]  # notBefore
    tag, start, stop = _element(der, at)
    text = der[start:stop].decode("ascii")
    if tag == 0x17:  # UTCTime: YYMMDDHHMMSSZ, 1950..2049
        year = int(text[:2])
        text = str(year + (1900 if year >= 50 else 2000)) + text[2:]
    elif tag != 0x18:  # GeneralizedTime: YYYYMMDDHHMMSSZ
        raise ValueError("no notAfter")
    if not re.fullmatch(r"[0-9]{14}Z", text):
        raise ValueError("unsupported time")
    year, month, day = int(text[:4]), int(text[4:6]), int(text[6:8])
    hour, minute, second = int(text[8:10]), int(text[10:12]), int(text[12:14])
    return float(_days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second)


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm): no
    ``calendar`` or ``datetime`` module in the master for one subtraction."""
    year -= month <= 2
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146097 + day_of_era - 719468


def listener_roles(binds: tuple[str, ...], on: bool) -> tuple[list[str], list[str]]:
    """The binds as written, split into (TLS, plain) for ``describe``: with TLS ``on``, every
    TCP bind not marked ``plain:``; else none."""
    tls = [bind for bind in binds if on and not bind.startswith(("unix:", PLAIN_PREFIX))]
    return tls, [bind for bind in binds if bind not in tls]


def describe(cfg: Config, paths: list[tuple[str, str]]) -> str:
    """``check-config``'s line about TLS: off, or what the listeners will offer."""
    if not enabled(cfg):
        return "off (no certfile)"
    tls, plain = listener_roles(cfg.bind, True)
    expires = leaf_not_after(dict(paths)["certfile"])
    until = "" if expires is None else time.strftime(", expires %Y-%m-%d", time.gmtime(expires))
    parts = [f"on for {', '.join(tls) or 'no bind'}" + (f" (plain: {', '.join(plain)})" if plain else ""),
             f"certificate {cfg.certfile}{until}"
             + (f" and {len(cfg.sni_certificates)} by SNI" if cfg.sni_certificates else ""),
             f"TLS {cfg.tls_min_version}+", f"client certificates {cfg.client_cert}",
             f"tickets {'on' if cfg.tls_tickets else 'off'}"]
    return "; ".join(parts)

