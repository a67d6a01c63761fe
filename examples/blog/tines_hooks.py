"""Tines server hooks for the blog (``tines serve --hooks examples/blog/tines_hooks.py``).

``post_fork`` runs in each worker right after fork, before it serves: it opens that worker's
SQLite connection (creating and seeding the schema on an empty file), as Apache::DBI's
``connect_on_init`` does in each child. A database that cannot be opened makes the worker
fail to boot: at the first start Tines stops with ``tines: error: hook post_fork raised ...``.
Connections are per thread (see ``blog_db.db``): with ``prefork`` the app runs on the thread
that ran this hook, so no request opens a connection; app threads of the ``thread`` and
``event`` MPMs open theirs on their first request.
"""

import blog_db


def post_fork(server, worker):
    blog_db.db()
