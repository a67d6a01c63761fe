"""A WSGI app with a module-level logger (``module_logger``), as most apps have: it logs a
warning as it is imported (``a record at import``) and one per request (``a record from the
app, pid N``)."""

import logging
import os

log = logging.getLogger("module_logger")
log.warning("a record at import")


def app(environ, start_response):
    log.warning("a record from the app, pid %d", os.getpid())
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [str(os.getpid()).encode()]
