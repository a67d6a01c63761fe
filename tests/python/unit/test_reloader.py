"""tines.reloader's pure parts, on real inotify events from real directories: decoding
``struct inotify_event`` records, the include/exclude globs, what an editor's save notes as
changed, and which directory ``--reload`` watches (tines.app_loader.source_directory)."""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tines import reloader
from tines.app_loader import source_directory
from tines.config import SETTINGS, ignored_settings, load
from tines.reloader import (EVENT_HEADER, IN_CLOSE_WRITE, IN_CREATE, IN_DELETE, IN_ISDIR, IN_MOVED_FROM,
                            IN_MOVED_TO, IN_Q_OVERFLOW, WATCH_MASK, Globs, Inotify, SourceWatcher, decode_events)

APP = 'VERSION = "one"\n\ndef app(environ, start_response):\n    start_response("200 OK", [])\n    return [VERSION.encode()]\n'


@pytest.fixture
def inotify() -> Iterator[Inotify]:
    instance = Inotify()
    yield instance
    instance.close()


def read_raw(instance: Inotify) -> bytes:
    """One read of everything queued now (the events of finished file operations are queued
    by the time the operation returns)."""
    return os.read(instance.fd, reloader.READ_SIZE)


# ----- decoding ----------------------------------------------------------------------------------


def test_one_read_decodes_several_real_events_in_order(tmp_path: Path, inotify: Inotify) -> None:
    watch = inotify.add_watch(str(tmp_path), WATCH_MASK)
    (tmp_path / "a.py").write_text("x = 1\n")
    os.rename(tmp_path / "a.py", tmp_path / "a-much-longer-name-than-sixteen-bytes.py")
    (tmp_path / "sub").mkdir()
    os.unlink(tmp_path / "a-much-longer-name-than-sixteen-bytes.py")
    data = read_raw(inotify)
    events = decode_events(data)
    assert [(e.watch, e.name) for e in events] == [
        (watch, "a.py"), (watch, "a.py"), (watch, "a.py"),
        (watch, "a-much-longer-name-than-sixteen-bytes.py"), (watch, "sub"),
        (watch, "a-much-longer-name-than-sixteen-bytes.py")]
    assert [e.mask for e in events] == [IN_CREATE, IN_CLOSE_WRITE, IN_MOVED_FROM, IN_MOVED_TO,
                                        IN_CREATE | IN_ISDIR, IN_DELETE]
    # The two halves of the rename share their cookie; other events have none.
    assert events[2].cookie == events[3].cookie != 0 and events[0].cookie == 0
    # The kernel pads names with NULs: the records are longer than header + name.
    assert len(data) > sum(EVENT_HEADER.size + len(e.name) for e in events)


def test_a_truncated_record_is_an_error_not_a_shorter_list(tmp_path: Path, inotify: Inotify) -> None:
    inotify.add_watch(str(tmp_path), WATCH_MASK)
    (tmp_path / "a.py").write_text("")
    data = read_raw(inotify)
    assert len(decode_events(data)) == 2
    with pytest.raises(ValueError, match="runs past the end"):
        decode_events(data[:-1])
    with pytest.raises(ValueError, match="truncated inotify event header"):
        decode_events(data + data[:EVENT_HEADER.size - 1])
    assert decode_events(b"") == []


def test_an_overflowed_queue_is_one_record_with_no_watch(tmp_path: Path, inotify: Inotify) -> None:
    with open("/proc/sys/fs/inotify/max_queued_events") as limit:
        queued = int(limit.read())
    if queued > 100_000:
        pytest.skip(f"max_queued_events is {queued}: too many files to overflow it")
    inotify.add_watch(str(tmp_path), WATCH_MASK)
    for number in range(queued // 2 + 1):  # IN_CREATE and IN_CLOSE_WRITE each
        (tmp_path / f"{number}.txt").write_bytes(b"")
    events = inotify.read()
    assert len(events) == queued + 1
    assert events[-1].mask == IN_Q_OVERFLOW and events[-1].watch == -1 and events[-1].name == ""
    assert not any(e.mask & IN_Q_OVERFLOW for e in events[:-1])


# ----- globs -------------------------------------------------------------------------------------

DEFAULTS = Globs(SETTINGS["reload_include"].default_value(), SETTINGS["reload_exclude"].default_value())  # type: ignore[arg-type]


@pytest.mark.parametrize("path", ["app.py", "pkg/module.py", "pkg/sub/__init__.py"])
def test_python_files_anywhere_in_the_tree_are_wanted_by_default(path: str) -> None:
    assert DEFAULTS.wants_file(path)


@pytest.mark.parametrize("path", [
    ".app.py.swp", "app.py~", "4913", "notes.txt", "app.pyc", ".hidden.py", "pkg/.#module.py",
    "__pycache__/app.cpython-311.pyc", "pkg/app.py.orig"])
def test_editor_leftovers_and_other_files_are_not_wanted_by_default(path: str) -> None:
    assert not DEFAULTS.wants_file(path)


@pytest.mark.parametrize("directory", ["__pycache__", ".git", ".venv", "venv", "node_modules", "pkg/__pycache__"])
def test_caches_environments_and_hidden_directories_are_not_watched(directory: str) -> None:
    assert DEFAULTS.skips_directory(directory)


def test_a_glob_matches_a_name_or_a_path_relative_to_the_tree() -> None:
    globs = Globs(("*.py", "templates/*.html"), ("migrations",))
    assert globs.wants_file("templates/index.html")
    assert not globs.wants_file("static/index.html")
    assert globs.skips_directory("app/migrations") and not globs.skips_directory("app")
    # Exclusion wins over inclusion.
    assert not Globs(("*.py",), ("settings_local.py",)).wants_file("site/settings_local.py")


# ----- what a save notes -------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    directory = tmp_path / "project"
    directory.mkdir()
    (directory / "app.py").write_text(APP)
    (directory / "__pycache__").mkdir()
    return directory


@pytest.fixture
def watcher(project: Path) -> Iterator[tuple[SourceWatcher, list[str]]]:
    reloads: list[str] = []
    cfg = load({"app": f"{project / 'app.py'}:app", "reload": True}, environ={})
    instance = SourceWatcher(cfg, logging.getLogger("test.reload"), lambda: reloads.append("reload"))
    yield instance, reloads
    instance.close()


def settle(watcher: SourceWatcher) -> None:
    """Read what is queued, then poll until the quiet period is over and act."""
    watcher.read()
    due = watcher.due
    assert due is not None, "nothing noted"
    while time.monotonic() < due:
        time.sleep(0.01)
    watcher.check()


def test_an_editors_save_through_a_temporary_file_notes_only_the_saved_file(
        project: Path, watcher: tuple[SourceWatcher, list[str]]) -> None:
    instance, reloads = watcher
    # vim's sequence: probe file 4913, original renamed to a backup, new file written, backup gone.
    (project / "4913").write_text("")
    os.unlink(project / "4913")
    os.rename(project / "app.py", project / "app.py~")
    (project / "app.py").write_text(APP.replace("one", "two"))
    os.unlink(project / "app.py~")
    (project / ".app.py.swp").write_text("swap")
    (project / "__pycache__" / "app.cpython-311.pyc").write_bytes(b"")
    instance.read()
    assert list(instance.changed) == [str(project / "app.py")]
    settle(instance)
    assert reloads == ["reload"] and not instance.changed and instance.due is None


def test_a_syntax_error_holds_the_reload_until_a_save_that_compiles(
        project: Path, watcher: tuple[SourceWatcher, list[str]], caplog: pytest.LogCaptureFixture) -> None:
    instance, reloads = watcher
    (project / "app.py").write_text("def broken(:\n")
    with caplog.at_level(logging.ERROR, logger="test.reload"):
        settle(instance)
    assert reloads == []
    assert "reload: app.py: syntax error; the old code keeps serving until the next save" in caplog.text
    assert "SyntaxError" in caplog.text
    # Another file saved while app.py is still broken: still no reload.
    (project / "other.py").write_text("x = 1\n")
    settle(instance)
    assert reloads == []
    (project / "app.py").write_text(APP)
    with caplog.at_level(logging.INFO, logger="test.reload"):
        settle(instance)
    assert reloads == ["reload"]
    assert "reload: 2 file(s) changed (app.py, other.py): reloading" in caplog.text


def test_a_directory_created_later_is_watched_and_its_files_count(
        project: Path, watcher: tuple[SourceWatcher, list[str]]) -> None:
    instance, reloads = watcher
    (project / "pkg" / "deep").mkdir(parents=True)
    (project / "pkg" / "deep" / "module.py").write_text("x = 1\n")
    settle(instance)
    assert reloads == ["reload"]
    assert str(project / "pkg" / "deep") in instance.watches
    (project / "pkg" / "deep" / "module.py").write_text("x = 2\n")
    instance.read()
    assert list(instance.changed) == [str(project / "pkg" / "deep" / "module.py")]


def test_a_directory_moved_away_is_a_change_and_is_no_longer_watched(
        project: Path, tmp_path: Path, watcher: tuple[SourceWatcher, list[str]]) -> None:
    instance, _ = watcher
    (project / "pkg").mkdir()
    instance.read()
    assert str(project / "pkg") in instance.watches and not instance.changed
    os.rename(project / "pkg", tmp_path / "elsewhere")
    instance.read()
    assert list(instance.changed) == [str(project / "pkg") + os.sep]
    assert str(project / "pkg") not in instance.watches
    (tmp_path / "elsewhere" / "module.py").write_text("")
    instance.read()
    assert list(instance.changed) == [str(project / "pkg") + os.sep]


# ----- which tree ----------------------------------------------------------------------------------


@pytest.fixture
def search_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A current directory with a module and a package in it, and a package elsewhere on sys.path."""
    here = tmp_path / "here"
    (here / "site" / "pkg").mkdir(parents=True)
    (here / "site" / "__init__.py").write_text("")
    (here / "site" / "pkg" / "__init__.py").write_text("")
    (here / "single.py").write_text("")
    installed = tmp_path / "installed"
    (installed / "library").mkdir(parents=True)
    (installed / "library" / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (installed / "alone.py").write_text("raise RuntimeError('imported')\n")
    monkeypatch.chdir(here)
    monkeypatch.setattr(sys, "path", [str(installed), *sys.path])
    return tmp_path


def test_a_file_spec_watches_the_files_directory(search_path: Path) -> None:
    assert source_directory("../installed/alone.py:app") == str(search_path / "installed")


def test_a_module_or_package_in_the_current_directory_watches_the_current_directory(search_path: Path) -> None:
    assert source_directory("single:app") == str(search_path / "here")
    assert source_directory("site.pkg.wsgi:application") == str(search_path / "here")


def test_a_package_found_elsewhere_watches_only_its_own_directory(search_path: Path) -> None:
    # Found without importing it (its __init__ raises).
    assert source_directory("library.wsgi:app") == str(search_path / "installed" / "library")
    assert source_directory("alone") == str(search_path / "installed")
    assert "library" not in sys.modules


def test_an_unknown_module_watches_the_current_directory(search_path: Path) -> None:
    assert source_directory("no_such_module:app") == str(search_path / "here")


def test_reload_globs_without_reload_are_named_as_ignored() -> None:
    cfg = load({"app": "a:app", "reload_include": "*.html"}, environ={})
    assert ignored_settings(cfg) == ["reload_include (cli) is ignored without reload (--reload)"]
    assert ignored_settings(load({"app": "a:app", "reload": True, "reload_include": "*.html"}, environ={})) == []
