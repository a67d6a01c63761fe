"""The blog from TreeFrog's tutorial ("blogapp"), in Flask + SQLite.

Serve it with ``tines serve examples/blog/app.py:app`` (or ``make serve`` from the repo root).

A ``blog`` table (id, title, body, created_at, updated_at, lock_revision) and the scaffolded
CRUD pages:

    GET  /                      302 -> /blog/
    GET  /blog/                 index, newest first
    GET  /blog/<id>             show (404 if missing)
    GET  /blog/create           entry form
    POST /blog/create           create -> 303 to the new post; invalid -> 422
    GET  /blog/<id>/edit        edit form (carries the post's lock_revision)
    POST /blog/<id>/edit        save -> 303; invalid -> 422; stale lock_revision -> 409
    GET  /blog/<id>/delete      confirmation page
    POST /blog/<id>/delete      delete -> 303 to /blog/

Every POST must carry a CSRF token (hidden field ``csrf_token``) matching the ``blog_csrf``
cookie; otherwise 403. See README.md.

Database connections: one per worker *thread*, never carried across fork (``blog_db.py``);
``tines_hooks.py`` opens each worker's in ``post_fork`` (``make serve`` passes ``--hooks``), and
any other thread opens its own on first use. Apart from that thread-local there is no mutable
global state, so the app may be imported in a master and then forked, and run with any number
of processes and threads.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import sqlite3

from flask import Flask, abort, g, redirect, render_template, request, url_for

# By name: this file's directory is on sys.path (Tines puts it there to load this file), and the
# hooks module imports the same module, so both use the same connections.
from blog_db import db
from blog_db import now as _now
from blog_db import secret as _secret

HERE = os.path.dirname(os.path.abspath(__file__))

TITLE_MAX = 200
BODY_MAX = 20_000
INDEX_LIMIT = 50

CSRF_COOKIE = "blog_csrf"
CSRF_FIELD = "csrf_token"

# Messages shown after a redirect (``?notice=created``); only these fixed strings are ever shown,
# the query parameter is never echoed.
NOTICES = {
    "created": "Created successfully.",
    "updated": "Updated successfully.",
    "deleted": "Deleted successfully.",
}

# root_path is explicit because a server may load this file by path under any module name.
# static/ is served by Tines' mount (`--static /static=examples/blog/static`, as `make serve`
# runs it) without entering Python; Flask's own static route answers only without the mount.
app = Flask(__name__, root_path=HERE)
app.config["MAX_CONTENT_LENGTH"] = 1 << 20


# --------------------------------------------------------------------------- database


def get_post(post_id: int) -> sqlite3.Row:
    row = db().execute("SELECT * FROM blog WHERE id = ?", (post_id,)).fetchone()
    if row is None:
        abort(404)
    return row


# --------------------------------------------------------------------------- CSRF
#
# Signed double-submit cookie: a random ``blog_csrf`` cookie (HttpOnly, SameSite=Lax) and, in
# every form, the hidden field HMAC(secret, cookie). Another site can neither read the cookie
# nor compute the HMAC, so it cannot forge a POST. Pages without forms set no cookie, so the
# index and show pages stay cookie-free.


def _csrf_cookie() -> str:
    value = getattr(g, "csrf_cookie", None)
    if value is None:
        value = request.cookies.get(CSRF_COOKIE, "")
        if len(value) != 32 or not all(c in "0123456789abcdef" for c in value):
            value = secrets.token_hex(16)
            g.set_csrf_cookie = True
        g.csrf_cookie = value
    return value


def _sign(value: str) -> str:
    return hmac.new(_secret(), b"csrf|" + value.encode(), hashlib.sha256).hexdigest()


def csrf_token() -> str:
    return _sign(_csrf_cookie())


app.jinja_env.globals["csrf_token"] = csrf_token
app.jinja_env.globals["CSRF_FIELD"] = CSRF_FIELD


@app.before_request
def check_csrf():
    # Unknown URLs and wrong methods get their 404/405 rather than a 403.
    if request.method != "POST" or request.routing_exception is not None:
        return None
    cookie = request.cookies.get(CSRF_COOKIE, "")
    sent = request.form.get(CSRF_FIELD, "")
    if not cookie or not sent or not hmac.compare_digest(sent, _sign(cookie)):
        return render_template("error.html", status=403,
                               message="Invalid or missing CSRF token: reload the form and try again."), 403
    return None


@app.after_request
def headers(response):
    if getattr(g, "set_csrf_cookie", False):
        response.set_cookie(CSRF_COOKIE, g.csrf_cookie, httponly=True, samesite="Lax", path="/")
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault(
        "Content-Security-Policy",
        "default-src 'none'; style-src 'self'; form-action 'self'; frame-ancestors 'none'",
    )
    return response


# --------------------------------------------------------------------------- forms


def _form() -> tuple[dict, list[str]]:
    data = {
        "title": request.form.get("title", "").strip(),
        "body": request.form.get("body", "").replace("\r\n", "\n"),
    }
    errors = []
    if not data["title"]:
        errors.append("Title is required.")
    elif len(data["title"]) > TITLE_MAX:
        errors.append(f"Title must be at most {TITLE_MAX} characters.")
    if not data["body"].strip():
        errors.append("Body is required.")
    elif len(data["body"]) > BODY_MAX:
        errors.append(f"Body must be at most {BODY_MAX} characters.")
    return data, errors


# Invalid input is answered 422 Unprocessable Content (RFC 9110 §15.5.21): the request was
# well-formed HTTP and understood, but its content cannot be processed. 400 would claim the
# syntax was malformed; 200 would tell clients, tests and benchmarks that the write succeeded.
INVALID = 422
# A save based on an old lock_revision is refused with 409 Conflict (RFC 9110 §15.5.10).
CONFLICT = 409


# --------------------------------------------------------------------------- pages


@app.get("/")
def root():
    return redirect(url_for("index"))


@app.get("/blog/")
def index():
    rows = db().execute(
        "SELECT id, title, created_at, updated_at FROM blog"
        " ORDER BY created_at DESC, id DESC LIMIT ?",
        (INDEX_LIMIT + 1,),
    ).fetchall()
    return render_template("index.html", posts=rows[:INDEX_LIMIT],
                           more=len(rows) > INDEX_LIMIT, notice=NOTICES.get(request.args.get("notice", "")))


@app.get("/blog/<int:post_id>")
def show(post_id: int):
    return render_template("show.html", post=get_post(post_id),
                           notice=NOTICES.get(request.args.get("notice", "")))


@app.route("/blog/create", methods=["GET", "POST"])
def create():
    if request.method == "GET":
        return render_template("form.html", mode="create", post={"title": "", "body": ""}, errors=[])
    data, errors = _form()
    if errors:
        return render_template("form.html", mode="create", post=data, errors=errors), INVALID
    now = _now()
    cur = db().execute(
        "INSERT INTO blog (title, body, created_at, updated_at, lock_revision) VALUES (?, ?, ?, ?, 1)",
        (data["title"], data["body"], now, now),
    )
    return redirect(url_for("show", post_id=cur.lastrowid, notice="created"), 303)


@app.route("/blog/<int:post_id>/edit", methods=["GET", "POST"])
def edit(post_id: int):
    if request.method == "GET":
        post = get_post(post_id)
        return render_template("form.html", mode="edit", post=post,
                               lock_revision=post["lock_revision"], errors=[])
    data, errors = _form()
    try:
        revision = int(request.form.get("lock_revision", ""))
    except ValueError:
        revision = None
    if revision is None:
        errors.append("The form is missing its lock revision: reload it and try again.")
    if errors:
        get_post(post_id)  # 404 first if the post is gone
        return render_template("form.html", mode="edit", post={"id": post_id, **data},
                               lock_revision=revision, errors=errors), INVALID
    # Optimistic locking, as TreeFrog does it: the UPDATE only matches the revision the form
    # was rendered from, and bumps it.
    cur = db().execute(
        "UPDATE blog SET title = ?, body = ?, updated_at = ?, lock_revision = lock_revision + 1"
        " WHERE id = ? AND lock_revision = ?",
        (data["title"], data["body"], _now(), post_id, revision),
    )
    if cur.rowcount == 1:
        return redirect(url_for("show", post_id=post_id, notice="updated"), 303)
    current = get_post(post_id)  # gone -> 404; otherwise someone saved in between
    return render_template(
        "form.html", mode="edit", post=current, lock_revision=current["lock_revision"],
        errors=["This post was changed by someone else after you opened it, so your changes were "
                "not saved. The form now shows the current version; your text is below."],
        rejected=data,
    ), CONFLICT


@app.route("/blog/<int:post_id>/delete", methods=["GET", "POST"])
def delete(post_id: int):
    if request.method == "GET":
        return render_template("delete.html", post=get_post(post_id))
    cur = db().execute("DELETE FROM blog WHERE id = ?", (post_id,))
    if cur.rowcount == 0:
        abort(404)
    return redirect(url_for("index", notice="deleted"), 303)


@app.errorhandler(404)
def not_found(_e):
    return render_template("error.html", status=404, message="No such page or post."), 404


application = app
