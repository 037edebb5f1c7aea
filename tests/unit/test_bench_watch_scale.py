"""The 10,000-watch row's pure parts (bench/workloads/watch_scale.py): how
many watches it opens, how the fan-out counts, what its verdicts say."""

import pytest

from bench.workloads.watch_scale import _shares, fan_out_summary, resident_by_kind, scale_verdicts, watch_capacity
from bench.workloads.watches import added_by_event


def test_capacity_is_what_was_asked_or_what_the_descriptors_hold() -> None:
    assert watch_capacity(65536, 40, 10_000) == 10_000
    assert watch_capacity(20_000, 36, 10_000) == (20_000 - 36 - 64) // 2
    assert watch_capacity(100, 80, 10) == 0


def test_the_crowd_is_shared_out_whole() -> None:
    assert _shares(10, 4) == [3, 3, 2, 2]
    assert sum(_shares(9_950, 4)) == 9_950


def test_fan_out_counts_every_missing_delivery() -> None:
    created = {"a": 1.0, "b": 2.0}
    reports = [{"a": [1.001, 1.002], "b": [2.010]}, {"a": [1.003], "b": [2.020, 2.030], "other": [5.0]}]
    summary = fan_out_summary(created, reports, watches=3)
    assert summary["expected"] == 6 and summary["received"] == 6 and summary["lost"] == 0
    assert summary["max_ms"] == pytest.approx(30.0)
    assert fan_out_summary(created, reports[:1], watches=3)["lost"] == 3


def _result(watches: int, after_close_mib: float, gateway_p99: float, lost: int) -> dict[str, object]:
    delivery = {"direct": {"p99_ms": 10.0, "received": 600, "expected": 600},
                "gateway": {"p99_ms": 10.0, "added_p99_ms": gateway_p99 - 10.0, "received": 600, "expected": 600}}
    return {"asked": 10_000, "watches": watches, "gateway_fd_limit": 20_000,
            "samples": [{"watches": 0, "rss_mib": 70.0, "fds": 30}], "after_close": {"rss_mib": after_close_mib},
            "kib_rss_per_watch": 90.0, "fds_per_watch": 2.0, "delivery": delivery,
            "fan_out": {"gateway": {"received": 50_000 - lost, "expected": 50_000}}}


def test_verdicts_name_a_run_held_below_the_number_asked() -> None:
    met = scale_verdicts(_result(10_000, 75.0, 12.0, 0))
    assert all(ok for _, _, ok in met)
    held = scale_verdicts(_result(9_950, 75.0, 12.0, 0))
    assert held[0] == ("10,000 concurrent watches, one replica", "9,950 (fd limit 20,000)", False)


def test_verdicts_refuse_a_lost_event_slow_delivery_and_memory_kept() -> None:
    verdicts = {name: ok for name, _, ok in scale_verdicts(_result(10_000, 120.0, 16.0, 1))}
    assert not verdicts["no event lost (delivery + fan-out)"]
    assert not verdicts["added delivery p99 <= 5 ms (by event), all open"]
    assert not verdicts["RSS after close within 10 MiB of baseline"]


def test_a_stall_both_sides_see_is_not_added_by_the_relay() -> None:
    """The second event's create stalled 4 s: direct and relayed watchers
    both got it late, and the relay added 1-2 ms to each delivery."""
    direct = {"a": [1.000, 1.002, 1.004], "b": [6.000, 6.001, 6.002]}
    relayed = {"a": [1.003, 1.004], "b": [6.002, 6.003]}
    added = added_by_event(direct, relayed)
    assert added["added_p99_ms"] == pytest.approx(2.0)
    assert added["added_p50_ms"] == pytest.approx(2.0)


def test_by_rank_the_api_servers_own_spread_is_not_counted() -> None:
    """The API server reached its watchers 0-20 ms apart; the relayed ones
    arrived as late as the direct ones at the same ranks, plus 1 ms."""
    direct = {"a": [1.000, 1.010, 1.020]}
    relayed = {"a": [1.001, 1.011, 1.021]}
    added = added_by_event(direct, relayed)
    assert added["added_p99_ms"] == pytest.approx(11.0, abs=0.3)  # against the median: the spread counted
    assert added["added_by_rank_p99_ms"] == pytest.approx(1.0)
    assert added["direct_spread_p99_ms"] == pytest.approx(20.0)
    fewer = added_by_event(direct, {"a": [1.001, 1.021]})  # two relayed arrivals: the first and last ranks
    assert fewer["added_by_rank_p99_ms"] == pytest.approx(1.0)


SMAPS = """\
55d0c0000000-55d0c0100000 rw-p 00000000 00:00 0                          [heap]
Size:               1024 kB
Rss:                 512 kB
7f0000000000-7f0000400000 rw-p 00000000 00:00 0
Size:               4096 kB
Rss:                2048 kB
7f1000000000-7f1000010000 r-xp 00000000 08:01 1234                       /usr/lib/libc.so.6
Size:                 64 kB
Rss:                  64 kB
VmFlags: rd ex mr mw me
"""


def test_resident_memory_is_told_apart_by_allocator() -> None:
    assert resident_by_kind(SMAPS) == {"heap_mib": 0.5, "anonymous_mib": 2.0, "other_mib": 0.0625}
