"""The example blog (Flask + SQLite) served by real Tines workers, driven by httpx.

Covers what `make serve` shows a person: the index, create / show / edit (with optimistic
locking) / delete, escaping, CSRF, that several workers share one SQLite database, and that its
stylesheet is served by Tines' static mount (`--static /static=examples/blog/static`), not Flask.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[3]
BLOG = f"{ROOT / 'examples' / 'blog' / 'app.py'}:app"
HOOKS = str(ROOT / "examples" / "blog" / "tines_hooks.py")
STATIC = ROOT / "examples" / "blog" / "static"
TOKEN = re.compile(r'name="csrf_token" value="([0-9a-f]+)"')
REVISION = re.compile(r'name="lock_revision" value="(\d+)"')


@pytest.fixture(params=["prefork", "thread", "event"])
def blog(request: pytest.FixtureRequest, tines_server: Any, tmp_path: Path) -> Any:
    extra = ["-w", "2", "--mpm", request.param, "--hooks", HOOKS]
    if request.param == "thread":
        extra += ["--threads", "4"]
    return tines_server(BLOG, *extra, env={"BLOG_DB": str(tmp_path / "blog.sqlite3")})


@pytest.fixture(params=["prefork", "event"])
def blog_with_mount(request: pytest.FixtureRequest, tines_server: Any, tmp_path: Path) -> Any:
    """The blog as `make serve` runs it: its static files through the mount."""
    return tines_server(BLOG, "-w", "1", "--mpm", request.param, "--hooks", HOOKS,
                        "--static", f"/static={STATIC}",
                        env={"BLOG_DB": str(tmp_path / "blog.sqlite3")})


def token(client: httpx.Client, path: str) -> str:
    page = client.get(path)
    assert page.status_code == 200, page.text
    match = TOKEN.search(page.text)
    assert match, "the form carries a CSRF token"
    return match.group(1)


def test_index_lists_the_seed_posts_newest_first(blog: Any) -> None:
    with httpx.Client(base_url=blog.url) as client:
        assert client.get("/").status_code == 302
        index = client.get("/blog/")
        assert index.status_code == 200
        assert "Hello, Tines" in index.text
        assert "set-cookie" not in index.headers


def test_creates_shows_edits_and_deletes_a_post(blog: Any) -> None:
    with httpx.Client(base_url=blog.url) as client:
        csrf = token(client, "/blog/create")
        created = client.post("/blog/create", data={"title": "First <script>x</script>", "body": "Body text", "csrf_token": csrf})
        assert created.status_code == 303
        location = created.headers["location"]
        post_path = re.sub(r"\?.*$", "", location.replace(blog.url, ""))
        shown = client.get(post_path)
        assert shown.status_code == 200
        assert "First &lt;script&gt;x&lt;/script&gt;" in shown.text
        assert "<script>x</script>" not in shown.text

        edit_page = client.get(f"{post_path}/edit")
        revision = REVISION.search(edit_page.text)
        assert revision
        saved = client.post(
            f"{post_path}/edit",
            data={"title": "Renamed", "body": "New body", "lock_revision": revision.group(1), "csrf_token": csrf},
        )
        assert saved.status_code == 303
        stale = client.post(
            f"{post_path}/edit",
            data={"title": "Stale", "body": "Stale body", "lock_revision": revision.group(1), "csrf_token": csrf},
        )
        assert stale.status_code == 409
        assert "Renamed" in client.get(post_path).text

        deleted = client.post(f"{post_path}/delete", data={"csrf_token": csrf})
        assert deleted.status_code == 303
        assert client.get(post_path).status_code == 404


def test_refuses_a_post_without_a_valid_csrf_token(blog: Any) -> None:
    with httpx.Client(base_url=blog.url) as client:
        token(client, "/blog/create")
        refused = client.post("/blog/create", data={"title": "t", "body": "b", "csrf_token": "00"})
        assert refused.status_code == 403


def test_validation_errors_rerender_the_form(blog: Any) -> None:
    with httpx.Client(base_url=blog.url) as client:
        csrf = token(client, "/blog/create")
        invalid = client.post("/blog/create", data={"title": "", "body": "b", "csrf_token": csrf})
        assert invalid.status_code == 422
        assert "Title is required." in invalid.text


def test_posts_written_through_one_connection_are_seen_on_new_connections(blog: Any) -> None:
    with httpx.Client(base_url=blog.url) as client:
        csrf = token(client, "/blog/create")
        for n in range(6):
            response = client.post("/blog/create", data={"title": f"post {n}", "body": "b", "csrf_token": csrf})
            assert response.status_code == 303
    # Fresh connections land on either worker; every one sees every post (one database).
    for _ in range(6):
        with httpx.Client(base_url=blog.url) as other:
            index = other.get("/blog/", headers={"Connection": "close"})
            assert all(f"post {n}" in index.text for n in range(6))


def test_the_blog_hooks_open_each_workers_database_at_start_and_a_bad_one_stops_the_start(tmp_path: Path) -> None:
    from test_hooks import serve_until_exit
    from test_cli_errors import assert_one_line_error

    result = serve_until_exit("-w", "1", "--hooks", HOOKS, BLOG,
                              env={"BLOG_DB": str(tmp_path / "missing-directory" / "blog.sqlite3")})
    assert_one_line_error(result, "hook post_fork raised OperationalError: unable to open database file")


def test_the_stylesheet_is_served_by_the_mount_with_its_validators(blog_with_mount: Any) -> None:
    with httpx.Client(base_url=blog_with_mount.url) as client:
        page = client.get("/blog/")
        assert page.status_code == 200
        assert '<link rel="stylesheet" href="/static/blog.css">' in page.text
        assert "style-src 'self'" in page.headers["content-security-policy"]
        css = client.get("/static/blog.css")
        assert css.status_code == 200
        assert css.content == (STATIC / "blog.css").read_bytes()
        assert css.headers["content-type"] == "text/css; charset=utf-8"
        # The mount's answer, not Flask's (whose static route says `no-cache`):
        # static_cache_control's default, and validators from the file.
        assert css.headers["cache-control"] == "public, max-age=3600"
        etag = css.headers["etag"]
        assert css.headers["last-modified"]
        again = client.get("/static/blog.css", headers={"If-None-Match": etag})
        assert again.status_code == 304 and again.content == b""
        assert again.headers["etag"] == etag
        # A miss under the mount is the mount's 404 (static_miss's default), not the app's page.
        assert client.get("/static/missing.css").status_code == 404
