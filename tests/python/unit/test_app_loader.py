"""tines.app_loader: every spec form and every one-line failure message."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tines.app_loader import interface_of, load_app
from tines.errors import AppLoadError

WSGI_APP = """
def application(environ, start_response):
    return [b"application"]

def app(environ, start_response):
    return [b"app"]

class Holder:
    def wsgi_app(self, environ, start_response):
        return [b"dotted"]

obj = Holder()
not_callable = 42

def create_app():
    return app

def broken_factory():
    return 1 / 0

def factory_of_nothing():
    return None
"""


@pytest.fixture(autouse=True)
def isolated_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Run in a fresh directory; undo sys.path and sys.modules changes afterwards."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]


def write_module(directory: Path, name: str, text: str = WSGI_APP) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def failure(spec: str, factory: bool = False, interface: str = "auto") -> AppLoadError:
    with pytest.raises(AppLoadError) as caught:
        load_app(spec, factory, interface)
    assert "\n" not in str(caught.value)
    return caught.value


def call(app: object) -> object:
    assert callable(app)
    return app({}, lambda status, headers: None)


# --- spec forms ------------------------------------------------------------------------------------


def test_module_and_attribute(tmp_path: Path) -> None:
    write_module(tmp_path, "webapp_a.py")
    assert call(load_app("webapp_a:app", False)) == [b"app"]


def test_module_alone_prefers_application_then_app(tmp_path: Path) -> None:
    write_module(tmp_path, "webapp_b.py")
    assert call(load_app("webapp_b", False)) == [b"application"]
    write_module(tmp_path, "webapp_c.py", "def app(environ, start_response):\n    return [b'app']\n")
    assert call(load_app("webapp_c", False)) == [b"app"]


def test_package_module_and_dotted_attribute(tmp_path: Path) -> None:
    write_module(tmp_path, "webpkg_d/__init__.py", "")
    write_module(tmp_path, "webpkg_d/site.py")
    assert call(load_app("webpkg_d.site:obj.wsgi_app", False)) == [b"dotted"]


def test_file_path_is_imported_under_its_stem_with_its_directory_on_sys_path(tmp_path: Path) -> None:
    write_module(tmp_path, "src/helper_e.py", "VALUE = b'from helper'\n")
    write_module(tmp_path, "src/server_e.py",
                 "import helper_e\ndef app(environ, start_response):\n    return [helper_e.VALUE]\n")
    assert call(load_app("src/server_e.py:app", False)) == [b"from helper"]
    assert sys.path[0] == str(tmp_path / "src")
    assert "server_e" in sys.modules


def test_module_form_puts_the_current_directory_on_sys_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", [entry for entry in sys.path if entry not in ("", str(tmp_path))])
    write_module(tmp_path, "webapp_f.py")
    assert call(load_app("webapp_f:app", False)) == [b"app"]


def test_factory_is_called_with_no_arguments(tmp_path: Path) -> None:
    write_module(tmp_path, "webapp_g.py")
    assert call(load_app("webapp_g:create_app", True)) == [b"app"]


# --- failures --------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["a:b:c", ":app", "mod:", "mod:1x", "bad-name:app", "mod:create_app()"])
def test_malformed_spec(spec: str) -> None:
    assert str(failure(spec)) == f"bad APP {spec!r} (expected module:attr or path/to/file.py:attr)"


def test_missing_module() -> None:
    error = failure("no_such_module_tines:app")
    assert str(error) == "cannot import 'no_such_module_tines': No module named 'no_such_module_tines'"
    assert error.traceback is None


def test_missing_submodule_of_a_missing_package() -> None:
    assert str(failure("no_such_pkg_tines.web:app")) == (
        "cannot import 'no_such_pkg_tines.web': No module named 'no_such_pkg_tines'")


def test_exception_inside_the_module_keeps_its_traceback(tmp_path: Path) -> None:
    write_module(tmp_path, "webapp_h.py", "x = 1\ny = x / 0\n")
    error = failure("webapp_h:app")
    assert str(error) == "error while importing 'webapp_h': ZeroDivisionError: division by zero"
    assert error.traceback is not None and "webapp_h.py" in error.traceback


def test_missing_dependency_of_the_app_is_an_error_inside_the_app(tmp_path: Path) -> None:
    write_module(tmp_path, "webapp_i.py", "import no_such_dependency_tines\n")
    error = failure("webapp_i:app")
    assert str(error) == ("error while importing 'webapp_i': "
                          "ModuleNotFoundError: No module named 'no_such_dependency_tines'")
    assert error.traceback is not None


def test_exception_inside_a_file_is_reported_and_unregistered(tmp_path: Path) -> None:
    write_module(tmp_path, "broken_j.py", "raise RuntimeError('boom')\n")
    assert str(failure("broken_j.py:app")) == "error while importing 'broken_j.py': RuntimeError: boom"
    assert "broken_j" not in sys.modules


def test_syntax_error_in_the_app(tmp_path: Path) -> None:
    write_module(tmp_path, "webapp_k.py", "def app(:\n")
    assert str(failure("webapp_k:app")).startswith("error while importing 'webapp_k': SyntaxError: ")


def test_file_not_found() -> None:
    assert str(failure("path/app.py:app")) == "file not found: 'path/app.py'"


def test_missing_attribute(tmp_path: Path) -> None:
    write_module(tmp_path, "webapp_l.py")
    assert str(failure("webapp_l:nope")) == "module 'webapp_l' has no attribute 'nope'"
    assert str(failure("webapp_l:obj.nope")) == "module 'webapp_l' has no attribute 'obj.nope'"


def test_module_alone_without_either_default_name(tmp_path: Path) -> None:
    write_module(tmp_path, "webapp_m.py", "wsgi = None\n")
    assert str(failure("webapp_m")) == "module 'webapp_m' has no attribute 'application' or 'app'"


def test_not_callable(tmp_path: Path) -> None:
    write_module(tmp_path, "webapp_n.py")
    assert str(failure("webapp_n:not_callable")) == "'webapp_n:not_callable' is not callable"
    assert str(failure("webapp_n:not_callable", factory=True)) == "'webapp_n:not_callable' is not callable"


def test_factory_given_without_factory_flag_is_caught(tmp_path: Path) -> None:
    write_module(tmp_path, "webapp_o.py")
    assert str(failure("webapp_o:create_app")) == (
        "'webapp_o:create_app' cannot be called as app(environ, start_response)"
        " (if it is a factory, add --factory)")


def test_factory_that_raises(tmp_path: Path) -> None:
    write_module(tmp_path, "webapp_p.py")
    error = failure("webapp_p:broken_factory", factory=True)
    assert str(error) == "factory 'webapp_p:broken_factory' raised ZeroDivisionError: division by zero"
    assert error.traceback is not None and "broken_factory" in error.traceback


def test_factory_that_returns_something_not_callable(tmp_path: Path) -> None:
    write_module(tmp_path, "webapp_q.py")
    assert str(failure("webapp_q:factory_of_nothing", factory=True)) == (
        "factory 'webapp_q:factory_of_nothing' returned NoneType, which is not callable")


ASGI_APP = """
async def function(scope, receive, send):
    pass

class Application:
    async def __call__(self, scope, receive, send):
        pass

class WsgiShaped:
    def __call__(self, environ, start_response):
        return [b"wsgi"]

instance = Application()
wsgi_instance = WsgiShaped()

def create_app():
    return Application()
"""


def test_asgi_function_and_object_with_async_call_load_as_asgi(tmp_path: Path) -> None:
    write_module(tmp_path, "webapp_asgi.py", ASGI_APP)
    for attribute in ("function", "instance"):
        app = load_app(f"webapp_asgi:{attribute}", False)
        assert interface_of(app, "auto", attribute) == "asgi3"
        assert interface_of(app, "asgi", attribute) == "asgi3"


def test_factory_returning_an_asgi_app_loads_as_asgi(tmp_path: Path) -> None:
    write_module(tmp_path, "webapp_asgi_factory.py", ASGI_APP)
    app = load_app("webapp_asgi_factory:create_app", True)
    assert interface_of(app, "auto", "create_app") == "asgi3"


def test_an_app_that_is_not_what_the_interface_setting_says_is_named(tmp_path: Path) -> None:
    write_module(tmp_path, "webapp_asgi_mismatch.py", ASGI_APP)
    assert str(failure("webapp_asgi_mismatch:function", interface="wsgi")) == (
        "'webapp_asgi_mismatch:function' is an ASGI app (async def), but interface is wsgi")
    assert str(failure("webapp_asgi_mismatch:wsgi_instance", interface="asgi")) == (
        "'webapp_asgi_mismatch:wsgi_instance' is not an ASGI 3 app (not async def); "
        "for an ASGI 2 app use interface asgi2")
    assert str(failure("webapp_asgi_mismatch:create_app", factory=True, interface="wsgi")) == (
        "factory 'webapp_asgi_mismatch:create_app''s app is an ASGI app (async def), "
        "but interface is wsgi")


def test_an_asgi2_class_loads_only_when_named_and_skips_the_wsgi_signature_check(tmp_path: Path) -> None:
    write_module(tmp_path, "webapp_asgi2.py", """
class App:
    def __init__(self, scope):
        self.scope = scope

    async def __call__(self, receive, send):
        pass
""")
    assert str(failure("webapp_asgi2:App")).endswith("cannot be called as app(environ, start_response)"
                                                    " (if it is a factory, add --factory)")
    app = load_app("webapp_asgi2:App", False, "asgi2")
    assert interface_of(app, "asgi2", "App") == "asgi2"


def test_object_with_a_plain_call_is_a_wsgi_app(tmp_path: Path) -> None:
    write_module(tmp_path, "webapp_wsgi_object.py", ASGI_APP)
    app = load_app("webapp_wsgi_object:wsgi_instance", False)
    assert app(None, None) == [b"wsgi"]  # type: ignore[call-arg]
