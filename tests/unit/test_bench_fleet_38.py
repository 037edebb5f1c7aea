"""Issue 38's benchmark row, its pure parts (bench/workloads/fleet.py): the
order of the timed pairs, the instruction summary the verdict is read from,
and the verdict itself."""

from __future__ import annotations

import math

import pytest

from bench.instructions import instruction_summary
from bench.workloads.common import paired_ratio
from bench.workloads.fleet import (
    ORDER,
    TOLERANCE,
    fleet_verdicts,
    pair_order,
)


def test_the_callgrind_blocks_are_abba_so_neither_configuration_always_goes_first() -> None:
    assert ORDER == ["one", "two", "two", "one"]


def test_timed_pairs_alternate_which_configuration_goes_first() -> None:
    assert [pair_order(k) for k in range(4)] == [("one", "two"), ("two", "one"), ("one", "two"), ("two", "one")]


def test_the_summary_compares_the_means_of_each_configurations_blocks() -> None:
    got = instruction_summary({"one": [400_000.0, 402_000.0], "two": [404_000.0, 406_000.0]}, "one", "two")
    assert got["one_per_get"] == 401_000.0 and got["two_per_get"] == 405_000.0
    assert math.isclose(got["two_vs_one"], 405_000 / 401_000)
    assert got["per_get_blocks"]["two"] == [404_000.0, 406_000.0]


def test_a_summary_without_blocks_of_both_configurations_is_refused() -> None:
    with pytest.raises(ValueError):
        instruction_summary({"one": [400_000.0], "two": []}, "one", "two")


def test_the_cpu_ratio_is_the_median_of_each_pairs_ratio_not_a_ratio_of_medians() -> None:
    # One pair hit by background load in both halves: it cannot move the median.
    assert math.isclose(paired_ratio([1.0, 1.0, 5.0], [1.02, 1.01, 5.5]), 1.02)
    with pytest.raises(ValueError):
        paired_ratio([1.0], [1.0, 2.0])


@pytest.mark.parametrize(("ratio", "ok"), [(1.0, True), (TOLERANCE, True), (1.051, False), (0.97, True)])
def test_the_verdict_is_two_over_one_within_the_issues_5_percent(ratio: float, ok: bool) -> None:
    [(target, measured, met)] = fleet_verdicts({"instructions": {"two_vs_one": ratio}})
    assert "2 clusters" in target and measured == f"{ratio:.3f}x" and met is ok
