"""Rust's ``WorkerConfig::default()`` (crates/server/src/config.rs), which the server's own tests
and fuzz targets start from, holds the registry's defaults (``tines.config``): each of its fields
is compared with the field that the registry's default settings convert into through the
worker's own mapping (``tines.worker.worker_settings``, then Rust's ``worker_config``).
"""

from __future__ import annotations

from tines import _core
from tines.config import SETTINGS, load
from tines.worker import worker_settings

COMPUTED = {"workers"}
"""Fields whose registry default is computed on the machine at hand, which no constant in Rust
can restate: ``workers`` is two per CPU core (Rust's default serves one)."""


def registry_fields(overrides: dict[str, object] | None = None) -> dict[str, str]:
    return dict(_core.worker_config_fields(worker_settings(load(overrides or {}, {}))))


def test_every_rust_default_is_the_registry_default() -> None:
    rust = dict(_core.worker_config_fields())
    registry = registry_fields()
    assert rust.keys() == registry.keys()
    differ = {name: {"rust": rust[name], "registry": registry[name]}
              for name in rust if name not in COMPUTED and rust[name] != registry[name]}
    assert differ == {}


def test_the_fields_left_out_are_computed_defaults() -> None:
    for name in COMPUTED:
        assert callable(SETTINGS[name].default), name


def test_a_setting_changes_the_field_it_maps_to_and_nothing_else() -> None:
    """The comparison sees a value that differs (and an unset drain_timeout follows
    keepalive_timeout, as the registry says)."""
    default = registry_fields()
    changed = registry_fields({"keepalive_timeout": "7", "forwarded_allow_ips": "10.0.0.0/8"})
    assert {name for name in default if default[name] != changed[name]} == {
        "keepalive_timeout", "drain_timeout", "trusted_proxies"}
    assert changed["keepalive_timeout"] == changed["drain_timeout"] == "7s"


def test_each_http2_setting_reaches_the_workers_h2_config() -> None:
    """The registry's "HTTP/2" section fills ``WorkerConfig.h2`` (``H2Config``), one field each."""
    default = registry_fields()
    changed = registry_fields({"http2": False, "h2_max_concurrent_streams": "7", "h2_initial_window_size": "65536",
                               "h2_connection_window_size": "2147483647", "h2_max_frame_size": "16777215",
                               "h2_max_header_list_size": "8192", "h2_header_table_size": "0",
                               "h2_max_reset_rate": "5", "h2_max_control_rate": "50"})
    assert {name for name in default if default[name] != changed[name]} == {"h2"}
    assert changed["h2"] == (
        "H2Config { enabled: false, max_concurrent_streams: 7, initial_window_size: 65536, "
        "connection_window_size: 2147483647, max_frame_size: 16777215, max_header_list_size: 8192, "
        "header_table_size: 0, max_reset_rate: 5, max_control_rate: 50 }")
