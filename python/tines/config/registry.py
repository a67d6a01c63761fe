"""The settings registry: every setting is declared once, here.

Owns: the declaration of each setting (``SETTINGS``: its name, section, doc, converter, default,
flags, and whether the Rust worker receives it), the order of the sections, the access log's
atoms that a setting's doc lists, and how a value is spelled for people (``format_value``, as
TOML would). Everything else is derived from it: the command-line flags (``tines.serve_cli``),
the environment variables and config-file keys (``tines.config.loading``), the dict handed to
the Rust worker (``Config.worker_settings``) and docs/settings.md (``tines.config.reference``);
nothing else restates a setting.

Must not: import ``tines._core`` or anything heavy, touch sockets or fork, or keep mutable
module state (``SETTINGS`` is a read-only mapping of frozen records).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from tines.config.validators import (alpn_protocol, bind_address, boolean, brotli_level, cipher_suite,
                                     compression_coding, directory, group_id, gzip_level, media_type_pattern,
                                     path_prefix, zstd_level,
                                     h2_connection_window, h2_count, h2_frame_size, h2_size, h2_stream_window,
                                     head_size, header_value, network, non_negative_int, non_negative_seconds,
                                     optional_rate, rate_limit_ipv6_prefix, rate_limit_table_size, rate_rule,
                                     non_negative_whole_seconds, optional_non_negative_int,
                                     optional_non_negative_seconds, optional_positive_int, optional_positive_size,
                                     optional_positive_whole_seconds, optional_size, optional_text, positive_int,
                                     positive_seconds, positive_whole_seconds, request_line_size, sample_rate,
                                     root_path, size, sni_certificate, static_index, static_mount, status_address, temp_dir,
                                     text, tls_version, umask, user_id, window_bits)
from tines.config.validators import optional_absolute_path  # log_config

ACCESS_LOG_ATOMS: tuple[tuple[str, str], ...] = (
    ("h", "client address"),
    ("l", "`-`"),
    ("u", "`-` (no one is authenticated)"),
    ("t", "time, `[24/Nov/2026:10:20:00 +0000]`"),
    ("r", "request line"),
    ("m", "method"),
    ("U", "path"),
    ("q", "query string"),
    ("H", "protocol"),
    ("s", "status"),
    ("b", "body bytes sent (compressed ones after compression), `-` for none"),
    ("B", "body bytes sent"),
    ("f", "Referer"),
    ("a", "User-Agent"),
    ("T", "request time in s"),
    ("M", "in ms"),
    ("D", "in µs"),
    ("L", "in decimal s"),
    ("W", "queue wait in µs (ready to app thread)"),
    ("p", "worker pid"),
    ("{Name}i", "request header"),
    ("{Name}o", "response header"),
    ("{SSL_PROTOCOL}x", "TLS protocol (`TLSv1.3`), `-` on a plain connection"),
    ("{SSL_CIPHER}x", "TLS cipher suite, OpenSSL's name (`TLS_AES_128_GCM_SHA256`), `-` on a plain connection"),
    ("{instream}n", "a compressed body's bytes before compression (`b` and `B` are the bytes sent), `-` when not compressed"),
    ("{outstream}n", "a compressed body's bytes sent, `-` when not compressed"),
    ("{ratio}n", "`outstream` as a whole percentage of `instream`, `-` when not compressed"),
)
"""The access log's custom-format atoms, for the docs and ``--help`` (the formatter is Rust's
``tines_server::access_log``; a test checks both name the same atoms)."""

SECTIONS = ("Server", "TLS", "HTTP/2", "Rate limits", "Static files", "Workers", "HTTP", "Timeouts", "Limits", "Logging", "Process", "Compression", "Resource limits")
"""Order of the sections in ``--help`` and in docs/settings.md."""


@dataclass(frozen=True)
class Setting:
    """One setting: how it is spelled in each source, converted, defaulted and documented.

    ``convert`` takes one raw value (for ``multiple`` settings: one item) and returns the
    converted value or raises ValueError. ``default`` is the value itself, or a zero-argument
    callable for a default computed at load time (then ``default_text`` describes it for the
    docs, so they read the same on every machine). ``worker`` marks the settings the Rust worker
    receives (``Config.worker_settings``). A ``multiple`` setting is a tuple: its flag may be
    repeated, and any string value is split on commas (so its items cannot contain commas);
    ``min_items`` is the fewest items it accepts (``bind`` needs one).
    ``show`` formats a set value for ``check-config`` when TOML's spelling would mislead (umask).
    A ``secret`` (``keyfile_password``) has no flag (a command line is readable by every user of
    the machine in ``/proc``) and is never shown: not by ``check-config``, a ``repr`` or an error.
    """

    name: str
    section: str
    doc: str
    convert: Callable[[object], object]
    default: object
    flags: tuple[str, ...] = ()
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    worker: bool = False
    multiple: bool = False
    min_items: int = 0
    default_text: str | None = None
    show: Callable[[Any], str] | None = None
    secret: bool = False

    @property
    def env(self) -> str:
        """The environment variable: ``TINES_`` + the name in upper case."""
        return "TINES_" + self.name.upper()

    @property
    def toml_key(self) -> str:
        """The top-level key in the config file (the setting's name)."""
        return self.name

    @property
    def is_flag(self) -> bool:
        """True for on/off settings (``--x/--no-x`` on the command line)."""
        return self.convert is boolean

    @property
    def description(self) -> str:
        """The doc, plus a note for flags that may be repeated."""
        return self.doc + (" The flag may be repeated." if self.multiple and self.flags else "")

    def default_value(self) -> object:
        """The default, computing it when it is a callable."""
        return self.default() if callable(self.default) else self.default

    def to_value(self, raw: object) -> object:
        """Convert a raw value from any source; raise ValueError("must be ...") when invalid.

        For ``multiple`` settings a ValueError carries the offending item as its second arg.
        """
        if self.multiple:
            items = _split_items(raw)
            converted = []
            for item in items:
                try:
                    converted.append(self.convert(item))
                except ValueError as error:
                    raise ValueError(str(error), item) from None
            if len(converted) < self.min_items:
                raise ValueError("must not be empty")
            return tuple(converted)
        if self.choices:
            word = raw.strip().lower() if isinstance(raw, str) else raw
            if word not in self.choices:
                raise ValueError("must be one of " + ", ".join(self.choices))
            return word
        return self.convert(raw)


def _split_items(raw: object) -> list[object]:
    """Items of a multiple setting: strings are split on commas, lists/tuples flattened."""
    if isinstance(raw, str):
        return [item.strip() for item in raw.split(",") if item.strip()]
    if isinstance(raw, (list, tuple)):
        items: list[object] = []
        for element in raw:
            items.extend(_split_items(element) if isinstance(element, str) else [element])
        return items
    return [raw]


def _default_workers() -> int:
    return 2 * (os.cpu_count() or 1)


_REGISTRY = (
    # Server
    Setting("app", "Server", "The WSGI or ASGI app: `module:attr`, `package.module:attr`, `path/to/file.py:attr`, or `module` (then `application` or `app`). On the command line it is the positional APP.",
            optional_text, None, metavar="APP"),
    Setting("bind", "Server", "Address to listen on: `HOST:PORT`, `[IPv6]:PORT`, `unix:/path` or `fd://N` (an inherited socket). With `certfile` set every TCP bind speaks TLS, unless written `plain:HOST:PORT` (or `plain:fd://N`); `unix:` binds are always plain (docs/tls.md). A cleartext bind speaks HTTP/2 with prior knowledge (h2c) when written `h2c:ADDRESS` (HTTP/2 only: for a proxy or platform that speaks h2c to its backends), or HTTP/1.1 and h2c alike when written `http1+h2c:ADDRESS`; either is cleartext even with `certfile` set, and works before `unix:` and `fd://` too (docs/http2.md).",
            bind_address, ("127.0.0.1:8000",), ("-b", "--bind"), "ADDRESS", multiple=True, min_items=1),
    Setting("status_bind", "Server", "The status listener, off the public port (off when unset): `HOST:PORT`, `unix:/path` or `fd://N`. A status process that the master forks and starts again if it dies serves `/` (a status page for people), `/status.json` (the workers, their states, requests and memory, each app thread's current request, the totals), `/metrics` (Prometheus), `/healthz` (the master is up) and `/readyz` (a worker accepts and the server is not stopping: 503 from the start of a stop) from the scoreboard, without the app: it answers while every worker is busy or stuck (docs/status.md). `tines status` shows it in the terminal. Refused when it is one of the `bind` addresses.",
            status_address, None, ("--status-bind",), "ADDRESS", default_text="off"),
    Setting("status_show_query", "Server", "The status output shows request targets' query strings (they may carry tokens); redacted to `?...` otherwise.",
            boolean, False, ("--status-show-query",)),
    Setting("status_redact_paths", "Server", "The status output shows no request target at all, only the method (the target reads `-`): for paths that name customers or carry tokens. Wins over `status_show_query`.",
            boolean, False, ("--status-redact-paths",)),
    Setting("status_allow", "Server", "Peers the status listener shows `/`, `/status.json` and `/metrics` (every in-flight request's method and target, the workers' pids and memory): IP addresses or networks (CIDR), comma-separated, or `*` for any; others get 403. `/healthz` and `/readyz` answer any peer (a kubelet probes from the node's address). A peer on a Unix-socket `status_bind` is always allowed. Empty: no TCP peer.",
            network, ("127.0.0.0/8", "::1"), ("--status-allow",), "IPS", multiple=True),
    Setting("status_timeout", "Server", "Seconds a status connection may take from its accept to its response's last byte (reading the request and writing the response); a client still sending or reading then is closed. The status listener holds 64 connections at once, the oldest closed for a new one when all are taken.",
            positive_seconds, 2.0, ("--status-timeout",), "SECONDS"),
    Setting("backlog", "Server", "Length of each listening socket's queue of connections not yet accepted.",
            positive_int, 2048, ("--backlog",), "N"),
    Setting("defer_accept", "Server", "Seconds the kernel holds a new TCP connection until its first bytes arrive (`TCP_DEFER_ACCEPT`; Apache's `AcceptFilter http data`, nginx's `listen ... deferred`): a worker is woken for a connection whose request is already there and reads it as it accepts it, with one wake-up and one poller event fewer per connection (docs/mpm.md). The client's handshake completes at once either way; a client that connects and sends nothing is accepted after about this long, and `header_timeout` runs from then. 0 turns it off. TCP binds only (not `unix:`), set on the listening sockets at start.",
            non_negative_whole_seconds, 1, ("--defer-accept",), "SECONDS"),
    Setting("preload", "Server", "Load the app in the master before forking, so workers share its memory and import errors stop the start.",
            boolean, False, ("--preload",)),
    Setting("memory_merge", "Server", "Workers opt in to kernel same-page merging (KSM) after fork with `prctl(PR_SET_MEMORY_MERGE)` (Linux 6.4+), so identical pages they dirtied (the app's copies of the same objects) can be merged back. Takes effect only while ksmd runs (`/sys/kernel/mm/ksm/run` = 1, a system-wide switch, off on many hosts; logged at start when it is not); the saving is reported per worker. On a kernel without it, a warning at start, and workers run without it. Costs ksmd's CPU time.",
            boolean, False, ("--memory-merge",)),
    Setting("factory", "Server", "APP names a factory: call it with no arguments to get the app.",
            boolean, False, ("--factory",)),
    Setting("interface", "Server", "What the app is: `wsgi` (PEP 3333), `asgi` (ASGI 3: an `async def` callable, or an object whose `__call__` is one: FastAPI, Starlette, Django's ASGI handler), `asgi2` (ASGI 2: called with the scope, its result with receive and send), or `auto`: ASGI 3 for a coroutine app, WSGI otherwise (an ASGI 2 app cannot be told from a WSGI one: name it). An ASGI app runs on the worker's event loop, served by the `event` MPM's reactor (docs/asgi.md, ADR 0014).",
            text, "auto", ("--interface",), choices=("auto", "wsgi", "asgi", "asgi2")),
    Setting("lifespan", "Server", "ASGI lifespan protocol: `on` (the app's startup must succeed before a worker is ready; a failure stops the worker and counts as a boot failure), `off` (never sent), `auto` (as `on`, but an app that raises before answering the startup is taken not to support it, logged at info). Shutdown runs when the worker stops (graceful stop, reload, recycling).",
            text, "auto", ("--lifespan",), choices=("auto", "on", "off")),
    Setting("loop", "Server", "ASGI event loop: `uvloop` (an error when it is not installed), `asyncio`, or `auto` (uvloop when installed).",
            text, "auto", ("--loop",), choices=("auto", "asyncio", "uvloop")),
    Setting("hooks", "Server", "Server hooks: a module (`myproject.tines_hooks`) or a `.py` file defining any of `on_starting`, `when_ready`, `pre_fork`, `post_fork`, `post_worker_init`, `worker_exit`, `child_exit`, `on_exit`, `pre_request`, `post_request` (see docs/hooks.md). Imported and checked by the master at start: an import error, or a public function that is not a hook (a typo such as `post_frok`), stops the start (exit 2).",
            optional_text, None, ("--hooks",), "MODULE", default_text="none"),
    # TLS (docs/tls.md): read and checked by the master (tines.tls), never by a worker
    Setting("certfile", "TLS", "Turns TLS on: the PEM certificate chain, leaf first, then its intermediates (not the root). Every TCP `bind` then speaks TLS (1.2 and 1.3, rustls), unless written `plain:HOST:PORT`; `unix:` binds and the status listener stay plain. The master reads and checks it at start and on every HUP, before any worker uses it (the key must match the leaf, which must not have expired; a warning when it expires within 7 days): at start a problem stops the start (exit 2, one line naming the file), on HUP it is one log line and the serving generation keeps its certificate. HUP is how a certificate is rotated, with no connection lost. With `user` set, the master reads the TLS files again on HUP as that user: it checks at start that the user can read each of them. A relative path is taken from the directory `tines` starts in.",
            optional_text, None, ("--certfile", "--ssl-certfile"), "PATH", default_text="unset: TLS off"),
    Setting("keyfile", "TLS", "The private key of `certfile`'s leaf, PEM: RSA (2048 to 4096 bits), ECDSA P-256 or P-384, or Ed25519, as PKCS#8 (`PRIVATE KEY`), PKCS#1 (`RSA PRIVATE KEY`) or SEC1 (`EC PRIVATE KEY`), or PKCS#8 encrypted with a password (`ENCRYPTED PRIVATE KEY`: `keyfile_password_file` or `keyfile_password`). The legacy OpenSSL encryption (`Proc-Type: 4,ENCRYPTED`) is refused with the `openssl pkcs8 -topk8` line that converts it. ECDSA P-256 is the cheapest handshake (docs/tls.md).",
            optional_text, None, ("--keyfile", "--ssl-keyfile"), "PATH", default_text="unset: the key is in `certfile`"),
    Setting("keyfile_password_file", "TLS", "A file whose first line is the password of an encrypted `keyfile` (and of encrypted `sni_certificates` keys). The password itself may instead be in `TINES_KEYFILE_PASSWORD` or the config file's `keyfile_password`, never on the command line.",
            optional_text, None, ("--keyfile-password-file",), "PATH", default_text="unset"),
    Setting("keyfile_password", "TLS", "The password of an encrypted `keyfile`, from the environment (`TINES_KEYFILE_PASSWORD`) or the config file only: never a command-line flag (every user of the machine can read a command line). Never shown by `check-config`. Not with `keyfile_password_file`.",
            optional_text, None, default_text="unset", secret=True),
    Setting("sni_certificates", "TLS", "More certificates, each chosen when the client's server name (SNI) matches one of its names (the subjectAltName DNS names; `*.example.com` matches one label): `CERT.pem` (key inside) or `CERT.pem:KEY.pem`, comma-separated. A name no certificate has gets `certfile`'s, or is refused (`tls_unknown_server_name`).",
            sni_certificate, (), ("--sni-certificate",), "CERT[:KEY]", multiple=True),
    Setting("tls_unknown_server_name", "TLS", "A client that sends no server name, or one no certificate has: `default` serves `certfile`'s certificate, `refuse` ends the handshake with an alert.",
            text, "default", ("--tls-unknown-server-name",), choices=("default", "refuse")),
    Setting("tls_min_version", "TLS", "The oldest TLS version accepted: `1.2` or `1.3` (1.0 and 1.1 are never offered).",
            tls_version, "1.2", ("--tls-min-version",), "{1.2,1.3}"),
    Setting("tls_cipher_suites", "TLS", "The cipher suites offered, by IANA name (`TLS_AES_128_GCM_SHA256`, `TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256`, ...), comma-separated, in order of preference; empty: all of the provider's (AEAD and forward secret only). OpenSSL cipher strings are refused.",
            cipher_suite, (), ("--tls-cipher-suites",), "SUITES", multiple=True, default_text="the provider's nine AEAD suites"),
    Setting("alpn", "TLS", "The protocols offered in ALPN, in order of preference (the server's: the first of these the client offers too is chosen): `h2` (HTTP/2), `http/1.1`, `http/1.0`; empty: no ALPN (every client is served HTTP/1.1). `h2` is left out of what is offered while `http2` is off, whatever this says (docs/http2.md).",
            alpn_protocol, ("h2", "http/1.1"), ("--alpn",), "PROTOCOLS", multiple=True),
    Setting("client_cert", "TLS", "Client certificates (mTLS): `none` (not asked for), `optional` (asked for; a client without one, or with one `client_ca` does not verify, is served and the app sees why in `SSL_CLIENT_VERIFY` or the ASGI `tls` extension: mod_ssl's `optional_no_ca`), `required` (a client without a certificate `client_ca` verifies is refused in the handshake). Needs `client_ca`.",
            text, "none", ("--client-cert",), choices=("none", "optional", "required")),
    Setting("client_ca", "TLS", "PEM bundle of the certificate authorities client certificates are verified against (`client_cert`).",
            optional_text, None, ("--client-ca", "--ca-certs", "--ssl-ca-certs"), "PATH", default_text="unset"),
    Setting("client_crl", "TLS", "Certificate revocation lists (PEM or DER) checked against client certificates (`client_cert`), comma-separated.",
            text, (), ("--client-crl",), "PATH", multiple=True),
    Setting("tls_tickets", "TLS", "Session resumption by tickets (TLS 1.2 and 1.3), working whichever worker a resumed connection reaches: the ticket keys come from a secret the master makes once, before its first fork, which every worker shares and a binary upgrade (USR2) hands to the new master. 0-RTT (early data) is never accepted.",
            boolean, True, ("--tls-tickets",)),
    Setting("tls_ticket_rotation", "TLS", "Seconds a ticket key is used to issue tickets: a ticket is accepted until the end of the period after the one it was issued in (between one and two periods).",
            positive_whole_seconds, 3600, ("--tls-ticket-rotation",), "SECONDS"),
    # HTTP/2 (docs/http2.md): read by the worker (H2Config in crates/server/src/config.rs)
    Setting("http2", "HTTP/2", "Offer HTTP/2 by ALPN (`h2`, first) on the TLS listeners: a browser or client that speaks it gets HTTP/2, others HTTP/1.1. Off: `h2` is never offered, whatever `alpn` says. Cleartext HTTP/2 (h2c) is chosen per bind instead (`h2c:HOST:PORT`, `http1+h2c:HOST:PORT`; see `bind`), and this setting leaves those alone.",
            boolean, True, ("--http2",), worker=True),
    Setting("h2_max_concurrent_streams", "HTTP/2", "Streams (requests) one HTTP/2 connection may have open at once, advertised in SETTINGS_MAX_CONCURRENT_STREAMS; a client opening more has them refused (RST_STREAM REFUSED_STREAM). The `prefork` MPM advertises 1 whatever this says (a process serves one request at a time: a proxy opens more connections instead of queueing behind one); `thread` and `event` run a connection's streams on app threads side by side, ASGI as tasks.",
            h2_count, 100, ("--h2-max-concurrent-streams", "--http2-max-concurrent-streams"), "N", worker=True),
    Setting("h2_initial_window_size", "HTTP/2", "Bytes of request body a client may send on one stream before the server asks for more (SETTINGS_INITIAL_WINDOW_SIZE, 65535 to 2^31-1): the window reopens as the body is read (before dispatch, or by the app on `stream_body_paths`), so this bounds what one stream's body may hold in flight.",
            h2_stream_window, 262144, ("--h2-initial-window-size", "--http2-initial-window-size"), "BYTES", worker=True, default_text="262144 (256 KiB)"),
    Setting("h2_connection_window_size", "HTTP/2", "Bytes of request bodies a client may send on one connection, all its streams together, before the server asks for more (the connection's flow-control window, raised from HTTP/2's 65535 by a WINDOW_UPDATE after the preface; 65535 to 2^31-1).",
            h2_connection_window, 1048576, ("--h2-connection-window-size",), "BYTES", worker=True, default_text="1048576 (1 MiB)"),
    Setting("h2_max_frame_size", "HTTP/2", "The largest frame payload the server accepts (SETTINGS_MAX_FRAME_SIZE, 16384 to 16777215, RFC 9113 6.5.2); a larger frame ends the connection (FRAME_SIZE_ERROR).",
            h2_frame_size, 16384, ("--h2-max-frame-size", "--http2-max-frame-size"), "BYTES", worker=True),
    Setting("h2_max_header_list_size", "HTTP/2", "The largest header list a request may carry (SETTINGS_MAX_HEADER_LIST_SIZE: names and values plus 32 bytes per field, RFC 9113 6.5.2). A header block (HEADERS and its CONTINUATION frames) is bounded before it is decoded, so a CONTINUATION flood (CVE-2024-27316) ends the connection with GOAWAY ENHANCE_YOUR_CALM without being buffered. The HTTP/1.1 limits (`max_head_size`, `max_headers`, `max_request_line`) apply to every stream too: a larger request gets 431 or 414.",
            h2_count, 65536, ("--h2-max-header-list-size", "--http2-max-header-list-size"), "BYTES", worker=True, default_text="65536 (64 KiB)"),
    Setting("h2_header_table_size", "HTTP/2", "The HPACK dynamic table the server's decoder keeps per connection (SETTINGS_HEADER_TABLE_SIZE; 0: none): memory a client may make each connection hold.",
            h2_size, 4096, ("--h2-header-table-size",), "BYTES", worker=True),
    Setting("h2_max_reset_rate", "HTTP/2", "Streams a client may reset, or cause the server to reset, per second, averaged over 10 seconds; above it the connection ends with GOAWAY ENHANCE_YOUR_CALM (the rapid-reset attack, CVE-2023-44487).",
            h2_count, 100, ("--h2-max-reset-rate",), "N", worker=True),
    Setting("h2_max_control_rate", "HTTP/2", "Frames that carry no request work (PING, SETTINGS, PRIORITY, WINDOW_UPDATE, DATA that is empty or under 64 bytes without END_STREAM) a client may send per second, averaged over 10 seconds; above it the connection ends with GOAWAY ENHANCE_YOUR_CALM (the PING, SETTINGS and empty-frame floods).",
            h2_count, 1000, ("--h2-max-control-rate",), "N", worker=True),
    # Static files (docs/static-and-compression.md, ADR 0036): read by the worker (StaticConfig in crates/server/src/static_mounts.rs)
    Setting("static", "Static files", "Static file mounts, `PREFIX=DIR` (`/static=./public`): a request whose path is PREFIX or under `PREFIX/` is answered from DIR by the worker's Rust code, without entering the app (GET and HEAD; other methods get 405), on every MPM and for WSGI and ASGI apps: sendfile on plain HTTP/1.1, `ETag`, `Last-Modified` and 304, ranges, precompressed `.br`/`.zst`/`.gz` siblings, `Cache-Control`. Nothing outside DIR is ever served (`..` and encoded forms refused, symlinks leaving DIR refused unless `static_follow_symlinks`), only regular files, never a listing. DIR must exist; it is opened when each worker starts. The first matching mount, in order, serves. Comma-separated.",
            static_mount, (), ("--static",), "PREFIX=DIR", worker=True, multiple=True),
    Setting("static_index", "Static files", "A file name served for a directory under a static mount (`index.html`); a directory asked for without its trailing slash is redirected (301) to it, as nginx does. Unset: a directory gets 404 (never a listing).",
            static_index, None, ("--static-index",), "NAME", worker=True, default_text="unset"),
    Setting("static_miss", "Static files", "A request under a static mount that names no servable file: `404` answers it from Rust; `app` hands it to the app instead, as WhiteNoise does (for an app that serves some paths under the prefix itself). A refused path (traversal, a hidden file, not a regular file) is a miss too: with `app`, the app sees it as it would without the mount.",
            text, "404", ("--static-miss",), choices=("404", "app"), worker=True),
    Setting("static_cache_control", "Static files", "The `Cache-Control` of a static file whose name carries no content hash (empty: none sent).",
            header_value, "public, max-age=3600", ("--static-cache-control",), "VALUE", worker=True),
    Setting("static_hashed_cache_control", "Static files", "The `Cache-Control` of a static file whose name carries a content hash: a dot-separated part of the file name of 8 or more hex digits, mixing letters (a-f) and digits, between its first part and its extension (`app.3f2a9c1e.css`: Django's `ManifestStaticFilesStorage`, webpack's `[name].[contenthash].js`), or a directory of such hex digits (`/static/3f2a9c1e/app.css`). Digits only is a date or a counter, not a hash (`/media/20240115/photo.jpg`, `report.20240115.pdf` get `static_cache_control`). Such a name changes with its content, so it may be cached for ever (empty: none sent).",
            header_value, "public, max-age=31536000, immutable", ("--static-hashed-cache-control",), "VALUE", worker=True),
    Setting("static_follow_symlinks", "Static files", "Follow symbolic links under a static mount wherever they lead. Off: links that stay inside the mount's directory by a relative target are followed, and links that leave it, or have an absolute target, are refused (a miss), resolved by the kernel (`openat2` with `RESOLVE_BENEATH`).",
            boolean, False, ("--static-follow-symlinks",), worker=True),
    Setting("static_hidden", "Static files", "Serve hidden files and directories under a static mount (a path segment starting with `.`: `.env`, `.git/`). Off: they get 404.",
            boolean, False, ("--static-hidden",), worker=True),
    # Rate limits (docs/rate-limits.md, ADR 0038)
    Setting("rate_limit", "Rate limits", "Requests one client may make: `N/s` or `N/m`, a token bucket per client address (the real client after `forwarded_allow_ips` and the PROXY protocol; IPv6 grouped by `rate_limit_ipv6_prefix`) kept in one table in shared memory every worker uses, so the limit holds whichever worker accepts and across reloads and upgrades. A request over it is answered `429` by the worker, before the app and before its body is read, with `Retry-After`, `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers-11), and its connection closed. Unset: off, at no cost (nginx's `limit_req`).",
            optional_rate, None, ("--rate-limit",), "RATE", worker=True, default_text="unset: off"),
    Setting("rate_limit_burst", "Rate limits", "Requests a client may make at once above `rate_limit` (the bucket's size): a client idle long enough may send this many back to back.",
            optional_positive_int, None, ("--rate-limit-burst",), "N", worker=True, default_text="the rate's count per second, at least 1"),
    Setting("rate_limit_paths", "Rate limits", "Rules per path prefix, `PREFIX=RATE[:BURST]` (`/login=5/m:3`), comma-separated: a request whose path is under a rule's prefix (the longest wins) counts against that rule's own bucket per client instead of `rate_limit`'s. Paths are compared as the app routes on them: absolute-form stripped, query cut, percent-decoded once, `//` collapsed, on a segment boundary (`/login` matches `/login/x`, not `/loginx`); a path with no single reading (an encoded `/` or NUL, a bad escape, a dot segment) counts under the strictest rule. Works without `rate_limit` (only those paths are then limited).",
            rate_rule, (), ("--rate-limit-paths",), "RULES", worker=True, multiple=True),
    Setting("rate_limit_allow", "Rate limits", "Client networks never rate-limited nor capped by `max_connections_per_client` (IP addresses or CIDR networks, comma-separated): health checkers, your own services.",
            network, (), ("--rate-limit-allow",), "IPS", worker=True, multiple=True),
    Setting("rate_limit_ipv6_prefix", "Rate limits", "Leading bits of an IPv6 client address that name one client: a host is usually given a whole /64, so one client is one /64 by default.",
            rate_limit_ipv6_prefix, 64, ("--rate-limit-ipv6-prefix",), "BITS", worker=True),
    Setting("rate_limit_table_size", "Rate limits", "Entries of the shared table of client buckets (16 bytes each, rounded up to a power of two), fixed at start: when full, a new client takes the place of one whose bucket is full again (it carries no information), else of the one closest to full (evictions are counted on the status page).",
            rate_limit_table_size, 65536, ("--rate-limit-table-size",), "N"),
    Setting("max_connections_per_client", "Rate limits", "Most connections one client address (the TCP peer, or the PROXY protocol's client; never a trusted proxy's own connections, which carry many clients) may hold open at once across every worker; one more is closed at accept. 0: no cap.",
            non_negative_int, 0, ("--max-connections-per-client",), "N", worker=True),
    # Workers
    Setting("workers", "Workers", "Number of worker processes: a fixed count, the default mode (TTIN/TTOU add or remove one). For a pool that grows under load and shrinks when idle, set `max_workers` instead.",
            positive_int, _default_workers, ("-w", "--workers"), "N", default_text="2 x CPU cores"),
    Setting("max_workers", "Workers", "Turns on the dynamic pool (docs/pool.md; Apache's MaxRequestWorkers): the master keeps the idle workers (prefork) or idle app threads (thread, event) between the min and max spare counts, starting 1, 2, 4, ... up to 32 workers a second while short and retiring one worker a second when above, and never runs more than this many workers, draining ones included. Not with `workers`.",
            optional_positive_int, None, ("--max-workers",), "N", default_text="unset: a fixed `workers` count"),
    Setting("start_workers", "Workers", "Dynamic pool: workers started at once (Apache's StartServers). Needs `max_workers`.",
            optional_positive_int, None, ("--start-workers",), "N", default_text="enough for the min spare count"),
    Setting("min_spare_workers", "Workers", "Dynamic pool, `prefork`: fewest idle workers kept; below it the master starts more (Apache's MinSpareServers). Needs `max_workers`.",
            optional_positive_int, None, ("--min-spare-workers",), "N", default_text="CPU cores (at most `max_workers`)"),
    Setting("max_spare_workers", "Workers", "Dynamic pool, `prefork`: most idle workers kept; above it the master retires one a second, the one holding the fewest connections (Apache's MaxSpareServers). At least `min_spare_workers` + 1. Needs `max_workers`.",
            optional_positive_int, None, ("--max-spare-workers",), "N", default_text="`min_spare_workers` + CPU cores"),
    Setting("min_spare_threads", "Workers", "Dynamic pool, `thread` and `event`: fewest idle app threads kept, over all workers (Apache's MinSpareThreads). Needs `max_workers`.",
            optional_positive_int, None, ("--min-spare-threads",), "N", default_text="CPU cores x `threads` (at most `max_workers` x `threads`)"),
    Setting("max_spare_threads", "Workers", "Dynamic pool, `thread` and `event`: most idle app threads kept; above it the master retires one worker a second (Apache's MaxSpareThreads). At least `min_spare_threads` + `threads`. Needs `max_workers`.",
            optional_positive_int, None, ("--max-spare-threads",), "N", default_text="`min_spare_threads` + CPU cores x `threads`"),
    Setting("standby_workers", "Workers", "Fixed pool: processes forked ahead that have booted (app loaded, hooks run) but do not accept until a worker starts draining (`max_requests`, the soft CPU limit): the master then promotes one, which serves at once, and forks the next standby, so a recycle never waits for a fork. `workers` still counts the processes that serve at once; standbys are on top (docs/mpm.md, Process per request; ADR 0021). The dynamic pool keeps idle workers of its own (`min_spare_workers`): not with `max_workers`.",
            optional_non_negative_int, None, ("--standby-workers",), "N", default_text="1 with `max_requests` 1, else 0"),
    Setting("reload_batch", "Workers", "HUP (reload): new workers started at a time. Each old worker is retired as a new one is ready, so capacity never dips, and live plus draining workers stay within the larger of the old and new worker counts (`workers`, or the pool's count, at most `max_workers`) + this many (docs/signals.md, Reload).",
            optional_positive_int, None, ("--reload-batch",), "N", default_text="a quarter of the workers, at least 1"),
    Setting("mpm", "Workers", "How a worker runs a WSGI app's requests (an ASGI app always runs on the `event` MPM's reactor, whatever this says: leave it unset): `prefork` (one at a time, on the worker's only thread) or `event` (one loop thread owns every socket, reads request bodies and finishes slow writes; a pool of `threads` app threads only runs the app, and `max_queued_requests` refuses overload with 503). `thread` is another name for `event`, the same machine (ADR 0010), except that it always has at least one app thread. See docs/mpm.md.",
            text, "prefork", ("--mpm",), choices=("prefork", "thread", "event"), worker=True),
    Setting("threads", "Workers", "App threads per worker with the `thread` and `event` MPMs (one machine); `prefork` ignores it (and warns at start when it is above 1). With `event`, 0 runs the app on the loop thread itself (no hand-off; for apps that return quickly); `thread` needs at least 1.",
            non_negative_int, 1, ("--threads",), "N", worker=True),
    Setting("max_connections", "Workers", "Most client connections one worker holds open (idle keep-alive ones included); above it the worker stops accepting until one closes, and the other workers take the new ones.",
            positive_int, 10000, ("--max-connections", "--worker-connections"), "N", worker=True),
    Setting("max_queued_requests", "Workers", "`thread` and `event` MPMs (one machine): complete requests waiting for an app thread beyond which a new request is answered 503 with `Retry-After` at once (idle connections never count); 0 means no limit. `prefork` ignores it.",
            non_negative_int, 1024, ("--max-queued-requests",), "N", worker=True),
    Setting("max_concurrency", "Workers", "ASGI: requests one worker's event loop serves at once; beyond it a new request is answered 503 with `Retry-After` at once (idle connections and accepted WebSockets never count; `max_connections` bounds those). 0 means no limit.",
            non_negative_int, 1024, ("--max-concurrency",), "N", worker=True),
    Setting("ws_max_connections", "Workers", "ASGI: WebSockets one worker holds at once (from the handshake until the app returns); beyond it a new handshake is answered 503 with `Retry-After` before the app sees it. Below `max_connections` (a ceiling at or above it is refused at start), so the rest stays room for HTTP requests and refused handshakes: a worker full of WebSockets still answers. The kernel spreads new connections over the workers, so a client refused by one may be taken by another next time (docs/asgi.md). 0 refuses every WebSocket.",
            optional_non_negative_int, None, ("--ws-max-connections",), "N", worker=True,
            default_text="9 in 10 of `max_connections` (rounded down)"),
    Setting("ws_max_message_size", "Limits", "ASGI WebSocket: the largest message a client may send, in bytes (or with a unit: `16MiB`), counted after permessage-deflate inflation; a larger one closes the connection with 1009 (a deflate bomb is stopped at this size, not after).",
            size, 16 * 1024 * 1024, ("--ws-max-message-size", "--ws-max-size", "--websocket-max-message-size"), "SIZE", worker=True),
    Setting("ws_per_message_deflate", "Limits", "ASGI WebSocket: accept permessage-deflate (RFC 7692) when a client offers it. Compression state is kept between messages only when both sides agree to context takeover; otherwise it is made per message.",
            boolean, True, ("--ws-per-message-deflate",), worker=True),
    Setting("ws_server_max_window_bits", "Limits", "ASGI WebSocket: the largest LZ77 window (8 to 15 bits) the server compresses with; less is less memory per connection with context takeover.",
            window_bits, 15, ("--ws-server-max-window-bits",), "BITS", worker=True),
    Setting("ws_receive_buffer_total", "Limits", "ASGI WebSocket: memory one worker holds at most for what its WebSocket clients sent and the apps have not received yet, together: the messages being gathered or inflated and the ones waiting for the app's `receive`. Beyond it the worker stops reading every WebSocket that has more to send (backpressure) until an app receives; one that waits `ws_receive_buffer_timeout` is closed with 1013 (Try Again Later). One read may overshoot it by a message being inflated (`ws_max_message_size`). Messages the app has received are the app's memory, not counted. At least `ws_max_message_size`; bytes, or with a unit (`64MiB`).",
            size, 64 * 1024 * 1024, ("--ws-receive-buffer-total",), "SIZE", worker=True,
            default_text="67108864 (64 MiB)"),
    Setting("ws_ping_interval", "Timeouts", "ASGI WebSocket: seconds a connection may be silent before the server pings it; 0 never pings.",
            non_negative_seconds, 20.0, ("--ws-ping-interval",), "SECONDS", worker=True),
    Setting("ws_ping_timeout", "Timeouts", "ASGI WebSocket: seconds a ping may go unanswered before the connection is closed (1011).",
            positive_seconds, 20.0, ("--ws-ping-timeout",), "SECONDS", worker=True),
    Setting("ws_receive_buffer_timeout", "Timeouts", "ASGI WebSocket: seconds a WebSocket may wait for room in `ws_receive_buffer_total` (its reading paused) before it is closed with 1013 (Try Again Later); what it sent and the app had not received is dropped.",
            positive_seconds, 30.0, ("--ws-receive-buffer-timeout",), "SECONDS", worker=True),
    Setting("ws_idle_timeout", "Timeouts", "ASGI WebSocket: seconds a WebSocket may go without a data message in either direction (a message received counts once it has arrived whole; pings and pongs do not count, so a client that only answers pings is idle) before the server closes it (1001, `idle timeout`); 0 never closes an idle one.",
            non_negative_seconds, 0.0, ("--ws-idle-timeout",), "SECONDS", worker=True),
    Setting("max_requests", "Workers", "Recycle a worker gracefully after it has served this many requests; 0 never recycles.",
            non_negative_int, 0, ("--max-requests", "--limit-max-requests"), "N", worker=True),
    Setting("max_requests_jitter", "Workers", "Add a random 0..N to each worker's `max_requests`, so workers do not all recycle at once.",
            non_negative_int, 0, ("--max-requests-jitter", "--limit-max-requests-jitter"), "N", worker=True),
    Setting("max_worker_memory", "Workers", "Recycle a worker gracefully (it finishes its requests, exits and is replaced at once) when its memory, as `max_worker_memory_kind` counts it, is above this size: bytes, or with a unit (`512MiB`, `2G`; K, M, G, T are powers of 1024). The master reads each worker's `/proc/PID/smaps_rollup` in turn (`memory_sample_rate`), so a worker can grow past the limit until its next read: a sample is at most workers / rate seconds old (docs/tuning.md). Under `user` or `group` the master can read only the workers' RSS (from `/proc/PID/status`; their smaps_rollup is root's after the switch), so a limit there needs `max_worker_memory_kind` `rss` and one on `uss` or `pss` stops the start. 0 is off.",
            size, 0, ("--max-worker-memory",), "SIZE", default_text="`0` (off)"),
    Setting("max_worker_memory_kind", "Workers", "Which figure `max_worker_memory` limits: `uss` (memory only this worker maps, what its exit frees), `pss` (its proportional share of pages shared with the master and the other workers) or `rss` (resident, shared pages counted in full, as uWSGI's `reload-on-rss`; the only one the master can read under `user`).",
            text, "uss", ("--max-worker-memory-kind",), choices=("uss", "pss", "rss")),
    Setting("memory_sample_rate", "Workers", "Reads of a worker's `/proc/PID/smaps_rollup` per second, in total: the master reads one worker at a time, in turn, so each is read every workers / rate seconds. Each read walks the worker's page tables under its memory-map lock (O(RSS): about a millisecond per GiB resident, and more while the worker is busy: the master's reads cost about 0.5% of a CPU at 4 a second next to a busy worker), so it is capped at 10. The figures go to the log at ready (not a recycle's replacement's), the status page and `max_worker_memory`; without a limit they are only shown, hence the lower default. Under `user` the master reads RSS and swap from `/proc/PID/status` instead (no page-table walk), at the same rate.",
            sample_rate, None, ("--memory-sample-rate",), "PER_SECOND",
            default_text="`4` with `max_worker_memory` set, else `0.5`"),
    Setting("boot_failure_limit", "Workers", "Crash-loop guard: the master gives up after this many consecutive workers die before they are ready.",
            positive_int, 5, ("--boot-failure-limit",), "N"),
    # HTTP
    Setting("max_keepalive_requests", "HTTP", "Requests served on one keep-alive connection before it is closed; 0 means no limit.",
            non_negative_int, 1000, ("--max-keepalive-requests",), "N", worker=True),
    Setting("forwarded_allow_ips", "HTTP", "Peers trusted to set `X-Forwarded-*`/`Forwarded` (client address and scheme): IP addresses or networks, comma-separated, or `*` for any.",
            network, ("127.0.0.1", "::1"), ("--forwarded-allow-ips",), "IPS", worker=True, multiple=True),
    Setting("proxy_protocol", "HTTP", "Every connection, on every bind, must begin with a PROXY protocol header (HAProxy's, version 1 or 2, told apart by its first bytes) before its first request: the header's client address and port become `REMOTE_ADDR`/`REMOTE_PORT` and the access log's client, once per connection. Only peers in `forwarded_allow_ips` may send it (a Unix-socket peer always may); a connection from any other peer, or one that does not begin with a valid header, is closed without a response and logged at info. A `LOCAL` header (a proxy's health check) or `UNKNOWN` keeps the real peer. The header shares the first request's `header_timeout`. See docs/proxy-protocol.md.",
            boolean, False, ("--proxy-protocol",), worker=True),
    Setting("root_path", "HTTP", "The URL path the app is mounted under behind a proxy (`/api`; uvicorn's `--root-path`, gunicorn's `SCRIPT_NAME`): ASGI gets it as `root_path` and a `path` that starts with it (the request's path when it already does: on a segment boundary, `/api` or `/api/...`; else `root_path` + the path, the proxy having stripped it); WSGI gets it as `SCRIPT_NAME`, and `PATH_INFO` the rest of the path when the path starts with it, else the whole path. Empty: none. Fixed per server: `X-Forwarded-Prefix` is not read (ADR 0040).",
            root_path, "", ("--root-path",), "PATH", worker=True),
    Setting("server_header", "HTTP", "Value of the `Server` response header; an empty string omits the header.",
            header_value, "tines", ("--server-header",), "TEXT", worker=True),
    # Timeouts
    Setting("keepalive_timeout", "Timeouts", "Seconds a kept-alive connection may stay silent after its last response before it is closed: a request its client sent in time is served, however long the worker was busy or stopped meanwhile (docs/slow-clients.md). 0 disables keep-alive.",
            non_negative_seconds, 5.0, ("--keepalive-timeout", "--keep-alive", "--timeout-keep-alive"), "SECONDS", worker=True),
    Setting("drain_timeout", "Timeouts", "When a worker stops while the listener stays open (recycling at `max_requests` or the soft CPU limit, fewer workers, the old workers after a reload) and at the final graceful stop, it stops accepting and drains: in-flight requests finish with `Connection: close`, and each idle keep-alive connection is kept this many seconds for its next request, which is answered with `Connection: close`; one that stays silent is then closed (never later than its own `keepalive_timeout`). The worker exits when no connection is left. Unset: `keepalive_timeout`.",
            optional_non_negative_seconds, None, ("--drain-timeout",), "SECONDS", worker=True, default_text="`keepalive_timeout`"),
    Setting("header_timeout", "Timeouts", "Seconds allowed for the request head to arrive (else 408 and close); extended while the client keeps sending at `header_min_rate`, up to `header_timeout_max` (Apache mod_reqtimeout `header=20-40,MinRate=500`).",
            positive_seconds, 20.0, ("--header-timeout",), "SECONDS", worker=True),
    Setting("header_timeout_max", "Timeouts", "The most the header timeout is extended to, in seconds, for a client that keeps sending.",
            positive_seconds, 40.0, ("--header-timeout-max",), "SECONDS", worker=True),
    Setting("header_min_rate", "Timeouts", "Bytes per second of request head that earn one more second of header timeout (0: no extension).",
            non_negative_int, 500, ("--header-min-rate",), "BYTES", worker=True),
    Setting("body_timeout", "Timeouts", "Seconds allowed for the request body; with `body_min_rate`, each `body_min_rate` bytes received earn one more second (else it is the longest wait for the next bytes). Too slow: 408.",
            positive_seconds, 30.0, ("--body-timeout",), "SECONDS", worker=True),
    Setting("body_min_rate", "Timeouts", "Bytes per second of request body that earn one more second of body timeout (0: the body timeout is a per-wait idle timeout).",
            non_negative_int, 500, ("--body-min-rate",), "BYTES", worker=True),
    Setting("send_timeout", "Timeouts", "Longest wait, in seconds, for a client to accept more response bytes (per wait: renewed by every byte it takes). Covers the poller's writing, a slot waiting for a slow reader, and an ASGI `send` waiting for one (HTTP streams and WebSockets): at expiry the connection closes and the `send` raises `ClientDisconnected`.",
            positive_seconds, 30.0, ("--send-timeout",), "SECONDS", worker=True),
    Setting("response_batch_delay", "Timeouts", "Responses written in batches: a slot that serves several ready requests in a row (prefork's loop after one wake-up, an app thread taking queued requests) queues each small response that is complete when the app finishes it (up to 16 KiB left unsent: the whole of a typical page or API answer) and writes them back to back at the end of the batch, which ends before the slot would sleep or before the next request would make the oldest response wait longer than this many seconds (the next request is assumed to take as long as the last one, so a slow app writes each response at once). One write per response still, but one wake-up of the client (or the proxy in front) per batch: on a busy worker it saves about a third of the server's CPU time per request for a small Flask view (docs/mpm.md, ADR 0011). 0 writes every response as soon as it is complete.",
            non_negative_seconds, 0.001, ("--response-batch-delay",), "SECONDS", worker=True),
    Setting("linger_timeout", "Timeouts", "Lingering close (Apache's `lingering_close`): when Tines closes a connection the client may still be sending on (an error response before the body was read, a response that left the body unread, the last response at `max_keepalive_requests` with pipelined requests behind it), it shuts its write side and reads and drops what arrives until the client closes, everything sent has been acknowledged, or this many seconds pass; so the client reads every response instead of a reset that destroys them. A graceful stop also ends every WebSocket (close frame 1001, what was queued for it, the linger) within this many seconds of its start.",
            positive_seconds, 2.0, ("--linger-timeout",), "SECONDS", worker=True),
    Setting("graceful_timeout", "Timeouts", "Seconds the master waits for workers to finish in-flight requests on stop or reload before killing them.",
            positive_seconds, 30.0, ("--graceful-timeout", "--timeout-graceful-shutdown"), "SECONDS"),
    Setting("interrupt_timeout", "Timeouts", "Seconds Ctrl-C (`INT`) gives an ASGI app's lifespan shutdown: on `INT` each worker cuts its connections, cancels the app's request and WebSocket tasks and runs the lifespan shutdown for at most this long (the cancelled tasks' unwinding counts in it), as uvicorn's Ctrl-C does; the master waits this long plus 2 s, then kills what is left. A second Ctrl-C or a `QUIT` ends it at once. Short because a person at a terminal waits for it. Not capped by `graceful_timeout`, which bounds the graceful stop (`TERM`), a different stop: set each for its own. A WSGI app has no shutdown to run: its workers stop at once. See docs/signals.md.",
            positive_seconds, 3.0, ("--interrupt-timeout",), "SECONDS"),
    Setting("shutdown_delay", "Timeouts", "On `TERM`, seconds between readiness going off (sd_notify `STOPPING=1`) and the graceful stop, during which the workers keep serving normally: time for a load balancer that polls readiness (a Kubernetes readiness probe, an HAProxy health check) to take this server out of rotation before it stops accepting. A second `TERM` ends the delay at once (graceful stop now); `INT` or `QUIT` makes it a quick stop. 0: no delay. See docs/signals.md and docs/deploy.md.",
            non_negative_seconds, 0.0, ("--shutdown-delay",), "SECONDS"),
    Setting("request_timeout", "Timeouts", "Seconds the app may hold an app thread without progress (uWSGI `harakiri`, gunicorn `timeout` on its sync worker: `-t N -k sync` sets it): from dispatch until the app returns its iterable, and between one body block and the next, so a stream that keeps producing is never cut; time spent waiting on the client (reading the body, sending) does not count. On overrun the master logs the request, the worker's Python stacks (every thread) go to the error log, the client gets 503 if no byte of the response was sent, and the worker is replaced: with `thread` and `event` (app threads) it drains, its other requests finishing, and is killed only at `graceful_timeout` or when the stuck request holds the GIL; with `prefork` it is killed at once; the other workers serve on. Also catches an app stuck in C code holding the GIL. 0 turns it off. See docs/signals.md.",
            non_negative_seconds, 60.0, ("--request-timeout",), "SECONDS"),
    Setting("boot_timeout", "Timeouts", "Seconds a new worker has to become ready (load the app, run `post_fork`); one that does not (an import hanging on the network) has its Python stack written to the error log and is killed, a death before ready for the crash-loop guard (`boot_failure_limit`). 0 turns it off.",
            non_negative_seconds, 60.0, ("--boot-timeout",), "SECONDS"),
    # Limits
    Setting("max_request_line", "Limits", "Longest request line (method, target, version), in bytes; at least 14, the length of `GET / HTTP/1.1`.",
            request_line_size, 8190, ("--max-request-line",), "BYTES", worker=True),
    Setting("max_headers", "Limits", "Most header fields in one request.",
            positive_int, 100, ("--max-headers",), "N", worker=True),
    Setting("max_head_size", "Limits", "Largest request head (request line and headers), in bytes; at least 27, the size of the smallest valid HTTP/1.1 request (`GET / HTTP/1.1`, `Host: a` and the blank line).",
            head_size, 32768, ("--max-head-size",), "BYTES", worker=True),
    Setting("max_body_size", "Limits", "Largest request body, in bytes or with a unit (`100MiB`): a larger Content-Length gets 413 before any of the body is read (and without `100 Continue`); a chunked body that grows past it while the server reads it gets 413 before the app runs. On `stream_body_paths` routes a chunked body's size is known only as the app reads it: once it grows past the limit, the app's read of `wsgi.input` raises `OSError`; if the app lets that propagate, Tines answers 413, but an app or framework that catches it answers with its own status, and that stands (Flask answers 500). Each 413 the server answers leaves a warning in the error log naming the request, the limit and this setting (at most one a second per worker; the next says how many were held back). 0 means no limit. Bodies beyond `request_buffer_memory` go to temporary files, so this bounds disk per request, not memory.",
            size, 104857600, ("--max-body-size",), "BYTES", worker=True, default_text="104857600 (100 MiB)"),
    Setting("request_buffer_memory", "Limits", "Request bodies are read whole before the app runs, on every MPM, by the worker's poller, not by an app slot (docs/slow-clients.md): a body up to this many bytes is held in memory; a larger one (or one that would take the worker's parked bodies past `request_buffer_total`) goes to an unlinked temporary file in `request_buffer_dir`. The app's `wsgi.input` then reads memory or the file at full speed. Paths in `stream_body_paths` are the exception.",
            size, 262144, ("--request-buffer-memory",), "SIZE", worker=True, default_text="262144 (256 KiB)"),
    Setting("request_buffer_total", "Limits", "Memory one worker holds at most for request bodies being read before dispatch, together; beyond it a body spills to a temporary file (`request_buffer_dir`) even when it is smaller than `request_buffer_memory`.",
            size, 33554432, ("--request-buffer-total",), "SIZE", worker=True, default_text="33554432 (32 MiB)"),
    Setting("request_buffer_dir", "Limits", "Directory for the temporary files of request bodies and response output too large for memory. Each file is unlinked at once (`O_TMPFILE`; where the file system lacks it, a named file unlinked at once), so a crash or a `SIGKILL` leaves nothing behind. The master checks before the first fork that a temporary file can be made there. On a tmpfs, these files are memory too. A relative path is taken from `chdir` (where the workers run), and must name an existing directory there.",
            optional_text, temp_dir, ("--request-buffer-dir",), "DIR", worker=True, default_text="the system temp dir (`TMPDIR`, else `/tmp`)"),
    Setting("buffer_disk_total", "Limits", "Bytes of temporary files one worker holds at most, request bodies and response output together; beyond it a new request body waits unread (its body timeout running; a Content-Length body reserves its whole length at once, and one larger than this whole budget gets 413) and a response waits on its slot (up to `send_timeout` per wait). A full disk (`ENOSPC`) fails the one request that met it with 507 and a log line.",
            size, 1073741824, ("--buffer-disk-total",), "SIZE", worker=True, default_text="1073741824 (1 GiB)"),
    Setting("stream_body_paths", "Limits", "Path prefixes (matched against the request target's path in normal form, as the rate limits and `compression_exclude_paths` read it: the path of an origin-form target or of an `http(s)://host` absolute-form one, cut at `?` or `#`, percent-decoded once, repeated `/` collapsed, so `/%75pload` and `//upload` are `/upload`; a prefix is written decoded and is a plain byte prefix, `/up` holding `/upload`; a target with no single reading, with a bad escape, an encoded `/` or NUL, a `.` or `..` segment, or no path, `*` or another scheme's absolute form, never streams) whose request bodies are not read before dispatch but stream through `wsgi.input` while the app runs, as the app reads them (and `Expect: 100-continue` is then answered on the app's first read): for an endpoint that must start on the first bytes of a long upload. Such routes are not slow-client safe: a slow uploader holds an app slot for as long as `body_timeout` and `body_min_rate` allow. Comma-separated.",
            text, (), ("--stream-body-paths",), "PATHS", worker=True, multiple=True),
    Setting("max_response_buffer", "Limits", "Response bytes of a body the app is still producing (a WSGI generator or `write()`, an ASGI body) that a slot may leave in memory for the poller to write when the client reads slowly, every MPM; also counted in `response_buffer_total`. Beyond either, a WSGI stream goes on into a temporary file up to `max_stream_buffer`; an ASGI `send` waits. Complete bodies (a list or tuple) are bounded by `response_buffer_total` instead, and files (`wsgi.file_wrapper`) always go by their fd.",
            size, 1048576, ("--max-response-buffer",), "SIZE", worker=True, default_text="1048576 (1 MiB)"),
    Setting("max_stream_buffer", "Limits", "Response bytes of one streamed WSGI body (a generator, `write()`) that may wait for a client reading slower than the app produces, in all: in memory up to `max_response_buffer`, the rest in unlinked temporary files in `request_buffer_dir` within `buffer_disk_total` (shared with request bodies; a stream's files hold at most twice this on disk, as sent bytes are freed a file at a time). A finite stream that fits is pulled from the app whole, so a slow reader holds no slot; beyond it the slot waits for the client (backpressure, `send_timeout` per wait). Set it to `max_response_buffer` for the bound before ADR 0024 (a slow reader of a larger stream then holds its slot). See docs/slow-clients.md and ADR 0024.",
            size, 16777216, ("--max-stream-buffer",), "SIZE", worker=True, default_text="16777216 (16 MiB)"),
    Setting("response_buffer_total", "Limits", "Memory one worker holds at most for response output its slots handed to the poller (clients reading slowly), together; beyond it a complete body (a list or tuple) spills to a temporary file in `request_buffer_dir` within `buffer_disk_total`, and only when that is full too does the slot wait for the client. Streamed bodies' `max_response_buffer` shares it. See docs/slow-clients.md.",
            size, 67108864, ("--response-buffer-total",), "SIZE", worker=True, default_text="67108864 (64 MiB)"),
    Setting("max_body_drain", "Limits", "A request body the app did not read that is still in the socket (`stream_body_paths`) is drained up to this many bytes (or a size with a unit, `64KiB`) to keep the connection; beyond it the connection is closed. A body read before dispatch (every other route) is dropped whatever its size, and the connection kept.",
            size, 65536, ("--max-body-drain",), "BYTES", worker=True),
    # Logging
    Setting("access_log", "Logging", "Access log: a file path, or `-` for stdout. Off when unset. Written by each worker without Python, buffered and appended (`O_APPEND`), so requests never wait on the disk; `USR1` reopens it. Its lines are laid out by `access_log_format`. The client address is the one the app sees as `REMOTE_ADDR`: behind a proxy that `forwarded_allow_ips` trusts, the forwarded one (as gunicorn's `%(h)s` and Apache's mod_remoteip). Responses the server writes itself (400, 408, 413, 414, 431, 503, ...) are logged too, with the request line as received.",
            optional_text, None, ("--access-log", "--access-logfile"), "PATH", worker=True, default_text="off"),
    Setting("access_log_format", "Logging", "Layout of `access_log` lines: `combined` (Apache's, the same as gunicorn's default), `common`, `json` (one object per line: time, remote_addr, method, path, query, protocol, status, bytes, duration_us, queue_us, pid, referer, user_agent; `null` when unknown; a refused request adds raw_request_line, a TLS connection tls_protocol and tls_cipher, a compressed response bytes_uncompressed), or a custom layout of gunicorn's atoms such as `'%(h)s \"%(r)s\" %(s)s %(D)s'` (`%%` is a percent sign). Atoms: " + "; ".join(f"`{name}` {what}" for name, what in ACCESS_LOG_ATOMS) + ". Checked before the first fork: an unknown atom stops the start with one line.",
            text, "combined", ("--access-log-format",), "FORMAT", worker=True),
    Setting("access_log_exclude", "Logging", "Request paths left out of the access log (the path before any `?`): exact, or a prefix when ending with `*` (`/healthz`, `/static/*`), for probe and asset noise. Comma-separated.",
            text, (), ("--access-log-exclude",), "PATHS", worker=True, multiple=True),
    Setting("profile", "Logging", "Sample the app's Python threads in every worker (a thread per worker reads their stacks every `profile_interval`), accumulating across requests and across the workers' lives into `profile_dir`; `tines status --profile` merges the workers' profiles into a top-N table, a pstats file and a collapsed-stack file for flame graphs. Wall-clock samples of the app's frames only. Off: nothing of it runs. See docs/status.md (\"Profiling\") and ADR 0013.",
            boolean, False, ("--profile",)),
    Setting("profile_interval", "Logging", "Seconds between two samples of the profiler (`profile`).",
            positive_seconds, 0.01, ("--profile-interval",), "SECONDS"),
    Setting("profile_dir", "Logging", "Where each worker writes its profile (`profile`): `<pid>.json`, rewritten every 5 seconds and when the worker stops; files of exited workers stay, so the profile accumulates until the directory is emptied. Made by the master at start (refused, exit 2, when it cannot be). A relative path is taken from the directory `tines` starts in.",
            optional_text, None, ("--profile-dir",), "DIR", default_text="$TMPDIR/tines-profile-<master pid>"),
    Setting("error_log", "Logging", "Error log: a file path, or `-` for stderr. `USR1` reopens it, in the master and in every worker (after a rotation, what a worker writes to stderr goes to the new file).",
            text, "-", ("--error-log", "--error-logfile", "--log-file"), "PATH", worker=True),
    Setting("log_level", "Logging", "Least severe level written to the error log.",
            text, "info", ("--log-level",), choices=("debug", "info", "warning", "error", "critical"), worker=True),
    Setting("log_config", "Logging", "A `logging` configuration for the app's records (uvicorn's `--log-config`): a dictConfig file in JSON (`.json`) or YAML (`.yaml`, `.yml`; needs PyYAML), or any other name an ini file for `logging.config.fileConfig`. Read and checked by the master before the first fork (a file that is not one stops the start with one line), applied in each worker after fork and before the app loads (never in the master, which starts no threads). Tines' own lines stay in the error log; the access log is not `logging`'s. Each worker opens the config's file handlers itself: see docs/logging.md for what that means for rotation. Unset: a root logger the app leaves without a handler gets one writing to the error log in its format.",
            optional_absolute_path, None, ("--log-config",), "FILE", default_text="unset"),
    # Process
    Setting("user", "Process", "Switch to this user (name or uid) after binding the sockets.",
            user_id, None, ("--user", "-u"), "USER"),
    Setting("group", "Process", "Switch to this group (name or gid) after binding the sockets.",
            group_id, None, ("--group", "-g"), "GROUP"),
    Setting("chdir", "Process", "Change to this directory before loading the app.",
            directory, None, ("--chdir",), "DIR"),
    Setting("reload", "Process", "Development only (warned at start): watch the app's source tree with inotify and, when a file matching `reload_include` changes, do what HUP does (a new generation of workers; docs/signals.md, Development reload). A changed `.py` file is compiled first: one with a syntax error is logged with its traceback and the old code keeps serving until the next save. The tree is the directory the app is imported from (after `chdir`): a `path/to/file.py` app's directory; for `module` or `package.module`, the directory holding the top-level module or package (the package's own directory when it is found outside the current directory); every subdirectory not matching `reload_exclude`, including ones created later.",
            boolean, False, ("--reload",)),
    Setting("reload_include", "Process", "With `reload`: file names (or paths relative to the watched tree) that trigger a reload, as shell globs (`*.py`, `templates/*.html`). Giving it replaces the default, so list `*.py` too.",
            text, ("*.py",), ("--reload-include",), "GLOB", multiple=True),
    Setting("reload_exclude", "Process", "With `reload`: file and directory names (or paths relative to the watched tree) never watched, as shell globs; they win over `reload_include`. Giving it replaces the default.",
            text, (".*", "*~", "4913", "__pycache__", "*.pyc", ".venv", "venv", "node_modules"), ("--reload-exclude",), "GLOB", multiple=True),
    Setting("umask", "Process", "File mode creation mask (octal, e.g. `022`; in TOML write it as a string), applied at start; it also sets unix socket permissions.",
            umask, None, ("--umask", "-m"), "MASK", show=lambda mask: f"{mask:03o}"),
    Setting("ready_fd", "Process", "When every worker is ready, write one JSON line to this inherited file descriptor.",
            optional_non_negative_int, None, ("--ready-fd",), "FD"),
    Setting("pid_file", "Process", "Write the master's pid to this file (atomically) at start and remove it at exit; refused (exit 2) while a live process holds it. A relative path is taken from the directory `tines` starts in, not `chdir`. During a binary upgrade (`USR2`) the old master's file is `PATH.oldbin` and the new master writes PATH (docs/signals.md); put it in a directory the `user` owns (`/run/tines/`), since the master renames and removes it after dropping privileges.",
            optional_text, None, ("--pid-file", "-p", "--pid"), "PATH", default_text="none"),
    # Compression (app response bodies compressed by Accept-Encoding, in Rust; docs/static-and-compression.md, ADR 0037)
    Setting("compression", "Compression", "Content codings the server compresses app responses with, in its order of preference (a tie between the client's `Accept-Encoding` q-values goes to the first): `gzip`, `br`, `zstd`, comma-separated. Empty (the default): off, at the cost of one branch per response. A response is compressed when the client accepts a coding, its type is on `compression_types`, its length (when known) is at least `compression_min_size`, its path is not under `compression_exclude_paths`, and it has no `Content-Encoding`, no `Cache-Control: no-transform` and is not a 206; it then gets `Content-Encoding`, `Vary: Accept-Encoding` and a weak `ETag`, and its Content-Length is the compressed one (a body known whole) or gone (chunked). Streamed bodies are flushed per block (server-sent events arrive event by event). `wsgi.file_wrapper` bodies are not compressed (sendfile kept). Mind BREACH (docs/static-and-compression.md).",
            compression_coding, (), ("--compression",), "CODINGS", worker=True, multiple=True, default_text="none (off)"),
    Setting("compression_min_size", "Compression", "Responses whose length is known and below this many bytes (or a size with a unit) are sent uncompressed: compressing a few hundred bytes saves less than it costs. A streamed body's length is not known: it is compressed whatever its size.",
            size, 1024, ("--compression-min-size",), "SIZE", worker=True),
    Setting("compression_types", "Compression", "Media types compressed (the response's `Content-Type` without its parameters): `type/subtype`, `type/*` for a whole type, `+suffix` for a structured syntax suffix (`+json`). Already-compressed types (images other than SVG and icons, audio, video, archives, PDF, WOFF fonts) are never compressed, whatever this lists. Giving it replaces the default. Comma-separated.",
            media_type_pattern, ("text/*", "application/json", "application/javascript", "application/xml", "application/wasm", "image/svg+xml", "+json", "+xml"),
            ("--compression-types",), "TYPES", worker=True, multiple=True),
    Setting("compression_gzip_level", "Compression", "gzip's level, 1 (fastest) to 9 (smallest); 5 is close to 9's size at a fraction of its CPU.",
            gzip_level, 5, ("--compression-gzip-level",), "LEVEL", worker=True),
    Setting("compression_brotli_level", "Compression", "brotli's quality, 0 to 11; 4 compresses better than gzip 5 at about its speed (11 is for precompressed files, far too slow per response).",
            brotli_level, 4, ("--compression-brotli-level",), "LEVEL", worker=True),
    Setting("compression_zstd_level", "Compression", "zstd's level, 1 to 19; 3 (zstd's own default) is faster than gzip 5 and smaller.",
            zstd_level, 3, ("--compression-zstd-level",), "LEVEL", worker=True),
    Setting("compression_exclude_paths", "Compression", "Path prefixes (matched against the request's path as the app routes on it: absolute-form stripped, query cut, percent-decoded once, `//` collapsed, on a segment boundary; a path with no single reading is never compressed) whose responses are never compressed: pages that put a secret and attacker-controlled input in one body (BREACH). Comma-separated.",
            path_prefix, (), ("--compression-exclude-paths",), "PATHS", worker=True, multiple=True),
    # Resource limits (setrlimit in each worker after fork, before post_fork and the app; docs/limits.md)
    Setting("limit_address_space", "Resource limits", "RLIMIT_AS of each worker, in bytes or with a unit (`4GiB`; soft and hard): its virtual address space. It counts every mapping, not what is resident: each thread's stack and glibc's malloc arena per thread (64 MiB of address space each), so the `thread` and `event` MPMs need far more than their RSS (docs/limits.md). Python raises `MemoryError` past it; Rust aborts the worker.",
            optional_positive_size, None, ("--limit-address-space",), "SIZE", default_text="unlimited"),
    Setting("limit_data", "Resource limits", "RLIMIT_DATA of each worker, in bytes or with a unit (`2GiB`; soft and hard): its heap and private writable mappings (Linux 4.7+ counts anonymous `mmap`s, so most of malloc).",
            optional_positive_size, None, ("--limit-data",), "SIZE", default_text="unlimited"),
    Setting("limit_cpu", "Resource limits", "RLIMIT_CPU soft limit of each worker, in CPU seconds (all its threads): at it the kernel sends SIGXCPU and the worker recycles gracefully (finishes in-flight requests, exits, is replaced), like `max_requests`. A worker running one request that keeps the CPU busy recycles when that request ends.",
            optional_positive_whole_seconds, None, ("--limit-cpu",), "SECONDS", default_text="unlimited"),
    Setting("limit_cpu_hard", "Resource limits", "RLIMIT_CPU hard limit of each worker, in CPU seconds: at it the kernel kills the worker (SIGKILL), whatever it was doing. At least `limit_cpu` (equal: killed without the graceful recycling). Needs `limit_cpu`.",
            optional_positive_whole_seconds, None, ("--limit-cpu-hard",), "SECONDS", default_text="`limit_cpu` + 10"),
    Setting("limit_open_files", "Resource limits", "RLIMIT_NOFILE of each worker (soft and hard): the most file descriptors it may hold, sockets included. Unset, a worker raises its soft limit to the hard one at start; set, that raise does not undo it.",
            optional_positive_int, None, ("--limit-open-files",), "N", default_text="the hard limit"),
    Setting("limit_core", "Resource limits", "RLIMIT_CORE of each worker, in bytes or with a unit (`512MiB`; soft and hard): the largest core dump it writes when it crashes; 0 writes none.",
            optional_size, None, ("--limit-core",), "SIZE", default_text="inherited"),
)

SETTINGS: Mapping[str, Setting] = MappingProxyType({setting.name: setting for setting in _REGISTRY})
"""Every setting, by name, in documentation order within each section. Read-only."""


def format_value(value: object) -> str:
    """A value as TOML would spell it; None (unset) as ``(unset)``."""
    if value is None:
        return "(unset)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(format_value(item) for item in value) + "]"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
