"""Errors that end the program with one line for the user.

Each exception's ``str()`` is a complete, one-line message (no trailing period, no newline) that
``tines.cli`` prints as ``tines: error: <message>`` before exiting with status 2. Anything longer
(a traceback) rides along in an attribute so the caller can log it separately.
"""

from __future__ import annotations


class TinesError(Exception):
    """Base of the errors that are the user's to fix; ``str(error)`` is one line."""


class ConfigError(TinesError):
    """A setting, the config file or the command line is wrong.

    The message names the setting and where the bad value came from, e.g.
    ``TINES_WORKERS: workers must be a positive integer, got 'x'``.
    """


class AppLoadError(TinesError):
    """The APP spec could not be turned into a WSGI callable.

    ``traceback`` holds the formatted traceback when the failure was an exception raised by the
    user's code (while importing the module or calling the factory), else ``None``.
    """

    def __init__(self, message: str, traceback: str | None = None) -> None:
        super().__init__(message)
        self.traceback = traceback
