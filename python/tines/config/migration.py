"""Coming from another server: Apache's, gunicorn's, uvicorn's, Hypercorn's, Granian's, uWSGI's and
nginx's settings beside ours (nginx's directives as docs rows only: no nginx flag reaches
``tines serve``).

Owns the rows (``EQUIVALENTS``), which give both the "Coming from another server" table of
docs/settings.md (``tines.config.reference`` renders it) and ``tines serve``'s answer to another
server's flag (``migration_hint``). gunicorn's and uvicorn's rows are made from
``tines.config.peers`` (the table their flags and gunicorn's config file go through), so the
docs list what the command line does; ``peer_text`` renders a peers row for a command line. A row names Tines' settings as ``{name}``, looked up in the
registry when it is rendered, so a renamed setting fails the docs test instead of going stale.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tines.config.peers import PEER_SETTINGS, PeerSetting
from tines.config.registry import SETTINGS, format_value


@dataclass(frozen=True)
class Equivalent:
    """One row of "Coming from another server": another server's setting and Tines' answer.

    ``theirs`` is their setting as the docs show it (Markdown). ``ours`` says what Tines has
    instead, in Markdown where ``{name}`` names a setting, ``{name=value}`` a setting with a
    value (checked against the registry when rendered) and ``{planned:name}`` a setting that
    does not exist yet. ``flags`` are their command-line flags that Tines does not accept:
    ``tines serve`` answers them with ``ours`` (``migration_hint``), and the docs list them.
    """

    server: str
    theirs: str
    ours: str
    flags: tuple[str, ...] = ()

    def markdown(self) -> tuple[str, str]:
        """(their cell, our cell) for docs/settings.md."""
        flags = " (" + ", ".join(f"`{flag}`" for flag in self.flags) + ")" if self.flags else ""
        return self.theirs + flags, _REFERENCE.sub(_reference_in_markdown, self.ours)

    def command_line(self) -> str:
        """``ours`` for ``tines serve``'s error line: settings as flags, no Markdown."""
        text = _REFERENCE.sub(_reference_on_command_line, self.ours).replace("`", "")
        return "use " + text if self.ours.startswith("{") else text


_REFERENCE = re.compile(r"\{(planned:)?([a-z_][a-z0-9_]*)(?:(=)([^}]*))?\}")
"""``{name}``, ``{name=value}`` or ``{planned:name}`` in ``Equivalent.ours``."""


def _reference_in_markdown(match: re.Match[str]) -> str:
    planned, name, equals, raw = match.groups()
    if planned or not equals:
        return f"`{name if planned else SETTINGS[name].toml_key}`"
    return f"`{SETTINGS[name].toml_key} = {format_value(SETTINGS[name].to_value(raw))}`"


def _reference_on_command_line(match: re.Match[str]) -> str:
    planned, name, equals, raw = match.groups()
    if planned:
        return "--" + name.replace("_", "-")
    setting = SETTINGS[name]
    flag = next(flag for flag in setting.flags if flag.startswith("--"))
    if not equals:
        return flag
    value = setting.to_value(raw)
    if setting.is_flag:
        return flag if value else f"--no-{flag[2:]}"
    return f"{flag} {raw}" if raw else f"{flag} ''"


def _peer_row(row: PeerSetting) -> Equivalent:
    """A gunicorn or uvicorn row of ``tines.config.peers`` as a docs row: their name and flags, what
    Tines makes of it. Its flags are not ``Equivalent.flags``: Tines accepts some of them, and
    ``tines.cli`` answers the refused ones from the peers' row itself."""
    flags = " (" + ", ".join(f"`{flag}`" for flag in row.flags) + ")" if row.flags else ""
    return Equivalent(row.server, f"`{row.name}`{flags}", row.answer)


_HTTP = ("not needed: every connection is served by Tines' own HTTP/1.1 parser or its HTTP/2 (docs/http2.md). "
         "{http2} (on by default) offers `h2` by ALPN on TLS binds and {http2=false} does not (Granian's `1`); "
         "a cleartext bind speaks h2c when written `h2c:HOST:PORT` (HTTP/2 only, Granian's `2`) or "
         "`http1+h2c:HOST:PORT` (both, Granian's `auto`)")
_H2_SEND_BUFFER = ("{max_response_buffer}: a stream's response waits for its flow-control window as an HTTP/1.1 "
                   "response waits for a slow client, within {response_buffer_total}")

EQUIVALENTS: tuple[Equivalent, ...] = (
    Equivalent("Apache", "`Listen`", "{bind}"),
    Equivalent("Apache", "`SSLEngine on`, `SSLCertificateFile`, `SSLCertificateKeyFile`",
               "{certfile} (the chain in it, leaf first), {keyfile}"),
    Equivalent("Apache", "`SSLPassPhraseDialog`", "{keyfile_password_file}, or `TINES_KEYFILE_PASSWORD`"),
    Equivalent("Apache", "name-based virtual hosts with their own certificates (SNI)",
               "{sni_certificates}, and {tls_unknown_server_name} for other names"),
    Equivalent("Apache", "`SSLProtocol`, `SSLCipherSuite`",
               "{tls_min_version}; {tls_cipher_suites} (IANA names, not OpenSSL's)"),
    Equivalent("Apache", "`SSLVerifyClient none`, `optional_no_ca`, `require`",
               "{client_cert} `none`, `optional`, `required`"),
    Equivalent("Apache", "`SSLCACertificateFile`, `SSLCARevocationFile`", "{client_ca}, {client_crl}"),
    Equivalent("Apache", "`SSLSessionTickets`", "{tls_tickets} (keys shared by every worker)"),
    Equivalent("Apache", "`StartServers`, `MaxRequestWorkers`", "{start_workers}, {max_workers} (the dynamic pool, "
               "docs/pool.md); or {workers} for a fixed count"),
    Equivalent("Apache", "`MinSpareServers`, `MaxSpareServers` (prefork)", "{min_spare_workers}, {max_spare_workers}"),
    Equivalent("Apache", "`MinSpareThreads`, `MaxSpareThreads` (worker/event)", "{min_spare_threads}, {max_spare_threads}"),
    Equivalent("Apache", "`ServerLimit`", "{max_workers} (the scoreboard is sized from it)"),
    Equivalent("Apache", "`ThreadsPerChild` (worker/event)", "{threads} with {mpm=thread} or {mpm=event}"),
    Equivalent("Apache", "`AsyncRequestWorkerFactor` (event)", "{max_connections}, {max_queued_requests}"),
    Equivalent("Apache", "`MaxConnectionsPerChild`", "{max_requests} (counts requests, not connections)"),
    Equivalent("Apache", "`KeepAliveTimeout`", "{keepalive_timeout}"),
    Equivalent("Apache", "`KeepAlive Off`", "{keepalive_timeout=0}"),
    Equivalent("Apache", "`MaxKeepAliveRequests`", "{max_keepalive_requests}"),
    Equivalent("Apache", "`ListenBacklog`", "{backlog}"),
    Equivalent("Apache", "`AcceptFilter http data` (Linux: `TCP_DEFER_ACCEPT`)", "{defer_accept} (on by default; `AcceptFilter http none`: {defer_accept=0})"),
    Equivalent("Apache", "`RequestReadTimeout header=`, `body=`", "{header_timeout}, {body_timeout}"),
    Equivalent("Apache", "`Timeout` (sending)", "{send_timeout}"),
    Equivalent("Apache", "`LimitRequestLine`", "{max_request_line}"),
    Equivalent("Apache", "`LimitRequestFields`", "{max_headers}"),
    Equivalent("Apache", "`LimitRequestFieldSize`", "{max_head_size} (limits the whole head)"),
    Equivalent("Apache", "`User`, `Group`", "{user}, {group}"),
    Equivalent("Apache", "`CustomLog`, `ErrorLog`, `LogLevel`", "{access_log}, {error_log}, {log_level}"),
    Equivalent("Apache", "`ServerTokens`", "{server_header}"),
    Equivalent("Apache", "mod_perl `PerlChildInitHandler`, Apache::DBI `connect_on_init`",
               "a `post_fork` function in {hooks} (docs/hooks.md)"),
    Equivalent("Apache", "`RLimitCPU`, mod_perl Apache::Resource `PERL_RLIMIT_CPU`",
               "{limit_cpu} (soft: graceful recycling), {limit_cpu_hard} (kill)"),
    Equivalent("Apache", "`RLimitMEM`, Apache::Resource `PERL_RLIMIT_AS`, `PERL_RLIMIT_DATA`",
               "{limit_address_space}, {limit_data}"),
    Equivalent("Apache", "mod_perl Apache::SizeLimit `MAX_UNSHARED_SIZE`",
               "{max_worker_memory} (USS, the default {max_worker_memory_kind})"),
    Equivalent("Apache", "Apache::SizeLimit `MAX_PROCESS_SIZE`", "{max_worker_memory} with {max_worker_memory_kind=rss}"),
    Equivalent("Apache", "Apache::SizeLimit `MIN_SHARE_SIZE`", "none: limit the unshared part (USS) instead"),
    Equivalent("Apache", "Apache::SizeLimit `CHECK_EVERY_N_REQUESTS`",
               "{memory_sample_rate} (the master samples by time, not per request)"),
    Equivalent("Apache", "Apache::Resource `PERL_RLIMIT_NOFILE`, `PERL_RLIMIT_CORE`", "{limit_open_files}, {limit_core}"),
    Equivalent("Apache", "mod_perl Apache::SpeedLimit (requests per client and interval, in shared memory)",
               "{rate_limit} with {rate_limit_burst}: a token bucket per client in one table every "
               "worker shares (docs/rate-limits.md)"),
    Equivalent("gunicorn", "none: no memory limit per worker (its issue 3581)", "{max_worker_memory}"),
    *(_peer_row(row) for row in PEER_SETTINGS),
    Equivalent("Hypercorn", "`bind` (a cleartext bind speaks HTTP/1.1 and h2c, a TLS one h2 and HTTP/1.1)",
               "{bind}: a cleartext bind speaks h2c too when written `http1+h2c:HOST:PORT` (`h2c:HOST:PORT`: "
               "HTTP/2 only); with {certfile}, TLS binds offer `h2` by ALPN ({http2})"),
    Equivalent("Hypercorn", "`insecure_bind`", "{bind} with `plain:HOST:PORT` beside TLS binds "
               "(`http1+h2c:HOST:PORT` for h2c too, as Hypercorn's)", ("--insecure-bind",)),
    Equivalent("Hypercorn", "`alpn_protocols`", "{alpn}"),
    Equivalent("Hypercorn", "`h2_max_concurrent_streams`, `h2_max_header_list_size`", "same names"),
    Equivalent("Hypercorn", "`h2_max_inbound_frame_size`", "{h2_max_frame_size}"),
    Equivalent("Granian", "`http` (`--http`: `auto` taken as uvicorn's, with nothing to do; `1` and `2` refused "
               "with this answer)", _HTTP),
    Equivalent("Granian", "`http2_settings.adaptive_window`", "not supported: the windows are fixed "
               "({h2_initial_window_size} per stream, {h2_connection_window_size} per connection) and reopen as "
               "the body is read", ("--http2-adaptive-window", "--no-http2-adaptive-window")),
    Equivalent("Granian", "`http2_settings.initial_connection_window_size`", "{h2_connection_window_size}",
               ("--http2-initial-connection-window-size",)),
    Equivalent("Granian", "`http2_settings.initial_stream_window_size`", "{h2_initial_window_size}",
               ("--http2-initial-stream-window-size",)),
    Equivalent("Granian", "`http2_settings.keep_alive_interval`, `keep_alive_timeout`",
               "not needed: Tines sends no PING of its own (it answers the client's); an HTTP/2 connection "
               "with no open stream is closed after {keepalive_timeout}",
               ("--http2-keep-alive-interval", "--http2-keep-alive-timeout")),
    Equivalent("Granian", "`http2_settings.max_concurrent_streams` (`--http2-max-concurrent-streams`, "
               "accepted as gunicorn's)", "{h2_max_concurrent_streams}"),
    Equivalent("Granian", "`http2_settings.max_frame_size` (`--http2-max-frame-size`, accepted as gunicorn's)",
               "{h2_max_frame_size} (16384 at least, RFC 9113 6.5.2)"),
    Equivalent("Granian", "`http2_settings.max_headers_size`", "{h2_max_header_list_size}", ("--http2-max-headers-size",)),
    Equivalent("Granian", "`http2_settings.max_send_buffer_size`", _H2_SEND_BUFFER, ("--http2-max-send-buffer-size",)),
    Equivalent("Granian", "`static_path_mount` with `static_path_route` (default `/static`)",
               "{static} `ROUTE=DIR`: the prefix and the directory in one value, repeatable",
               ("--static-path-mount", "--static-path-route")),
    Equivalent("Granian", "`static_path_expires` (seconds, default 86400)",
               "{static_cache_control} (the whole `Cache-Control` value, `public, max-age=3600` by default), and "
               "{static_hashed_cache_control} for names carrying a content hash", ("--static-path-expires",)),
    Equivalent("Granian", "`static_path_dir_to_file`", "{static_index}", ("--static-path-dir-to-file",)),
    Equivalent("uWSGI", "`http-socket`, `socket`", "{bind}"),
    Equivalent("uWSGI", "`https-socket` (`ADDRESS,CERT,KEY`), `https-socket-req-client-ca`",
               "{bind} with {certfile} and {keyfile} (every TCP bind speaks TLS; `plain:HOST:PORT` one that does not); "
               "{client_cert=required} with {client_ca}"),
    Equivalent("uWSGI", "`processes`, `threads`", "{workers}, {threads}; with `cheaper`, `processes` is the most: {max_workers}"),
    Equivalent("uWSGI", "`max-requests`", "{max_requests}"),
    Equivalent("uWSGI", "`listen`", "{backlog}"),
    Equivalent("uWSGI", "`lazy-apps` (uWSGI preloads unless it is set)", "{preload=false} (our default)"),
    Equivalent("uWSGI", "`harakiri`", "{request_timeout} (also answers 503 when nothing was sent, and "
               "logs the stacks like `py-tracebacker`)"),
    Equivalent("uWSGI", "`reload-on-rss` (MB, checked by the worker after each request)",
               "{max_worker_memory} (with a unit: `512MiB`) and {max_worker_memory_kind=rss}; checked by the master "
               "({memory_sample_rate}), USS by default"),
    Equivalent("uWSGI", "`evil-reload-on-rss` (the master kills a worker above it)",
               "{max_worker_memory} with {max_worker_memory_kind=rss}: the master samples, the worker stops gracefully"),
    Equivalent("uWSGI", "`ksm` (the master runs KSM merging of its workers' pages)", "{memory_merge} (Linux 6.4+)"),
    Equivalent("uWSGI", "`limit-as`", "{limit_address_space} (in bytes, not MiB)"),
    Equivalent("uWSGI", "`cheaper`", "{min_spare_workers} with {max_workers} (uWSGI keeps at least `cheaper` workers; "
               "Tines keeps at least that many idle ones)"),
    Equivalent("uWSGI", "`cheaper-initial`", "{start_workers}"),
    Equivalent("uWSGI", "`cheaper-algo`, `cheaper-step`", "one algorithm, Apache's spare-server maintenance (closest to "
               "uWSGI's `spare`): starts 1, 2, 4, ... up to 32 workers a second while short (docs/pool.md)"),
    Equivalent("uWSGI", "`uid`, `gid`, `chdir`, `umask`", "{user}, {group}, {chdir}, {umask}"),
    Equivalent("uWSGI", "`static-map` (`MOUNTPOINT=DIR`), `static-map2` (the whole path appended to `DIR`)",
               "{static} `PREFIX=DIR`, repeatable (`static-map2 /static=DIR` is `--static /static=DIR/static`); "
               "served by the worker's Rust code, no offload threads needed", ("--static-map", "--static-map2")),
    Equivalent("uWSGI", "`check-static` (files of `DIR` for any path, else the app)",
               "{static} `/=DIR` with {static_miss=app}", ("--check-static",)),
    Equivalent("uWSGI", "`static-index`", "{static_index} (one name)"),
    Equivalent("uWSGI", "`static-expires-type`, `static-expires`, `static-expires-uri`, `static-expires-path` "
               "(and their `-mtime` forms): an `Expires` header by type or regexp",
               "no `Expires`: {static_cache_control} for every file of the mounts, and "
               "{static_hashed_cache_control} for names carrying a content hash (`app.3f2a9c1e.css`)",
               ("--static-expires-type", "--static-expires-type-mtime", "--static-expires", "--static-expires-mtime",
                "--static-expires-uri", "--static-expires-uri-mtime", "--static-expires-path",
                "--static-expires-path-mtime")),
    Equivalent("uWSGI", "`static-gzip-all`, `static-gzip-dir`, `static-gzip-ext`",
               "not needed: {static} looks for precompressed siblings (`.br`, `.zst`, `.gz`) of text files and "
               "chooses by `Accept-Encoding` (docs/static-and-compression.md)",
               ("--static-gzip-all", "--static-gzip-dir", "--static-gzip-prefix", "--static-gzip-ext",
                "--static-gzip-suffix")),
    Equivalent("nginx", "`location /static/ { alias DIR/; }` (or `root`), `sendfile on`",
               "{static} `/static/=DIR` (sendfile on plain HTTP/1.1 always)"),
    Equivalent("nginx", "`index`", "{static_index}"),
    Equivalent("nginx", "`try_files $uri @app`", "{static_miss=app}"),
    Equivalent("nginx", "`expires`, `add_header Cache-Control`",
               "{static_cache_control}, {static_hashed_cache_control}"),
    Equivalent("nginx", "`disable_symlinks` (off by default: every symlink is followed)",
               "symlinks staying inside the mount are followed, others refused; {static_follow_symlinks} "
               "follows them all"),
    Equivalent("Apache", "mod_deflate, mod_brotli (`AddOutputFilterByType DEFLATE text/html`), Apache::GzipChain",
               "{compression} (`gzip`, `br`, `zstd`) and {compression_types}"),
    Equivalent("Apache", "`DeflateCompressionLevel`, `BrotliCompressionQuality`",
               "{compression_gzip_level}, {compression_brotli_level}"),
    Equivalent("nginx", "`gzip on`, `gzip_types`, `gzip_min_length`, `gzip_comp_level`",
               "{compression}, {compression_types}, {compression_min_size}, {compression_gzip_level}"),
    Equivalent("nginx", "`gzip_vary on`", "always: `Vary: Accept-Encoding` on every response that could be compressed"),
    Equivalent("nginx", "`gzip_disable`", "{compression_exclude_paths} (by path, not by User-Agent)"),
    Equivalent("nginx", "`gzip_static on` (and ngx_brotli's `brotli_static`)",
               "always for static text files: siblings `.br`, `.zst`, `.gz` chosen by `Accept-Encoding`"),
    Equivalent("nginx", "`limit_req_zone $binary_remote_addr ... rate=10r/s` with `limit_req burst=20 nodelay`",
               "{rate_limit=10/s} with {rate_limit_burst=20} (always `nodelay`: over the burst is a 429 at once, "
               "never a delay); `zone=...:10m` is {rate_limit_table_size} (entries, not bytes)"),
    Equivalent("nginx", "`limit_req` in a `location`", "{rate_limit_paths} (`PREFIX=RATE[:BURST]`, the longest "
               "prefix wins)"),
    Equivalent("nginx", "`limit_req_status 429`, `limit_conn_status`", "always 429 (with `Retry-After` and the "
               "`RateLimit` fields); a connection over {max_connections_per_client} is closed unanswered"),
    Equivalent("nginx", "`limit_conn_zone $binary_remote_addr` with `limit_conn addr 10`",
               "{max_connections_per_client=10}"),
    Equivalent("nginx", "`geo` / `map` to exempt networks from `limit_req`", "{rate_limit_allow}"),
    Equivalent("Apache", "mod_evasive `DOSPageCount`, `DOSSiteCount`", "{rate_limit} with {rate_limit_burst} "
               "(one bucket per client in shared memory: every worker counts in it)"),
    Equivalent("Apache", "mod_qos `QS_SrvMaxConnPerIP`", "{max_connections_per_client}"),
    Equivalent("nginx", "`set_real_ip_from`, `real_ip_header`, `listen ... proxy_protocol`",
               "{forwarded_allow_ips}, {proxy_protocol}: the limits count the real client"),
    Equivalent("Apache", "mod_alias `Alias /static DIR` with mod_expires and `Options -Indexes`",
               "{static} (never a listing), {static_cache_control}"),
)
"""The rows of the "Coming from another server" table, which also answer their flags."""


def peer_text(text: str, in_file: bool = False) -> str:
    """A ``tines.config.peers`` row's Markdown (``{name}`` references) for a command-line line:
    settings as flags (``in_file``: as the config file's keys), no backticks."""
    return _REFERENCE.sub(_reference_in_markdown if in_file else _reference_on_command_line, text).replace("`", "")


def migration_hint(option: str) -> str | None:
    """What Tines has instead of another server's flag, as ``(servers): answer``; None when no
    row lists it (then the CLI falls back to the closest spelling)."""
    rows = [row for row in EQUIVALENTS if option in row.flags]
    if not rows:
        return None
    servers = ", ".join(dict.fromkeys(row.server for row in rows))
    return f"({servers}): {rows[0].command_line()}"
