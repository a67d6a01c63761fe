"""The ``root_path`` setting's values (ADR 0040): what is taken, from each source, and what is
refused with which reason (the serve command's one line for it is an e2e test:
tests/python/e2e/test_root_path.py)."""

from __future__ import annotations

import re

import pytest

from tines.config import load
from tines.config.validators import root_path


@pytest.mark.parametrize("value", ["", "/api", "/a/b-c_d.e~f", "/v1/api"])
def test_a_prefix_or_nothing_is_taken(value: str) -> None:
    assert root_path(value) == value


@pytest.mark.parametrize(("value", "says"), [
    ("api", "must start with /"),
    ("/api/", "must not end with / (use '/api')"),
    ("/", 'must not end with / (use "")'),
    ("/a b", "without spaces, ?, # or %"),
    ("/a?b", "without spaces, ?, # or %"),
    ("/a%2Fb", "without spaces, ?, # or %"),
    ("/caf\u00e9", "printable ASCII"),
    (5, "must be a string"),
])
def test_anything_else_is_refused_saying_why(value: object, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        root_path(value)


def test_the_default_is_none_and_each_source_sets_it() -> None:
    assert load({}, {}).root_path == ""
    assert load({"root_path": "/api"}, {}).root_path == "/api"
