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
(``expiry_warnings``, from what the material read) and the line ``check-config`` prints
(``describe``).

Why the master: a worker starts from material the master checked (no file is read after fork),
so a rotation that fails (HUP with a key that does not match) never reaches a worker, and every
worker shares the ticket keys the secret derives.

Must not: import ``ssl`` or ``asyncio`` (a WSGI master holds neither: every fork would copy them),
start threads, fork, or log (its callers say what it finds).
"""

from __future__ import annotations

import os
import time
from typing import Protocol

from tines.config import SETTINGS, Config
from tines.config.validators import is_cleartext
from tines.errors import ConfigError

SECTION = "TLS"
"""The registry's section whose settings ``TlsMaterial`` reads."""

SECRET_SIZE = 32
"""Bytes of the ticket secret, from which every epoch's ticket key is derived (ADR 0033)."""

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
    """``(setting, absolute path)`` for every file the TLS settings name (``check_readable``'s
    list); none when TLS is off. Relative paths are taken from ``base``."""
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
    ``CERT[:KEY]``), ``alpn`` as offered (``offered_alpn``)."""
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
        elif setting.name == "alpn":
            value = offered_alpn(cfg)
        settings[setting.name] = list(value) if isinstance(value, tuple) else value
    return settings


def offered_alpn(cfg: Config) -> list[str]:
    """The protocols the TLS listeners offer by ALPN: ``alpn`` in its order, without ``h2`` while
    ``http2`` is off. Why here and not in the worker: the material is made once, in the master,
    and ``--no-http2`` must then take effect on every TLS listener, whatever ``alpn`` says
    (docs/http2.md)."""
    return [name for name in cfg.alpn if cfg.http2 or name != "h2"]


def check_readable(paths: list[tuple[str, str]]) -> None:
    """Open each file for reading, as this process is: ConfigError (one line naming the setting,
    the file and the reason) for the first that cannot be."""
    for name, path in paths:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as error:
            raise ConfigError(f"{name}: cannot read {path}: {error.strerror}") from None
        os.close(fd)


class Certificates(Protocol):
    """What the master reads of the material (``tines._core.TlsMaterial``)."""

    @property
    def certificates(self) -> list[tuple[str, list[str], int]]:
        """Each chain served, ``certfile``'s first: (file, its leaf's DNS names, its leaf's
        ``notAfter`` in Unix time)."""
        ...


def make_material(cfg: Config, base: str, ticket_secret: bytes) -> Certificates | None:
    """The generation's TLS material (``tines._core.TlsMaterial``: the certificates and keys read
    and checked, the rustls configuration's parts, the ticket keys from ``ticket_secret``), or
    None when TLS is off. ConfigError with Rust's one line (it names the file and the problem)."""
    if not enabled(cfg):
        return None
    import tines._core as _core

    try:
        return _core.TlsMaterial(material_settings(cfg, base), ticket_secret)
    except ValueError as error:
        raise ConfigError(str(error)) from None


def expiry_warnings(material: Certificates | None, now: float) -> list[str]:
    """One line for each certificate served whose leaf expires within ``EXPIRY_WARNING`` of
    ``now`` (an expired one was refused by the material)."""
    found = []
    for path, _, expires in material.certificates if material is not None else []:
        if expires - now < EXPIRY_WARNING:
            days = (expires - now) / 86400
            when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(expires))
            found.append(f"the certificate in {path} expires on {when} (in {days:.1f} days): "
                         "renew it, then HUP the master")
    return found


def listener_roles(binds: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """The binds as written, split into (TLS, plain) for ``describe``: every TCP bind speaks TLS
    but one marked cleartext (``plain:``, ``h2c:``, ``http1+h2c:``)."""
    tls = [bind for bind in binds if not is_cleartext(bind)]
    return tls, [bind for bind in binds if bind not in tls]


def describe(cfg: Config, material: Certificates | None) -> str:
    """``check-config``'s line about TLS: off, or what the listeners will offer."""
    if material is None:
        return "off (no certfile)"
    tls, plain = listener_roles(cfg.bind)
    served = "; ".join(f"{path} for {', '.join(names) or 'no DNS name'}, expires "
                       + time.strftime("%Y-%m-%d", time.gmtime(expires))
                       for path, names, expires in material.certificates)
    return "; ".join([f"on for {', '.join(tls) or 'no bind'}" + (f" (plain: {', '.join(plain)})" if plain else ""),
                      served, f"TLS {cfg.tls_min_version}+", f"client certificates {cfg.client_cert}",
                      f"tickets {'on' if cfg.tls_tickets else 'off'}"])
