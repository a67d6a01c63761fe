"""Runs the command named by the path (/true, /false) with subprocess.run and answers its
exit status: the worker must leave the app's own child processes to the app."""

import subprocess


def app(environ, start_response):
    command = environ["PATH_INFO"].strip("/")
    body = str(subprocess.run([command]).returncode).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
