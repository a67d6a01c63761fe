"""Converters of raw setting values: one raw value in, the converted value out, or ValueError.

A raw value is a str from the command line or the environment, or whatever type TOML produced.
The ValueError's message is the rest of the sentence after the setting's name ("must be a
positive integer"): the loader (``tines.config.loading``) adds the name, the offending value and
where it came from. The registry (``tines.config.registry``) gives each setting one of these.

Also here, for the registry and the loader alike: ``temp_dir``, the default directory of
temporary files, found as ``tempfile`` finds it.

Must not: import the rest of ``tines.config`` (the registry is built from these, not the other
way round) or anything heavy (the master holds what is imported here, and every fork copies it).
"""

from __future__ import annotations

import errno
import ipaddress
import math
import os
import pwd
import re
import sys
import urllib.parse
from collections.abc import Callable


TEMP_DIR_ENV = ("TMPDIR", "TEMP", "TMP")
TEMP_DIR_FALLBACKS = ("/tmp", "/var/tmp", "/usr/tmp")


def temp_dir() -> str:
    """The directory for temporary files, as ``tempfile.gettempdir`` finds it: the first of
    ``$TMPDIR``, ``$TEMP``, ``$TMP``, ``/tmp``, ``/var/tmp``, ``/usr/tmp`` and the current
    directory where a file can be made (made, written and removed here too). Without importing
    ``tempfile``: it loads ``shutil`` and ``random``, and with them zlib, bz2, lzma and five
    other extension modules, which the master would hold and every fork copy. Where
    ``tempfile`` is loaded already, its answer (``tempfile.tempdir`` may have been set)."""
    loaded = sys.modules.get("tempfile")
    if loaded is not None:
        return str(loaded.gettempdir())
    candidates = [os.environ[name] for name in TEMP_DIR_ENV if os.environ.get(name)]
    candidates += [*TEMP_DIR_FALLBACKS, os.getcwd()]
    for candidate in candidates:
        directory = os.path.abspath(candidate)
        probe = os.path.join(directory, f".tines-probe-{os.getpid()}-{os.urandom(6).hex()}")
        try:
            fd = os.open(probe, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except OSError:
            continue
        try:
            os.write(fd, b"blat")
        finally:
            os.close(fd)
            os.unlink(probe)
        return directory
    raise FileNotFoundError(errno.ENOENT, f"No usable temporary directory found in {candidates}")


def _integer(raw: object, minimum: int, expected: str) -> int:
    if isinstance(raw, bool):
        raise ValueError(expected)
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, str) and re.fullmatch(r"\s*[0-9]+\s*", raw):
        value = int(raw)
    else:
        raise ValueError(expected)
    if value < minimum:
        raise ValueError(expected)
    return value


def positive_int(raw: object) -> int:
    """An integer >= 1."""
    return _integer(raw, 1, "must be a positive integer")


def non_negative_int(raw: object) -> int:
    """An integer >= 0."""
    return _integer(raw, 0, "must be an integer >= 0")


def optional_positive_int(raw: object) -> int | None:
    """An integer >= 1, or None (``""`` also means None)."""
    if raw is None or raw == "":
        return None
    return _integer(raw, 1, "must be a positive integer")


def _whole_seconds(raw: object, minimum: int) -> int:
    value = _integer(raw, minimum, "must be a positive integer" if minimum else "must be an integer >= 0")
    if value > MAX_SECONDS:
        raise ValueError(TOO_LONG)
    return value


def non_negative_whole_seconds(raw: object) -> int:
    """Whole seconds >= 0 and at most ``MAX_SECONDS`` (``defer_accept``: a C int for the kernel)."""
    return _whole_seconds(raw, 0)


def optional_positive_whole_seconds(raw: object) -> int | None:
    """Whole seconds >= 1 and at most ``MAX_SECONDS`` (RLIMIT_CPU), or None (``""`` too)."""
    if raw is None or raw == "":
        return None
    return _whole_seconds(raw, 1)


def optional_non_negative_int(raw: object) -> int | None:
    """An integer >= 0, or None (``""`` also means None)."""
    if raw is None or raw == "":
        return None
    return _integer(raw, 0, "must be an integer >= 0")


MINIMAL_REQUEST = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"
"""The smallest valid HTTP/1.1 request (HTTP/1.1 requires Host, RFC 9112 section 3.2): a
``max_head_size`` below its length would answer every request 431, a ``max_request_line``
below its first line's length every request 414."""

MINIMAL_REQUEST_LINE = MINIMAL_REQUEST.split(b"\r\n", 1)[0]


def head_size(raw: object) -> int:
    """A size in bytes that can hold the smallest valid HTTP/1.1 request head."""
    return _integer(raw, len(MINIMAL_REQUEST),
                    f"must be at least {len(MINIMAL_REQUEST)} (the smallest valid HTTP/1.1 request)")


def request_line_size(raw: object) -> int:
    """A size in bytes that can hold the smallest request line."""
    return _integer(raw, len(MINIMAL_REQUEST_LINE),
                    f"must be at least {len(MINIMAL_REQUEST_LINE)} (the smallest request line, "
                    f"{MINIMAL_REQUEST_LINE.decode()!r})")


SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20,
              "g": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tib": 1 << 40}
"""Units of ``size`` values, all powers of 1024 (as systemd's ``MemoryMax=`` and nginx read
``512M``); decimal ``MB``/``GB`` are refused rather than guessed."""


MAX_SIZE = (1 << 63) - 1
"""The largest size any setting takes: the workers hold sizes in 64-bit integers (``u64``,
``rlim_t``), and a larger one would pass here and then fail in every worker."""


def size(raw: object) -> int:
    """A size in bytes >= 0: an integer, or a number with a unit (``512MiB``, ``1.5G``, ``64k``)."""
    expected = "must be a size in bytes, or with a unit: B, K/KiB, M/MiB, G/GiB, T/TiB (such as 512MiB)"
    if isinstance(raw, bool):
        raise ValueError(expected)
    if isinstance(raw, int):
        value = float(raw)
        unit = ""
    else:
        match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", raw) if isinstance(raw, str) else None
        if match is None or match.group(2).lower() not in SIZE_UNITS:
            raise ValueError(expected)
        value, unit = float(match.group(1)), match.group(2).lower()
    if value < 0:
        raise ValueError(expected)
    result = int(value * SIZE_UNITS[unit])
    if result > MAX_SIZE:
        raise ValueError("must be a size of at most 8EiB - 1 (9223372036854775807 bytes)")
    return result


def optional_positive_size(raw: object) -> int | None:
    """A size in bytes >= 1 as ``size`` reads it (``1GiB``), or None (``""`` also means None)."""
    if raw is None or raw == "":
        return None
    value = size(raw)
    if value < 1:
        raise ValueError("must be a size above 0 bytes, or with a unit: B, K/KiB, M/MiB, G/GiB, T/TiB (such as 1GiB)")
    return value


def optional_size(raw: object) -> int | None:
    """A size in bytes >= 0 as ``size`` reads it, or None (``""`` also means None)."""
    if raw is None or raw == "":
        return None
    return size(raw)


def sample_rate(raw: object) -> float:
    """Reads per second, above 0 and at most 10 (``memory_sample_rate``)."""
    expected = "must be a number of reads per second above 0 and at most 10"
    try:
        value = _seconds(raw, allow_zero=False)
    except ValueError:
        raise ValueError(expected) from None
    if value > 10:
        raise ValueError(expected)
    return value


MAX_SECONDS = 1_000_000_000
"""The most seconds any setting takes (about 31.7 years; the workers' ``MAX_TIMEOUT_SECONDS``):
longer means never, and the master and the workers turn seconds into deadlines
(``time.monotonic() + s``, ``Instant::now() + d``), milliseconds and ``Duration``s, which
overflow or raise (``OverflowError``) long before ``1e308``. Every
seconds-valued setting is read by ``_seconds`` or ``_whole_seconds``, so the bound is checked
here once."""


TOO_LONG = f"must be a number of seconds from 0 to {MAX_SECONDS}"
"""The words for a value past ``MAX_SECONDS``: the workers' own check (``check_worker_settings``)
says the same."""


def _seconds(raw: object, allow_zero: bool) -> float:
    expected = "must be a number of seconds >= 0" if allow_zero else "must be a number of seconds > 0"
    if isinstance(raw, bool):
        raise ValueError(expected)
    try:
        value = float(raw) if isinstance(raw, (int, float, str)) else math.nan
    except ValueError:
        raise ValueError(expected) from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(expected)
    if value > MAX_SECONDS:
        raise ValueError(TOO_LONG)
    return value


def window_bits(raw: object) -> int:
    value = _integer(raw, 8, "must be an integer from 8 to 15")
    if value > 15:
        raise ValueError("must be an integer from 8 to 15")
    return value


def positive_seconds(raw: object) -> float:
    """A finite number of seconds > 0, as float."""
    return _seconds(raw, allow_zero=False)


def non_negative_seconds(raw: object) -> float:
    """A finite number of seconds >= 0, as float."""
    return _seconds(raw, allow_zero=True)


def optional_non_negative_seconds(raw: object) -> float | None:
    """A finite number of seconds >= 0, as float, or None (``""`` also means None)."""
    if raw is None or raw == "":
        return None
    return _seconds(raw, allow_zero=True)


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def boolean(raw: object) -> bool:
    """A bool, or one of 1/0, true/false, yes/no, on/off (any case)."""
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        word = raw.strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
    raise ValueError("must be one of 1/0, true/false, yes/no, on/off")


def text(raw: object) -> str:
    """Any string."""
    if not isinstance(raw, str):
        raise ValueError("must be a string")
    return raw


def optional_text(raw: object) -> str | None:
    """A non-empty string, or None (``""`` also means None)."""
    if raw is None or raw == "":
        return None
    return text(raw)


def optional_absolute_path(raw: object) -> str | None:
    """A path made absolute from the current directory (the one ``tines`` starts in, where a
    reload reads its settings again), or None: a worker that runs in ``chdir`` reads the same
    file as the master that checked it."""
    value = optional_text(raw)
    return None if value is None else os.path.abspath(value)


def header_value(raw: object) -> str:
    """A string that can be sent as an HTTP header value: printable ASCII, no CR or LF."""
    if not isinstance(raw, str) or not all(" " <= char <= "~" for char in raw):
        raise ValueError("must be printable ASCII (no CR, LF or control characters)")
    return raw


def directory(raw: object) -> str | None:
    """An existing directory, or None (``""`` also means None)."""
    path = optional_text(raw)
    if path is not None and not os.path.isdir(path):
        raise ValueError("must be an existing directory")
    return path


def user_id(raw: object) -> int | None:
    """A user name (resolved to its uid now) or a numeric uid; None (or ``""``) means unset."""
    return _account_id(raw, "user", lambda name: pwd.getpwnam(name).pw_uid)


def group_id(raw: object) -> int | None:
    """A group name (resolved to its gid now) or a numeric gid; None (or ``""``) means unset.
    ``grp`` is an extension module (its own mappings in every fork): loaded only for a name."""
    import grp

    return _account_id(raw, "group", lambda name: grp.getgrnam(name).gr_gid)


def _account_id(raw: object, kind: str, lookup: Callable[[str], int]) -> int | None:
    if raw is None or raw == "":
        return None
    if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
        return raw
    if isinstance(raw, str) and raw.strip().isdigit():
        return int(raw)
    if isinstance(raw, str):
        try:
            return lookup(raw.strip())
        except KeyError:
            raise ValueError(f"must be an existing {kind} name or a numeric id") from None
    raise ValueError(f"must be a {kind} name or a numeric id")


def umask(raw: object) -> int | None:
    """An octal string such as ``"022"`` or an int, in 0..0o777; None (or ``""``) means unset."""
    expected = "must be an octal number in 000..777, such as 022"
    if raw is None or raw == "":
        return None
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    elif isinstance(raw, str) and re.fullmatch(r"\s*(0o)?[0-7]+\s*", raw):
        value = int(raw.strip().removeprefix("0o"), 8)
    else:
        raise ValueError(expected)
    if not 0 <= value <= 0o777:
        raise ValueError(expected)
    return value


PLAIN_PREFIX = "plain:"
"""Marks a TCP bind that speaks plain HTTP while ``certfile`` makes the others speak TLS
(``plain:HOST:PORT``, ``plain:fd://N``); ``tines.sockets`` takes it off before binding."""

H2C_PREFIX = "h2c:"
"""Marks a cleartext bind that speaks HTTP/2 with prior knowledge only (``h2c:HOST:PORT``, also
before ``unix:`` and ``fd://``): every connection must start with the HTTP/2 preface."""

BOTH_PREFIX = "http1+h2c:"
"""Marks a cleartext bind that speaks HTTP/1.1 and h2c alike, told apart by a connection's first
bytes (the HTTP/2 preface, or anything else: an HTTP/1.1 request)."""

CLEARTEXT_PREFIXES = {PLAIN_PREFIX: "off", H2C_PREFIX: "only", BOTH_PREFIX: "both"}
"""Each bind prefix that makes a listener cleartext, and its h2c mode (``WorkerSpec.h2c_listeners``:
``off`` is HTTP/1.1 only). An h2c bind is cleartext even with ``certfile`` set, as ``plain:`` is."""

H2C_MODES = ("off", "only", "both")
"""A listener's h2c modes, as the Rust worker reads them (``PythonSpec.h2c_listeners``)."""

_PREFIX_LIKE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
"""What an unknown prefix looks like (``h2:``, ``https:``), told apart from a host name only by
what follows it: a host is followed by its port, a prefix by an address."""


def split_bind(bind: str) -> tuple[str | None, str]:
    """A bind as ``bind_address`` returned it, split into its h2c mode and its address: the mode
    of its prefix (``CLEARTEXT_PREFIXES``), or None when it has none (a TCP bind then speaks TLS
    when ``certfile`` is set, and HTTP/1.1 in any case)."""
    for prefix, mode in CLEARTEXT_PREFIXES.items():
        if bind.startswith(prefix):
            return mode, bind[len(prefix):]
    return None, bind


def is_cleartext(bind: str) -> bool:
    """A bind that never speaks TLS: one with a prefix, or a Unix socket."""
    mode, address = split_bind(bind)
    return mode is not None or address.startswith("unix:")


def bind_address(raw: object) -> str:
    """One listen address: ``HOST:PORT``, ``[IPv6]:PORT``, ``unix:/path`` or ``fd://N``, optionally
    after one prefix: ``plain:`` (plain HTTP beside TLS binds; TCP and ``fd://`` only, a Unix
    socket being plain already), ``h2c:`` (HTTP/2 with prior knowledge) or ``http1+h2c:`` (both).

    Returned as given (stripped); ``tines.sockets`` turns it into a socket.
    """
    expected = "must be HOST:PORT, [IPv6]:PORT, unix:/path or fd://N"
    if not isinstance(raw, str):
        raise ValueError(expected)
    address = raw.strip()
    mode, rest = split_bind(address)
    if mode is None:
        return _address(address, expected)
    prefix = address[: len(address) - len(rest)]
    if mode == "off" and rest.startswith("unix:"):
        raise ValueError("needs no plain: before unix: (Unix sockets are always plain)")
    if split_bind(rest)[0] is not None:
        raise ValueError(expected)
    return prefix + _address(rest, expected)


def status_address(raw: object) -> str | None:
    """``status_bind``: a listen address as ``bind_address`` reads it, without a prefix (the
    status listener always speaks plain HTTP/1.1), or None (``""`` too)."""
    if raw is None or raw == "":
        return None
    address = bind_address(raw)
    mode, _ = split_bind(address)
    if mode is not None:
        prefix = address.split(":", 1)[0] + ":"
        raise ValueError(f"needs no {prefix} (the status listener always speaks plain HTTP)")
    return address


def _is_address(text: str) -> bool:
    try:
        _address(text, "")
    except ValueError:
        return False
    return True


def _address(address: str, expected: str) -> str:
    if address.startswith("unix:"):
        if not address[len("unix:") :]:
            raise ValueError("unix: needs a path")
        return address
    if address.startswith("fd://"):
        if not address[len("fd://") :].isdigit():
            raise ValueError("fd:// needs a file descriptor number")
        return address
    host, colon, port = address.rpartition(":")
    if not colon or not host:
        raise ValueError(expected)
    word, _, after = address.partition(":")
    if not host.startswith("[") and ":" in host and _PREFIX_LIKE.fullmatch(word) and _is_address(after):
        raise ValueError(f"has an unknown prefix {word + ':'!r}: the prefixes are plain:, h2c: and http1+h2c:")
    if host.startswith("["):
        if not host.endswith("]"):
            raise ValueError(expected)
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise ValueError("needs a valid IPv6 address between brackets") from None
    elif ":" in host:
        raise ValueError("needs brackets around an IPv6 address, as in [::1]:8000")
    if not port.isdigit() or int(port) > 65535:
        raise ValueError("port must be a number in 0..65535")
    return address


def positive_whole_seconds(raw: object) -> int:
    """Whole seconds >= 1 and at most ``MAX_SECONDS`` (``tls_ticket_rotation``)."""
    return _whole_seconds(raw, 1)


TLS_VERSIONS = ("1.2", "1.3")
"""The TLS versions rustls speaks; 1.0 and 1.1 are not offered at all."""


def tls_version(raw: object) -> str:
    """``1.2`` or ``1.3`` (also ``TLSv1.2``, and a TOML float ``1.2``), as ``"1.2"``/``"1.3"``."""
    word = repr(raw) if isinstance(raw, float) else raw
    if isinstance(word, str):
        word = word.strip().lower().removeprefix("tlsv").removeprefix("tls")
        if word in TLS_VERSIONS:
            return word
    raise ValueError("must be 1.2 or 1.3 (TLS 1.0 and 1.1 are not offered)")


TLS_CIPHER_SUITES = (
    "TLS_AES_256_GCM_SHA384", "TLS_AES_128_GCM_SHA256", "TLS_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
)
"""The IANA names of the suites the ring provider offers (all AEAD, all forward secret): TLS 1.3's
three, then TLS 1.2's six. rustls spells TLS 1.3's ``TLS13_AES_...``: read as the same."""

OPENSSL_SUITE_NAMES = {
    "ECDHE-ECDSA-AES256-GCM-SHA384": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "ECDHE-ECDSA-AES128-GCM-SHA256": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "ECDHE-ECDSA-CHACHA20-POLY1305": "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "ECDHE-RSA-AES256-GCM-SHA384": "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "ECDHE-RSA-AES128-GCM-SHA256": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "ECDHE-RSA-CHACHA20-POLY1305": "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
}
"""OpenSSL's names of the TLS 1.2 suites above (gunicorn's and uvicorn's ``ciphers`` spell them
so): named in the refusal, so a migration is one lookup away."""


def cipher_suite(raw: object) -> str:
    """One IANA cipher suite name of ``TLS_CIPHER_SUITES`` (any case; rustls' ``TLS13_`` spelling
    too), returned as IANA spells it. An OpenSSL name (``ECDHE-RSA-AES128-GCM-SHA256``) or
    cipher string is refused: it would be a second language for the same list."""
    if isinstance(raw, str):
        name = raw.strip().upper()
        if name.startswith("TLS13_"):
            name = "TLS_" + name[len("TLS13_"):]
        if name in TLS_CIPHER_SUITES:
            return name
        if name in OPENSSL_SUITE_NAMES:
            raise ValueError(f"must be IANA cipher suite names: {name} is {OPENSSL_SUITE_NAMES[name]}")
        if "-" in name or ":" in name or "!" in name:
            raise ValueError("must be IANA cipher suite names such as TLS_AES_128_GCM_SHA256 or "
                             "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, not an OpenSSL cipher string")
    raise ValueError("must be IANA cipher suite names, one of " + ", ".join(TLS_CIPHER_SUITES))


ALPN_PROTOCOLS = ("h2", "http/1.1", "http/1.0")
"""The protocols a TLS listener may offer in ALPN: what the server speaks (``h2`` only while the
``http2`` setting is on: ``tines.tls`` leaves it out otherwise)."""


def alpn_protocol(raw: object) -> str:
    """``h2``, ``http/1.1`` or ``http/1.0`` (any case)."""
    if isinstance(raw, str):
        name = raw.strip().lower()
        if name in ALPN_PROTOCOLS:
            return name
    raise ValueError("must be " + ", ".join(ALPN_PROTOCOLS))


MAX_WINDOW = 2**31 - 1
"""The largest HTTP/2 flow-control window (RFC 9113 6.9.1)."""

DEFAULT_WINDOW = 65535
"""The connection's window before any WINDOW_UPDATE (RFC 9113 6.9.2): SETTINGS cannot lower it."""

MIN_FRAME_SIZE, MAX_FRAME_SIZE = 2**14, 2**24 - 1
"""The range of SETTINGS_MAX_FRAME_SIZE (RFC 9113 6.5.2)."""

MAX_U32 = 2**32 - 1
"""The largest value of an HTTP/2 setting (a 32-bit field)."""


def _bounded(minimum: int, maximum: int, why: str = "") -> Callable[[object], int]:
    """A converter of an integer in ``minimum..maximum`` (``why``: the reason of the range, said
    in the refusal)."""
    expected = f"must be an integer in {minimum}..{maximum}{why}"

    def convert(raw: object) -> int:
        value = _integer(raw, 0, expected)
        if value > maximum or value < minimum:
            raise ValueError(expected)
        return value

    return convert


h2_count = _bounded(1, MAX_U32)
"""An HTTP/2 count or size that cannot be 0 (streams, a rate per second, the header list's
bytes): 1 to 2^32-1, the width of a SETTINGS value."""

h2_size = _bounded(0, MAX_U32)
"""An HTTP/2 size in bytes that may be 0 (the HPACK table): up to 2^32-1."""

h2_stream_window = _bounded(65535, MAX_WINDOW,
                            " (HTTP/2's own initial window, 65535, is the least: RFC 9113 6.9.1 "
                            "caps a window at 2^31-1)")
"""SETTINGS_INITIAL_WINDOW_SIZE: 65535 to 2^31-1. The RFC allows less, but a client may send
65535 bytes of a stream before our SETTINGS reach it (RFC 9113 6.9.2); with a smaller window
the stream's window goes negative and some clients (h2's own, in a test) then stall."""

h2_connection_window = _bounded(DEFAULT_WINDOW, MAX_WINDOW,
                                " (RFC 9113 6.9: it starts at 65535, which SETTINGS cannot lower, "
                                "and is at most 2^31-1)")
"""The connection's receive window: 65535 (where every connection starts) to 2^31-1."""

h2_frame_size = _bounded(MIN_FRAME_SIZE, MAX_FRAME_SIZE, " (RFC 9113 6.5.2)")
"""SETTINGS_MAX_FRAME_SIZE: 16384 to 16777215."""


def sni_certificate(raw: object) -> str:
    """``CERT.pem`` or ``CERT.pem:KEY.pem`` (one more certificate chosen by SNI; the key in the
    certificate's file when not named), returned as given (stripped)."""
    if isinstance(raw, str):
        item = raw.strip()
        parts = item.split(":")
        if len(parts) <= 2 and all(parts):
            return item
    raise ValueError("must be CERT.pem or CERT.pem:KEY.pem (paths without a colon)")


def network(raw: object) -> str:
    """``*`` or an IP address or network in the form the Rust server parses (an address, or an
    address and a prefix length: no netmask, no IPv6 zone, which ``ipaddress`` would take and
    every worker then refuse), returned as given."""
    if isinstance(raw, str):
        item = raw.strip()
        if item == "*":
            return item
        address, _, prefix = item.partition("/")
        try:
            ipaddress.ip_network(item, strict=False)
            if "%" not in address and (not prefix or prefix.isdigit()):
                return item
        except ValueError:
            pass
    raise ValueError("must be IP addresses or networks (CIDR), or *")


def static_mount(raw: object) -> str:
    """``PREFIX=DIR``: a URL path prefix (``/static``: starts with ``/``, no ``.``, ``..`` or empty
    segment, no ``%``, ``\\`` or whitespace; a trailing ``/`` is dropped, ``/`` alone mounts the
    whole site) and an existing directory, returned as ``PREFIX=DIR`` with DIR made absolute (a
    worker may change directory after it loads the app; the worker opens it at start)."""
    if isinstance(raw, str) and "=" in raw:
        given, _, path = raw.strip().partition("=")
        prefix = given.rstrip("/")
        segments = prefix.split("/")
        # `/` alone mounts the whole site (its prefix is then empty).
        if (given.startswith("/") and (prefix == "" or all(segments[1:]))
                and not any(segment in (".", "..") for segment in segments)
                and not any(char in prefix for char in "%\\?#") and all("!" <= char <= "~" for char in prefix)):
            if not path:
                raise ValueError("must name a directory after = (PREFIX=DIR)")
            if not os.path.isdir(path):
                raise ValueError(f"{path}: must be an existing directory")
            return f"{prefix or '/'}={os.path.abspath(path)}"
        raise ValueError("must start with / and hold no empty, . or .. segment, %, \\, ?, # or space "
                         "(PREFIX=DIR, like /static=./public)")
    raise ValueError("must be PREFIX=DIR (like /static=./public)")


def static_index(raw: object) -> str | None:
    """A file name served for a directory under a static mount (``index.html``), or None: a
    name, not a path (no ``/``, not ``.`` or ``..``)."""
    name = optional_text(raw)
    if name is not None and ("/" in name or "\\" in name or name in (".", "..") or "\0" in name):
        raise ValueError("must be a file name (no / or \\, not . or ..)")
    return name
# ----- Rate limits (docs/rate-limits.md, ADR 0038) -----------------------------------------------

_RATE = re.compile(r"\s*([0-9]+)\s*/\s*(s|m)\s*")
MAX_RATE_COUNT = 1_000_000
"""The most requests a rate may name per second or minute (a bucket's interval stays >= 1 µs)."""


def _rate(raw: object, expected: str) -> str:
    match = _RATE.fullmatch(raw) if isinstance(raw, str) else None
    if match is None or not 1 <= int(match.group(1)) <= MAX_RATE_COUNT:
        raise ValueError(expected)
    return f"{int(match.group(1))}/{match.group(2)}"


def optional_rate(raw: object) -> str | None:
    """``N/s`` or ``N/m`` (requests per second or per minute, N in 1..1000000), returned as
    ``N/s``; None (``""`` also) for off."""
    if raw is None or raw == "":
        return None
    return _rate(raw, f"must be RATE/s or RATE/m (RATE a whole number in 1..{MAX_RATE_COUNT})")


def _reads_one_way(prefix: str) -> bool:
    """Whether a rule's path prefix has the normal form requests' paths are compared in
    (``tines_proto::normal_prefix``): no query or fragment, every ``%`` followed by two hex
    digits, no encoded ``/`` or NUL, no ``.`` or ``..`` segment."""
    if "?" in prefix or "#" in prefix or not re.fullmatch(r"(?:[^%]|%[0-9A-Fa-f]{2})*", prefix):
        return False
    if re.search(r"%(?:2[fF]|00)", prefix):
        return False
    segments = urllib.parse.unquote_to_bytes(prefix).split(b"/")
    return not any(segment in (b".", b"..") for segment in segments)


def rate_rule(raw: object) -> str:
    """``PREFIX=RATE[:BURST]``: a path prefix (starting with ``/``), its rate (``N/s`` or
    ``N/m``) and optionally its burst (a positive integer), returned normalized."""
    expected = "must be PREFIX=RATE/s or PREFIX=RATE/m, optionally :BURST (PREFIX starting with /)"
    if not isinstance(raw, str):
        raise ValueError(expected)
    prefix, equals, rest = raw.strip().partition("=")
    if not equals or not prefix.startswith("/") or any(c.isspace() for c in prefix):
        raise ValueError(expected)
    if not _reads_one_way(prefix):
        raise ValueError("PREFIX must be a plain path: no ?, #, bad or encoded / or NUL escape, . or .. segment")
    rate, colon, burst = rest.partition(":")
    normal = _rate(rate, expected)
    if colon:
        normal += f":{_integer(burst.strip(), 1, expected)}"
    return f"{prefix}={normal}"


rate_limit_ipv6_prefix = _bounded(1, 128, " (the bits of an IPv6 address that name one client)")
"""How many leading bits of an IPv6 client address are its key: 1..128."""

rate_limit_table_size = _bounded(64, 1 << 24, " (entries; 16 bytes each)")
"""Entries of the shared rate-limit table: 64..16777216 (rounded up to a power of two)."""
COMPRESSION_CODINGS = ("gzip", "br", "zstd")
"""The content codings the server can apply to responses (``compression``)."""


def compression_coding(raw: object) -> str:
    """A content coding the server can apply: ``gzip``, ``br`` or ``zstd`` (any case)."""
    if isinstance(raw, str) and raw.strip().lower() in COMPRESSION_CODINGS:
        return raw.strip().lower()
    raise ValueError(f"must be one of {', '.join(COMPRESSION_CODINGS)}")


def media_type_pattern(raw: object) -> str:
    """A media type to compress: ``type/subtype``, ``type/*`` (a whole type) or ``+suffix`` (a
    structured syntax suffix such as ``+json``), lower-cased."""
    expected = "must be a media type (text/html), a type with /* (text/*) or a suffix (+json)"
    if not isinstance(raw, str):
        raise ValueError(expected)
    item = raw.strip().lower()
    token = r"[a-z0-9][a-z0-9!#$&^_.+-]*"
    if re.fullmatch(rf"{token}/(\*|{token})|\+{token}", item) is None:
        raise ValueError(expected)
    return item


def path_prefix(raw: object) -> str:
    """A URL path prefix, starting with ``/``."""
    if not isinstance(raw, str) or not raw.strip().startswith("/"):
        raise ValueError("must be a path prefix starting with /")
    return raw.strip()


def root_path(raw: object) -> str:
    """An ASGI ``root_path`` / WSGI ``SCRIPT_NAME``: ``""`` (none), or a path starting with ``/``
    and not ending with one (``SCRIPT_NAME`` + ``PATH_INFO`` must rebuild the path: a trailing
    ``/`` would double the one ``PATH_INFO`` starts with), in printable ASCII without ``?``,
    ``#``, ``%`` or spaces (it is compared with the percent-decoded path and sent back verbatim
    in the URLs the app builds)."""
    if not isinstance(raw, str):
        raise ValueError("must be a string")
    if raw == "":
        return raw
    if not raw.startswith("/"):
        raise ValueError(f"must start with / (or be empty for none), not {raw!r}")
    if raw.endswith("/"):
        hint = '""' if raw == "/" else repr(raw.rstrip("/"))
        raise ValueError(f"must not end with / (use {hint})")
    if not all("!" <= char <= "~" and char not in "?#%" for char in raw):
        raise ValueError("must be printable ASCII without spaces, ?, # or %")
    return raw


gzip_level = _bounded(1, 9)
"""gzip's compression level: 1 (fastest) to 9."""

brotli_level = _bounded(0, 11)
"""brotli's quality: 0 (fastest) to 11."""

zstd_level = _bounded(1, 19)
"""zstd's level: 1 (fastest) to 19 (its levels 20-22 need large windows: not for responses)."""
