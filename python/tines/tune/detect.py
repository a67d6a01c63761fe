"""``python -m tines.tune.detect APP [SERVE FLAGS...]``: check the app as ``serve`` would and say
what it is, in a process of its own (the tuner never imports the user's app).

Prints one JSON line ``{"interface": "wsgi"|"asgi3"|"asgi2"}``; on a bad flag, config or app,
the one ``tines: error: ...`` line (with the app's traceback before it) and exit status 2, as
``tines check-config --check-app`` does.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

from tines.config import load
from tines.errors import AppLoadError, ConfigError
from tines.serve_cli import EXIT_USAGE, check_config, serve_parser


def main(argv: Sequence[str]) -> int:
    parser = serve_parser()
    arguments, unknown = parser.parse_known_args(list(argv))
    if unknown:
        parser.error("unrecognized arguments: " + " ".join(unknown))
    try:
        cfg = load(arguments)
        os.environ.update(parser.peer_environ)  # the app's (-e, --env-file), as `tines serve` sets it
        from tines.tune.plan import OVERRIDES, SPOILING_FLAGS

        for flag, why in SPOILING_FLAGS.items():
            name = flag[2:].replace("-", "_")
            source = cfg.source(name)
            if flag in OVERRIDES or source == "default" or cfg.value(name) in (None, 0, False, ""):
                continue  # recycling and reload: every server gets them off on its command line
            raise ConfigError(f"{name} ({source}) would spoil the measurements ({why}); leave it out "
                              "while tuning (after --, '-c /dev/null' leaves a config file out)")
        if cfg.chdir:
            os.chdir(cfg.chdir)
        check_config(cfg, check_app=True)
        from tines.app_loader import interface_of, load_app

        assert cfg.app is not None
        app = load_app(cfg.app, cfg.factory, cfg.interface)
        interface = interface_of(app, cfg.interface, repr(str(cfg.app)))
    except (ConfigError, AppLoadError) as error:
        print(f"tines: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps({"interface": interface}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
