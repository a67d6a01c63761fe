"""A hooks module that writes the modules a process holds, as a sorted JSON list, to
``$TINES_TEST_CENSUS_DIR/<hook>-<pid>.json``: ``pre_fork`` in the master (what each fork
copies), ``post_worker_init`` in a worker (what it holds once the app is loaded, before it
serves). Written to a temporary name, then renamed: a reader sees the whole list or nothing."""

import json
import os
import sys


def _census(hook):
    directory = os.environ["TINES_TEST_CENSUS_DIR"]
    path = os.path.join(directory, f"{hook}-{os.getpid()}.json")
    with open(path + ".tmp", "w") as handle:
        json.dump(sorted(sys.modules), handle)
    os.rename(path + ".tmp", path)


def pre_fork(server, worker):
    _census("pre_fork")


def post_worker_init(worker):
    _census("post_worker_init")
