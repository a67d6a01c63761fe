"""``log_config`` (tines.logs): reading and checking the file in the master, applying it in a
worker, and the handler an app's root logger gets when it has none."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tines import logs
from tines.config import load
from tines.errors import ConfigError

DICT_CONFIG = {
    "version": 1,
    "disable_existing_loggers": True,
    "formatters": {"plain": {"format": "APP %(levelname)s %(name)s %(message)s"}},
    "handlers": {"file": {"class": "logging.FileHandler", "formatter": "plain", "filename": "PLACEHOLDER"}},
    "root": {"level": "INFO", "handlers": ["file"]},
}

INI = textwrap.dedent("""\
    [loggers]
    keys=root

    [handlers]
    keys=file

    [formatters]
    keys=plain

    [logger_root]
    level=INFO
    handlers=file

    [handler_file]
    class=FileHandler
    formatter=plain
    args=('{path}', 'a')

    [formatter_plain]
    format=INI %(levelname)s %(message)s
    """)


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_json_yaml_and_ini_are_told_apart_by_their_suffix(tmp_path: Path) -> None:
    as_json = write(tmp_path / "log.json", json.dumps(DICT_CONFIG))
    as_yaml = write(tmp_path / "log.yaml", "version: 1\nroot:\n  level: INFO\n")
    as_yml = write(tmp_path / "log.yml", "version: 1\n")
    as_ini = write(tmp_path / "log.ini", INI.format(path=tmp_path / "out.log"))
    assert logs.read_config(as_json) == DICT_CONFIG
    assert logs.read_config(as_yaml) == {"version": 1, "root": {"level": "INFO"}}
    assert logs.read_config(as_yml) == {"version": 1}
    assert logs.read_config(as_ini) is None


@pytest.mark.parametrize(("name", "text", "message"), [
    ("log.json", "{", "not JSON: Expecting property name enclosed in double quotes (line 1, column 2)"),
    ("log.json", "[1, 2]", "a dictConfig must be a mapping, got list"),
    ("log.json", '{"root": {}}', 'a dictConfig needs "version": 1 (the only version logging.config knows), got None'),
    ("log.yaml", "version: [1", "not YAML:"),
    ("log.ini", "keys=root\n", "not an ini file for logging.config.fileConfig: File contains no section headers."),
    ("log.conf", "[loggers]\nkeys=root\n", "needs the sections [formatters], [handlers]"),
])
def test_a_file_that_is_no_logging_config_is_one_line(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = write(tmp_path / name, text)
    with pytest.raises(ConfigError) as raised:
        logs.read_config(path)
    assert str(raised.value).startswith(f"log_config {path!r}: ")
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_a_missing_file_names_it(tmp_path: Path) -> None:
    path = str(tmp_path / "nope.json")
    with pytest.raises(ConfigError, match=r"log_config '.*nope.json': cannot read it: \[Errno 2\]"):
        logs.read_config(path)


def test_the_setting_is_made_absolute_from_the_start_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = load({"app": "app:app", "log_config": "conf/log.json"}, {})
    assert cfg.log_config == str(tmp_path / "conf" / "log.json")
    assert load({"app": "app:app"}, {}).log_config is None


def run_child(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter: applying a logging config changes the process's logging
    for good, so each test does it in a process of its own."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=60, check=False)


def test_a_dict_config_is_applied_and_tines_loggers_stay_enabled(tmp_path: Path) -> None:
    out = tmp_path / "app.log"
    config = dict(DICT_CONFIG, handlers={"file": dict(DICT_CONFIG["handlers"]["file"], filename=str(out))})  # type: ignore[call-overload]
    path = write(tmp_path / "log.json", json.dumps(config))
    child = run_child(f"""
        import logging
        from tines import logs
        logs.configure("-", "info")
        tines_logger = logs.get("worker")
        existing = logging.getLogger("some.library")
        logs.apply_config({path!r})
        logging.getLogger("myapp").info("from the app")
        tines_logger.info("from tines")
        existing.warning("disabled by the config")
        print(logs.handle_app_records())
    """)
    assert child.returncode == 0, child.stderr
    assert out.read_text() == "APP INFO myapp from the app\n"
    assert "[INFO] from tines" in child.stderr  # the error log, in its format
    assert "disabled by the config" not in child.stderr + out.read_text()
    assert child.stdout == "False\n"  # the config gave the root a handler


def test_an_ini_config_is_applied(tmp_path: Path) -> None:
    out = tmp_path / "app.log"
    path = write(tmp_path / "logging.conf", INI.format(path=out))
    child = run_child(f"""
        import logging
        from tines import logs
        logs.apply_config({path!r})
        logging.getLogger("myapp").warning("from the app")
    """)
    assert child.returncode == 0, child.stderr
    assert out.read_text() == "INI WARNING from the app\n"


def test_a_config_logging_refuses_is_one_line(tmp_path: Path) -> None:
    config = {"version": 1, "handlers": {"h": {"class": "uvicorn_is_not_here.Handler"}}, "root": {"handlers": ["h"]}}
    path = write(tmp_path / "log.json", json.dumps(config))
    with pytest.raises(ConfigError) as raised:
        logs.read_config(path)  # the master's check reads it: the shape is right
        logs.apply_config(path)
    assert str(raised.value) == (f"log_config {path!r}: logging refused it: Unable to configure handler 'h': "
                                 "Cannot resolve 'uvicorn_is_not_here.Handler': No module named 'uvicorn_is_not_here'")
    assert "\n" not in str(raised.value)


def test_an_app_without_a_root_handler_gets_one_in_the_error_log_format() -> None:
    child = run_child("""
        import logging
        from tines import logs
        print(logs.handle_app_records(), logs.handle_app_records())
        logging.getLogger("myapp").warning("hello %s", "there")
    """)
    assert child.returncode == 0, child.stderr
    assert child.stdout == "True False\n"  # added once
    line = child.stderr.strip()
    assert line.startswith("[") and line.endswith(f"] [{line.split('] [')[1]}] [WARNING] hello there")
    assert " +0000] [" in line


def test_an_app_that_configured_logging_is_left_alone() -> None:
    child = run_child("""
        import logging
        from tines import logs
        logging.basicConfig(format="MINE %(message)s")
        print(logs.handle_app_records())
        logging.getLogger("myapp").warning("hello")
    """)
    assert child.returncode == 0, child.stderr
    assert child.stdout == "False\n"
    assert child.stderr == "MINE hello\n"


def test_the_master_checks_the_file_before_the_first_fork(tmp_path: Path) -> None:
    path = write(tmp_path / "log.json", "{}")
    app = tmp_path / "app.py"
    app.write_text("def app(environ, start_response):\n    return []\n")
    child = subprocess.run([sys.executable, "-m", "tines", "serve", "app:app", "--bind", "127.0.0.1:0",
                            "--log-config", path], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                           check=False, env=dict(os.environ, PYTHONPATH=str(tmp_path)))
    assert child.returncode == 2
    assert child.stderr.strip().splitlines()[-1] == (
        f"tines: error: log_config {path!r}: a dictConfig needs \"version\": 1 "
        "(the only version logging.config knows), got None")


def test_a_yaml_file_without_pyyaml_says_what_to_do(tmp_path: Path) -> None:
    path = write(tmp_path / "log.yaml", "version: 1\n")
    child = run_child(f"""
        import sys
        sys.modules["yaml"] = None  # not installed
        from tines import logs
        from tines.errors import ConfigError
        try:
            logs.read_config({path!r})
        except ConfigError as error:
            print(error)
    """)
    assert child.stdout == f"log_config {path!r}: a YAML file needs PyYAML (pip install pyyaml), or write it as JSON\n"


@pytest.mark.parametrize("args, raised", [("(nowhere, 'a')", "NameError: name 'nowhere' is not defined"),
                                          ("('unclosed", "SyntaxError: ")])
def test_an_ini_whose_args_do_not_evaluate_is_one_line_not_a_crash(tmp_path: Path, args: str, raised: str) -> None:
    # fileConfig eval()s a handler's args: what that raises is the config's fault, a boot error
    # (ConfigError, one line) and not a worker crashing with a traceback.
    path = write(tmp_path / "logging.conf", INI.replace("args=('{path}', 'a')", f"args={args}"))
    child = run_child(f"""
        from tines import logs
        from tines.errors import ConfigError
        try:
            logs.apply_config({path!r})
        except ConfigError as error:
            print(error)
    """)
    assert child.returncode == 0, child.stderr
    assert child.stdout.startswith(f"log_config {path!r}: logging refused it: {raised}"), child.stdout
    assert child.stdout.count("\n") == 1


def test_a_config_leaves_the_loggers_a_preloaded_app_made_enabled(tmp_path: Path) -> None:
    out = tmp_path / "app.log"
    config = dict(DICT_CONFIG, handlers={"file": dict(DICT_CONFIG["handlers"]["file"], filename=str(out))})  # type: ignore[call-overload]
    path = write(tmp_path / "log.json", json.dumps(config))
    child = run_child(f"""
        import logging
        from tines import logs
        before = logs.logger_names()
        library = logging.getLogger("some.library")  # made before the app: the config disables it
        app = logging.getLogger("myapp.views")  # made by the app's import (in the master, with preload)
        made_by_app = logs.logger_names() - before - {{"some.library"}}
        print(sorted(made_by_app))
        logs.apply_config({path!r}, made_by_app)
        app.info("from the app")
        library.warning("disabled by the config")
    """)
    assert child.returncode == 0, child.stderr
    assert child.stdout == "['myapp.views']\n"  # not "myapp": a placeholder, no logger
    assert out.read_text() == "APP INFO myapp.views from the app\n"
