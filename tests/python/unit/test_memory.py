"""tines.memory on this process's real /proc and on sample texts; the size setting."""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
from dataclasses import dataclass

import pytest

from tines import config, memory
from tines.errors import ConfigError

MIB = 1 << 20

ROLLUP = """\
55d0c8a4e000-7ffd2a1f3000 ---p 00000000 00:00 0                          [rollup]
Rss:               19212 kB
Pss:                8540 kB
Pss_Dirty:          3904 kB
Shared_Clean:      15100 kB
Shared_Dirty:        416 kB
Private_Clean:        12 kB
Private_Dirty:      3684 kB
Referenced:        19212 kB
Anonymous:          4100 kB
KSM:                   0 kB
Swap:                 64 kB
SwapPss:              64 kB
"""


def test_a_smaps_rollup_text_gives_rss_pss_uss_shared_and_swap_in_bytes() -> None:
    usage = memory.parse_smaps_rollup(ROLLUP)
    assert usage == memory.MemoryUsage(rss=19212 * 1024, pss=8540 * 1024, uss=(12 + 3684) * 1024,
                                       shared=(15100 + 416) * 1024, swap=64 * 1024)


def test_an_empty_smaps_rollup_as_an_exited_process_has_gives_no_figures() -> None:
    assert memory.parse_smaps_rollup("") is None


def test_a_ksm_stat_text_gives_the_merged_bytes_and_the_profit() -> None:
    text = ("ksm_rmap_items 120\nksm_zero_pages 0\nksm_merging_pages 50\nksm_process_profit 180000\n"
            "ksm_merge_any: yes\nksm_mergeable: yes\n")
    assert memory.parse_ksm_stat(text) == (50 * memory.PAGE_SIZE, 180000)
    assert memory.parse_ksm_stat("ksm_merge_any: no\n") is None


def test_this_process_grows_by_what_it_writes_in_uss_and_rss_is_uss_plus_shared() -> None:
    before = memory.read_usage(os.getpid())
    assert before is not None and before.rss == before.uss + before.shared and before.pss > 0
    # Fresh pages of its own, touched: a Python object of that size may come from heap the
    # allocator already holds (glibc raises its mmap threshold after large frees, so a long
    # test session reuses resident memory and USS does not move).
    held = mmap.mmap(-1, 32 * MIB)
    for offset in range(0, 32 * MIB, mmap.PAGESIZE):
        held[offset] = 1
    after = memory.read_usage(os.getpid())
    assert after is not None and after.uss - before.uss >= 31 * MIB
    held.close()


def test_a_process_that_is_gone_has_no_figures() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert memory.read_usage(child.pid) is None


def test_the_ksm_counters_are_read_on_request_where_the_kernel_has_them() -> None:
    usage = memory.read_usage(os.getpid(), ksm=True)
    assert usage is not None
    assert (usage.ksm_profit is not None) == os.path.exists(f"/proc/{os.getpid()}/ksm_stat")


@pytest.mark.parametrize(("size", "shown"), [(512 * MIB, "512 MiB"), (int(530.2 * MIB), "530.2 MiB"),
                                             (900, "900 B"), (3 * 1024, "3 KiB"), (5 << 40, "5 TiB")])
def test_sizes_are_shown_with_one_decimal_in_powers_of_1024(size: int, shown: str) -> None:
    assert memory.format_size(size) == shown


@dataclass
class Slot:
    slot: int


def test_the_sampler_reads_one_worker_at_a_time_in_turn_at_its_rate() -> None:
    sampler = memory.Sampler(4.0)
    workers = [Slot(2), Slot(0), Slot(1)]
    picked = [sampler.pick(workers, now=0.25 * turn) for turn in range(4)]
    assert [w.slot for w in picked if w] == [0, 1, 2, 0]
    assert sampler.pick(workers, now=0.8) is None  # the next read is due at 1.0
    assert sampler.wait(0.8) == pytest.approx(0.2)
    assert sampler.pick([], now=5.0) is None


def _cfg(**values: object) -> config.Config:
    return config.load({key: value for key, value in values.items()}, environ={})


def test_the_limit_is_decided_on_the_figure_its_kind_names() -> None:
    usage = memory.MemoryUsage(rss=600 * MIB, pss=300 * MIB, uss=int(530.2 * MIB), shared=70 * MIB, swap=0)
    assert memory.over_limit(_cfg(max_worker_memory="512MiB"), usage) == \
        "USS 530.2 MiB > max_worker_memory 512 MiB"
    assert memory.over_limit(_cfg(max_worker_memory="512MiB", max_worker_memory_kind="pss"), usage) is None
    assert memory.over_limit(_cfg(max_worker_memory="512MiB", max_worker_memory_kind="rss"), usage) == \
        "RSS 600 MiB > max_worker_memory 512 MiB"
    assert memory.over_limit(_cfg(), usage) is None  # 0: off


@pytest.mark.parametrize(("rss", "shown"), [(128 * MIB + 4 * 1024, "RSS 128.004 MiB"), (128 * MIB + 1, "RSS 128.000001 MiB"),
                                            (int(128.3 * MIB), "RSS 128.3 MiB"), (129 * MIB, "RSS 129 MiB")])
def test_a_figure_just_over_the_limit_never_reads_as_the_limit(rss: int, shown: str) -> None:
    # /proc/PID/status counts in kB: 4 KiB over 128 MiB was logged as "RSS 128 MiB > 128 MiB".
    usage = memory.MemoryUsage(rss=rss, pss=0, uss=0, shared=0, swap=0, rss_only=True)
    assert memory.over_limit(_cfg(max_worker_memory="128MiB", max_worker_memory_kind="rss"), usage) == \
        f"{shown} > max_worker_memory 128 MiB"
    assert memory.over_limit(_cfg(max_worker_memory="128MiB", max_worker_memory_kind="rss"),
                             memory.MemoryUsage(rss=128 * MIB, pss=0, uss=0, shared=0, swap=0, rss_only=True)) is None


STATUS = """\
Name:\tpython3
VmPeak:\t  120000 kB
VmRSS:\t   19212 kB
RssAnon:\t    4100 kB
VmSwap:\t      64 kB
"""


def test_a_status_text_gives_rss_and_swap_only() -> None:
    usage = memory.parse_status(STATUS)
    assert usage == memory.MemoryUsage(rss=19212 * 1024, pss=0, uss=0, shared=0, swap=64 * 1024, rss_only=True)
    assert usage.figure("rss") == 19212 * 1024 and usage.figure("uss") is None and usage.figure("pss") is None
    assert usage.describe() == "RSS 18.8 MiB, swap 64 KiB (PSS and USS unreadable)"
    assert memory.parse_status("Name:\tkthreadd\n") is None


def test_an_rss_only_sample_decides_a_limit_on_rss_and_none_on_uss_or_pss() -> None:
    usage = memory.MemoryUsage(rss=600 * MIB, pss=0, uss=0, shared=0, swap=0, rss_only=True)
    assert memory.over_limit(_cfg(max_worker_memory="512MiB", max_worker_memory_kind="rss"), usage) == \
        "RSS 600 MiB > max_worker_memory 512 MiB"
    assert memory.over_limit(_cfg(max_worker_memory="512MiB"), usage) is None


def test_the_sampler_reads_rss_from_status_once_smaps_rollup_is_unreadable(monkeypatch: pytest.MonkeyPatch) -> None:
    def unreadable(pid: int, ksm: bool = False) -> memory.MemoryUsage | None:
        raise memory.MemoryUnreadable("not the master's")

    monkeypatch.setattr(memory, "read_usage", unreadable)
    sampler = memory.Sampler(4.0)
    usage = sampler.read(os.getpid())
    assert usage is not None and usage.rss_only and usage.rss > 0
    assert sampler.rss_only and sampler.wait(0.0) == 0.0  # sampling goes on
    assert memory.read_rss(2 ** 22 + 1) is None  # no such process


def test_a_limit_on_uss_is_refused_where_the_master_will_not_read_smaps_rollup(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "smaps_readable", lambda cfg: False)
    with pytest.raises(ConfigError, match=r"max_worker_memory_kind uss \(default\) cannot be checked under "
                                          r"user/group: .* set max_worker_memory_kind rss"):
        memory.check_limit(_cfg(max_worker_memory="512MiB"))
    memory.check_limit(_cfg(max_worker_memory="512MiB", max_worker_memory_kind="rss"))
    memory.check_limit(_cfg())  # no limit: nothing to check


def test_smaps_rollup_stays_readable_without_a_switch_of_user() -> None:
    assert memory.smaps_readable(_cfg()) is True
    assert memory.smaps_readable(_cfg(user=str(os.geteuid()))) is True


def test_the_master_reads_memory_less_often_when_no_limit_needs_it() -> None:
    assert memory.sample_rate(_cfg()) == 0.5
    assert memory.sample_rate(_cfg(max_worker_memory="512MiB")) == 4.0
    assert memory.sample_rate(_cfg(memory_sample_rate=2)) == 2.0
    assert memory.sample_rate(_cfg(max_worker_memory="512MiB", memory_sample_rate="0.25")) == 0.25


@pytest.mark.parametrize(("raw", "size"), [("512MiB", 512 * MIB), ("512M", 512 * MIB), ("1.5G", 3 << 29),
                                           ("64k", 65536), (" 2 GiB ", 2 << 30), ("100", 100), (4096, 4096),
                                           ("0", 0)])
def test_sizes_take_units_in_powers_of_1024(raw: object, size: int) -> None:
    assert config.size(raw) == size


@pytest.mark.parametrize("raw", ["banana", "512MB", "-1", "1e6", "", True, 1.5])
def test_a_size_that_is_not_one_is_refused(raw: object) -> None:
    with pytest.raises(ValueError, match="must be a size"):
        config.size(raw)


def test_a_size_past_64_bits_is_refused_before_any_worker_fails_on_it() -> None:
    assert config.size("8388607TiB") == 8388607 << 40
    with pytest.raises(ValueError, match="must be a size of at most 8EiB - 1"):
        config.size("8388608TiB")
    with pytest.raises(ValueError, match="must be a size of at most"):
        config.size(1 << 63)


def test_the_master_check_of_memory_merge_is_off_when_not_asked() -> None:
    assert memory.check_merge(_cfg()) is False
