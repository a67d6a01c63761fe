"""``myproject.wsgi:application``, as Django lays it out: a WSGI app that answers every path
with what it saw (``SCRIPT_NAME``, ``PATH_INFO``, scheme, client) as JSON."""

import json


def application(environ, start_response):
    """Answer with the request as the app saw it."""
    body = json.dumps({"interface": "wsgi", "script_name": environ.get("SCRIPT_NAME", ""),
                       "path_info": environ.get("PATH_INFO", ""), "scheme": environ["wsgi.url_scheme"],
                       "client": environ.get("REMOTE_ADDR")}).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]
