"""The 10,000-watch row's pure parts (bench/workloads/watch_scale.py): how
many watches it opens, how the fan-out counts, what its verdicts say."""

import pytest

from bench.workloads.watch_scale import _shares, fan_out_summary, scale_verdicts, watch_capacity


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
                "gateway": {"p99_ms": gateway_p99, "received": 600, "expected": 600}}
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
    assert not verdicts["added delivery p99 <= 5 ms, all open"]
    assert not verdicts["RSS after close within 10 MiB of baseline"]
