"""Reading gunicorn's Python config file (tines.config.gunicorn, ADR 0039) and the hooks it
defines, called with gunicorn's arguments (tines.hooks): what is taken, with which source, what
is refused with one line, what is only a warning; the views hooks see; gunicorn's req/resp."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from tines import hooks
from tines.config import gunicorn, ignored_settings, load, peers
from tines.errors import ConfigError

REAL_LOOKING = """
import multiprocessing
import os

bind = "127.0.0.1:8123"
workers = multiprocessing.cpu_count() * 2 + 1
threads = 4
worker_class = "gthread"
timeout = 45
graceful_timeout = 20
keepalive = 3
accesslog = "-"
errorlog = "-"
loglevel = "warning"
max_requests = 1000
max_requests_jitter = 50
preload_app = True
forwarded_allow_ips = "10.0.0.1,10.0.0.2"
limit_request_line = 4094
limit_request_fields = 50
wsgi_app = "myproject.wsgi:application"
HOME = os.environ.get("HOME", "")


def _helper():
    return 1


def helper_too(server):
    return 2


def post_fork(server, worker):
    server.log.info("worker %s forked", worker.pid)


def pre_request(worker, req):
    worker.log.debug("%s %s", req.method, req.path)
"""


def write(tmp_path: Path, text: str, name: str = "gunicorn.conf.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_python_config_forms_are_told_from_toml() -> None:
    assert gunicorn.is_python_config("gunicorn.conf.py")
    assert gunicorn.is_python_config("/etc/app/gunicorn_conf.py")
    assert gunicorn.is_python_config("python:myproject.gunicorn_conf")
    assert gunicorn.is_python_config("file:conf/gunicorn.py")
    assert not gunicorn.is_python_config("tines.toml")
    assert not gunicorn.is_python_config("gunicorn.conf.py.toml")


def test_a_real_looking_file_becomes_settings_from_that_file(tmp_path: Path) -> None:
    path = write(tmp_path, REAL_LOOKING)
    cfg = load({"config": path}, environ={})
    import multiprocessing

    assert cfg.workers == multiprocessing.cpu_count() * 2 + 1
    assert cfg.bind == ("127.0.0.1:8123",)
    assert (cfg.mpm, cfg.threads) == ("thread", 4)
    assert cfg.boot_timeout == 45 and cfg.source("request_timeout") == "default", "gthread: the boot only"
    assert (cfg.graceful_timeout, cfg.keepalive_timeout) == (20, 3)
    assert (cfg.access_log, cfg.error_log, cfg.log_level) == ("-", "-", "warning")
    assert (cfg.max_requests, cfg.max_requests_jitter, cfg.preload) == (1000, 50, True)
    assert [str(ip) for ip in cfg.forwarded_allow_ips] == ["10.0.0.1", "10.0.0.2"]
    assert (cfg.max_request_line, cfg.max_headers) == (4094, 50)
    assert cfg.app == "myproject.wsgi:application"
    assert cfg.hooks == path, "the file defines hooks: it is the hooks module, by its absolute path"
    for name in ("workers", "bind", "mpm", "threads", "boot_timeout", "access_log", "app", "hooks", "preload"):
        assert cfg.source(name) == f"file {path}", name
    notes = ignored_settings(cfg)
    assert [note for note in notes if "HOME" in note] == [
        f"config file {path!r}: HOME is not a gunicorn setting: ignored"], notes
    assert any("timeout: in gunicorn a worker silent" in note and "boot_timeout" in note for note in notes), notes
    assert not any("multiprocessing" in note or "helper" in note for note in notes), notes


def test_the_command_line_and_environment_win_over_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "workers = 9\nbind = '127.0.0.1:9000'\n")
    cfg = load({"config": path, "workers": "2"}, environ={"TINES_BIND": "127.0.0.1:9001"})
    assert (cfg.workers, cfg.source("workers")) == (2, "cli")
    assert (cfg.bind, cfg.source("bind")) == (("127.0.0.1:9001",), "env TINES_BIND")


def test_gunicorn_conf_py_in_the_current_directory_is_not_read_unless_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "workers = 7\n")
    monkeypatch.chdir(tmp_path)
    cfg = load({}, environ={})
    assert (cfg.source("workers"), cfg.config_file) == ("default", None)
    cfg = load({"config": "gunicorn.conf.py"}, environ={})
    assert (cfg.workers, cfg.source("workers")) == (7, "file gunicorn.conf.py")


def test_python_module_form(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "workers = 3\ndef on_starting(server):\n    pass\n", name="site_gunicorn_conf.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = load({"config": "python:site_gunicorn_conf"}, environ={})
    assert (cfg.workers, cfg.source("workers")) == (3, "file python:site_gunicorn_conf")
    assert cfg.hooks == "site_gunicorn_conf"
    loaded = hooks.load(cfg.hooks, gunicorn.gives_hooks(cfg.config_file, cfg.source("hooks")))
    assert loaded.gunicorn and list(loaded.functions) == ["on_starting"]
    with pytest.raises(ConfigError, match=r"^config file 'python:no_such_conf': no module named 'no_such_conf'$"):
        load({"config": "python:no_such_conf"}, environ={})


@pytest.mark.parametrize(("worker_class", "expected"), [
    ("sync", {"mpm": "prefork"}),
    ("gunicorn.workers.sync.SyncWorker", {"mpm": "prefork"}),
    ("gthread", {"mpm": "thread"}),
    ("uvicorn.workers.UvicornWorker", {"interface": "asgi"}),
    ("uvicorn_worker.UvicornWorker", {"interface": "asgi"}),
])
def test_worker_class(tmp_path: Path, worker_class: str, expected: dict[str, str]) -> None:
    cfg = load({"config": write(tmp_path, f"worker_class = {worker_class!r}\n")}, environ={})
    for name, value in expected.items():
        assert cfg.value(name) == value
        assert cfg.source(name).startswith("file ")


def test_timeout_bounds_a_request_only_on_sync_workers(tmp_path: Path) -> None:
    # As `-t` with `-k sync` on the command line: only a file naming sync workers asks for the
    # request's bound (Tines' MPM is its own setting; the file does not choose it by omission).
    cfg = load({"config": write(tmp_path, "timeout = 60\nworker_class = 'sync'\n")}, environ={})
    assert (cfg.boot_timeout, cfg.request_timeout) == (60, 60)
    for text in ("timeout = 60\n", "timeout = 60\nworker_class = 'uvicorn.workers.UvicornWorker'\n",
                 "timeout = 60\nthreads = 4\n"):
        cfg = load({"config": write(tmp_path, text)}, environ={})
        assert cfg.boot_timeout == 60 and cfg.source("request_timeout") == "default", text


@pytest.mark.parametrize("text", [
    "threads = 4\nworker_class = 'sync'\ntimeout = 30\n",
    "worker_class = 'sync'\ntimeout = 30\nthreads = 4\n",
    "timeout = 30\nthreads = 4\nworker_class = 'sync'\n",
])
def test_sync_with_threads_is_gthread_whatever_the_order_of_the_names(tmp_path: Path, text: str) -> None:
    """gunicorn runs gthread for the sync worker with threads above 1; its -t then bounds no request."""
    cfg = load({"config": write(tmp_path, text)}, environ={})
    assert (cfg.mpm, cfg.threads, cfg.boot_timeout) == ("thread", 4, 30)
    assert cfg.source("request_timeout") == "default" and cfg.source("mpm").startswith("file ")


def test_script_name_in_raw_env_is_root_path_with_a_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SCRIPT_NAME", raising=False)
    path = write(tmp_path, 'raw_env = ["SCRIPT_NAME=/api", "DEBUG=1"]\n')
    reading = gunicorn.read(path)
    assert reading.values == {"root_path": "/api"}
    assert reading.notes == (f"config file {path!r}: raw_env: SCRIPT_NAME=/api is taken as root_path: Tines gives "
                             "the app SCRIPT_NAME (and PATH_INFO the rest of the path) from that setting (--root-path)",)
    cfg = load({"config": path}, environ={})
    assert (cfg.root_path, cfg.source("root_path")) == ("/api", f"file {path}")
    assert gunicorn.read(write(tmp_path, 'raw_env = ["DEBUG=1"]\n')).values == {}


def test_reload_extra_files_are_watched_with_the_python_modules(tmp_path: Path) -> None:
    cfg = load({"config": write(tmp_path, "reload = True\nreload_extra_files = ['templates/index.html']\n")},
               environ={})
    assert cfg.reload_include == ("*.py", "templates/index.html") and cfg.source("reload_include").startswith("file ")


@pytest.mark.parametrize(("text", "message"), [
    ("worker_class = 'gevent'\n", r"^config file '.*': worker_class = 'gevent' is refused: .*no gevent, eventlet "
                                  r"or tornado worker; sync is mpm = prefork, gthread mpm = thread"),
    ("statsd_host = 'localhost:8125'\n", r"^config file '.*': gunicorn setting statsd_host has no equivalent "
                                         r"in Tines: Tines has no StatsD client; it serves Prometheus /metrics .*on status_bind$"),
    ("workers = 'many'\n", r"^gunicorn.conf.py: workers must be"),
    ("import no_such_module_anywhere\n", r"^config file '.*' line 1: ModuleNotFoundError: "),
    ("x = 1\nworkers = undefined_name + 1\n", r"^config file '.*' line 2: NameError: "),
    ("workers = \n", r"^config file '.*' line 1: SyntaxError: "),
    ("post_fork = 3\n", r"^config file '.*': hook post_fork must be a function, got 3$"),
])
def test_bad_files_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, message: str) -> None:
    write(tmp_path, text)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=message) as raised:
        load({"config": "gunicorn.conf.py"}, environ={})
    assert "\n" not in str(raised.value)


def test_a_setting_tines_lacks_left_off_is_no_error(tmp_path: Path) -> None:
    cfg = load({"config": write(tmp_path, "daemon = False\nstatsd_host = None\nworkers = 2\n")}, environ={})
    assert cfg.workers == 2 and ignored_settings(cfg) == []
    with pytest.raises(ConfigError, match=r"gunicorn setting daemon has no equivalent in Tines: run Tines in the foreground under a supervisor"):
        load({"config": write(tmp_path, "daemon = True\n")}, environ={})


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^cannot read config file '.*nope.py': no such file$"):
        load({"config": str(tmp_path / "nope.py")}, environ={})


def test_unknown_names_warn_with_the_closest_setting_and_hooks_tines_lacks_are_named(tmp_path: Path) -> None:
    path = write(tmp_path, """
        wrokers = 3
        settings = {"a": 1}
        class Helper:
            pass
        def on_reload(server):
            pass
        def worker_int(worker):
            pass
    """)
    cfg = load({"config": path}, environ={})
    notes = ignored_settings(cfg)
    assert f"config file {path!r}: wrokers is not a gunicorn setting: ignored (did you mean 'workers'?)" in notes
    assert any(note.startswith(f"config file {path!r}: settings is not a gunicorn setting: ignored")
               for note in notes), notes
    assert any(note.startswith(f"config file {path!r}: gunicorn hook on_reload is not run: ") for note in notes)
    assert any(note.startswith(f"config file {path!r}: gunicorn hook worker_int is not run: ") for note in notes)
    assert not any("Helper" in note for note in notes)
    assert cfg.source("hooks") == "default", "no hook Tines runs: the file is no hooks module"


def test_the_hooks_run_are_tines_hooks_and_every_peer_row_names_real_settings() -> None:
    assert gunicorn.HOOKS_RUN == hooks.HOOK_NAMES
    assert not set(gunicorn.HOOKS_NOT_RUN) & set(hooks.HOOK_NAMES)
    for row in peers.PEER_SETTINGS:
        assert peers.find(row.server, row.name) is not None


def test_hooks_from_the_file_allow_helpers_and_a_tines_hooks_module_does_not(tmp_path: Path) -> None:
    path = write(tmp_path, REAL_LOOKING)
    cfg = load({"config": path}, environ={})
    assert gunicorn.gives_hooks(cfg.config_file, cfg.source("hooks"))
    loaded = hooks.load(cfg.hooks, True)
    assert loaded.gunicorn and sorted(loaded.functions) == ["post_fork", "pre_request"]
    with pytest.raises(ConfigError, match="defines helper_too"):
        hooks.load(path)
    cli = load({"config": path, "hooks": path}, environ={})
    assert not gunicorn.gives_hooks(cli.config_file, cli.source("hooks")), "--hooks names a Tines hooks module"


def test_views_have_what_gunicorn_hooks_use(tmp_path: Path) -> None:
    cfg = load({"workers": "3"}, environ={})
    server = hooks.ServerView(pid=1, config=cfg, app="app:app")
    assert server.cfg.workers == 3 and server.log is hooks.log
    for level in ("info", "warning", "error", "debug", "exception"):
        assert callable(getattr(server.log, level))
    worker = hooks.WorkerView(pid=2, slot=0, generation=1, mpm="prefork", born=0.0)
    assert worker.age > 0 and worker.log is hooks.log
    assert hooks.WorkerView(pid=None, slot=0, generation=1, mpm="prefork").age == 0.0


ENVIRON = {
    "REQUEST_METHOD": "POST", "SCRIPT_NAME": "", "PATH_INFO": "/items/1", "QUERY_STRING": "a=1",
    "RAW_URI": "/items/%31?a=1", "SERVER_PROTOCOL": "HTTP/1.1", "wsgi.url_scheme": "http",
    "HTTP_HOST": "example.com", "HTTP_X_REQUEST_ID": "abc", "CONTENT_TYPE": "text/plain", "CONTENT_LENGTH": "3",
}


def test_gunicorn_request_is_made_from_the_environ() -> None:
    request = hooks.GunicornRequest(ENVIRON)
    assert (request.method, request.uri, request.path, request.query) == ("POST", "/items/%31?a=1", "/items/%31", "a=1")
    assert request.version == (1, 1) and request.scheme == "http"
    assert request.headers == [("HOST", "example.com"), ("X-REQUEST-ID", "abc"), ("CONTENT-TYPE", "text/plain"),
                               ("CONTENT-LENGTH", "3")]
    bare = hooks.GunicornRequest({"REQUEST_METHOD": "GET", "SCRIPT_NAME": "/api", "PATH_INFO": "/x",
                                  "QUERY_STRING": "", "SERVER_PROTOCOL": "HTTP/1.0"})
    assert (bare.uri, bare.path, bare.version) == ("/api/x", "/api/x", (1, 0))
    absolute = hooks.GunicornRequest({**ENVIRON, "RAW_URI": "http://example.com/a/b?c=d"})
    assert (absolute.uri, absolute.path) == ("http://example.com/a/b?c=d", "/a/b")
    assert hooks.GunicornRequest({**ENVIRON, "RAW_URI": "http://example.com"}).path == "/"


def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("201 Created", [("Content-Type", "text/plain")])
    return [b"hello", b" world"]


def run(wrapped: Any) -> tuple[str, bytes]:
    seen: list[str] = []
    body = wrapped(dict(ENVIRON), lambda status, headers, exc_info=None: seen.append(status))
    data = b"".join(body)
    getattr(body, "close", lambda: None)()
    return seen[0], data


def test_request_hooks_get_gunicorn_shaped_req_and_resp() -> None:
    record: list[object] = []

    def pre_request(worker: Any, req: Any) -> None:
        record.append(("pre", req.method, req.path))

    def post_request(worker: Any, req: Any, environ: Any, resp: Any) -> None:
        record.append(("post", req.path, environ["PATH_INFO"], resp.status, resp.status_code, resp.headers, resp.sent))

    worker = hooks.WorkerView(pid=2, slot=0, generation=1, mpm="prefork")
    loaded = hooks.Hooks({"pre_request": pre_request, "post_request": post_request}, "f.py", gunicorn=True)
    assert run(hooks.wrap_app(app, loaded, worker)) == ("201 Created", b"hello world")
    assert record == [("pre", "POST", "/items/%31"),
                      ("post", "/items/%31", "/items/1", "201 Created", 201, [("Content-Type", "text/plain")], 11)]


def test_post_request_gets_as_many_arguments_as_it_takes() -> None:
    record: list[int] = []
    worker = hooks.WorkerView(pid=2, slot=0, generation=1, mpm="prefork")
    for function in (lambda w, r: record.append(2), lambda w, r, e: record.append(3),
                     lambda w, r, e, resp: record.append(4), lambda *args: record.append(len(args))):
        run(hooks.wrap_app(app, hooks.Hooks({"post_request": function}, "f.py", gunicorn=True), worker))
    assert record == [2, 3, 4, 4]


def test_a_failing_gunicorn_pre_request_answers_500_without_the_app() -> None:
    def pre_request(worker: Any, req: Any) -> None:
        raise RuntimeError(req.path)

    worker = hooks.WorkerView(pid=2, slot=0, generation=1, mpm="prefork")
    wrapped = hooks.wrap_app(app, hooks.Hooks({"pre_request": pre_request}, "f.py", gunicorn=True), worker)
    assert run(wrapped) == ("500 Internal Server Error", hooks.PRE_REQUEST_FAILED)


def test_a_gunicorn_file_given_as_hooks_says_its_settings_are_not_read(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write(tmp_path, "import os\nworkers = 3\nbind = '127.0.0.1:1'\ndef post_fork(server, worker):\n    pass\n")
    with caplog.at_level("WARNING", logger="tines.hooks"):
        loaded = hooks.load(path)
    assert list(loaded.functions) == ["post_fork"] and not loaded.gunicorn
    assert [record.getMessage() for record in caplog.records] == [
        f"hooks {path!r} sets gunicorn settings (workers, bind), which a hooks module does not read: "
        "name a gunicorn config file with -c (docs/hooks.md)"]
