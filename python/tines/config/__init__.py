"""The settings: each declared once, resolved from the command line, the environment, the config
file and the defaults, in that order of precedence.

One module per concern, each importing only the ones above it:

- ``validators``: converting and checking one raw value (``positive_int``, ``size``, ...);
- ``registry``: the declaration of every setting (``SETTINGS``), from which the command-line
  flags, the environment variables, the config-file keys, the Rust worker's dict and the docs
  are derived;
- ``loading``: ``load`` (command line > environment > config file > default) and the resolved
  ``Config``;
- ``migration``: the "coming from another server" rows and ``migration_hint``;
- ``reference``: docs/settings.md (``render_markdown``; ``python -m tines.config --markdown``
  prints it).

The rest of Tines imports their public names from here (``from tines.config import Config,
load``), not from the modules.

Must not: import ``tines._core`` or anything heavy, touch sockets or fork, or keep mutable
module state.
"""

from __future__ import annotations

from tines.config.loading import (CONFIG_ENV, DEFAULT_CONFIG_FILE, Config, environment_warnings,
                                  ignored_settings, load, tomllib)
from tines.config.migration import EQUIVALENTS, Equivalent, migration_hint
from tines.config.reference import render_markdown
from tines.config.registry import ACCESS_LOG_ATOMS, SECTIONS, SETTINGS, Setting, format_value
from tines.config.validators import (MINIMAL_REQUEST, MINIMAL_REQUEST_LINE, SIZE_UNITS, bind_address,
                                     boolean, directory, group_id, head_size, header_value, network,
                                     non_negative_int, non_negative_seconds, optional_non_negative_int,
                                     optional_non_negative_seconds, optional_positive_int, optional_text,
                                     positive_int, positive_seconds, request_line_size, sample_rate, size,
                                     text, umask, user_id, window_bits)

__all__ = [
    # loading (tomllib: the TOML reader in use, tomli before 3.11, for tests that parse what tune writes)
    "CONFIG_ENV", "DEFAULT_CONFIG_FILE", "Config", "environment_warnings", "ignored_settings", "load",
    "tomllib",
    # migration and reference
    "EQUIVALENTS", "Equivalent", "migration_hint", "render_markdown",
    # registry
    "ACCESS_LOG_ATOMS", "SECTIONS", "SETTINGS", "Setting", "format_value",
    # validators
    "MINIMAL_REQUEST", "MINIMAL_REQUEST_LINE", "SIZE_UNITS", "bind_address", "boolean", "directory",
    "group_id", "head_size", "header_value", "network", "non_negative_int", "non_negative_seconds",
    "optional_non_negative_int", "optional_non_negative_seconds", "optional_positive_int",
    "optional_text", "positive_int", "positive_seconds", "request_line_size", "sample_rate", "size",
    "text", "umask", "user_id", "window_bits",
]
