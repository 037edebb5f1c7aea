"""Issue 41's fair-share row, its pure parts (bench/fairness.py): the order
of the idle and flooded blocks, the judging of paired blocks, the API
server's view of the victim's GETs, and the verdict; and the run's rows,
each judged and printed by one entry (bench/report.py ROWS)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from bench.fairness import block_order, fairness_verdicts, judge, server_view
from bench.report import ROWS


def _block(p50: float, p99: float, requests: int = 1000, over_25: float = 0.0) -> dict[str, Any]:
    return {"p50_ms": p50, "p99_ms": p99, "requests": requests, "errors": 0,
            "in_server": {"requests": float(requests), "over_25_ms": over_25}}


def test_each_pairs_blocks_run_back_to_back_and_which_goes_first_alternates() -> None:
    assert block_order(3) == ["idle", "flood", "flood", "idle", "idle", "flood"]
    order = block_order(6)
    assert order.count("idle") == order.count("flood") == 6
    # Pair k is blocks 2k and 2k+1: one of each.
    assert all({order[2 * k], order[2 * k + 1]} == {"idle", "flood"} for k in range(6))


def test_the_ratio_is_the_median_of_each_pairs_flood_p99_over_its_idle_p99() -> None:
    idle = [_block(2.0, 4.0), _block(2.0, 8.0), _block(2.0, 5.0)]
    flood = [_block(3.0, 6.0), _block(3.0, 10.0), _block(3.0, 9.0)]
    got = judge(idle, flood)
    assert got["pair_p99_ratios"] == [1.5, 1.25, 1.8]
    assert got["p99_ratio"] == 1.5 and got["p50_ratio"] == 1.5


def test_background_that_moves_the_idle_p99_between_pairs_does_not_move_the_ratio() -> None:
    # The row's first form divided one flood's p99 by an idle p99 timed at
    # another moment: here the idle p99 moves 2.5-10 ms with the machine's
    # other work, as it did between runs, and the flood doubles whatever it is.
    idle_p99 = [2.5, 10.0, 4.0, 6.0, 3.0]
    got = judge([_block(1.0, p) for p in idle_p99], [_block(1.5, 2 * p) for p in idle_p99])
    assert all(math.isclose(r, 2.0) for r in got["pair_p99_ratios"]) and math.isclose(got["p99_ratio"], 2.0)
    # The first form's ratio, quiet idle against a busy flood, would have read 4x.
    assert max(2 * p for p in idle_p99) / min(idle_p99) == 8.0


def test_one_pair_hit_by_a_burst_in_one_half_cannot_decide_the_verdict() -> None:
    idle = [_block(2.0, 5.0)] * 5
    flood = [_block(3.0, 7.5)] * 4 + [_block(3.0, 60.0)]
    assert judge(idle, flood)["p99_ratio"] == 1.5


def test_each_phase_reports_the_medians_of_its_blocks_and_sums_the_servers_view() -> None:
    got = judge([_block(2.0, 4.0, 900, 1.0), _block(4.0, 6.0, 1100, 0.0)],
                [_block(3.0, 9.0, 500, 2.0), _block(5.0, 7.0, 600, 3.0)])
    assert got["victim_idle"]["p50_ms"] == 3.0 and got["victim_idle"]["p99_ms"] == 5.0
    assert got["victim_idle"]["requests"] == 2000 and got["victim_during_flood"]["requests"] == 1100
    assert got["victim_in_server"]["during_flood"] == {"requests": 1100.0, "over_25_ms": 5.0}
    assert got["victim_in_server"]["idle"] == {"requests": 2000.0, "over_25_ms": 1.0}


def test_blocks_that_do_not_pair_are_refused() -> None:
    with pytest.raises(ValueError):
        judge([_block(1.0, 2.0)], [])
    with pytest.raises(ValueError):
        judge([], [])


def test_the_servers_view_counts_the_gets_over_each_bound_between_two_reads() -> None:
    before = {0.005: 90.0, 0.025: 98.0, 0.05: 99.0, 0.1: 100.0, math.inf: 100.0}
    after = {0.005: 1080.0, 0.025: 1190.0, 0.05: 1197.0, 0.1: 1199.0, math.inf: 1200.0}
    assert server_view(before, after) == {"requests": 1100.0, "over_5_ms": 110.0, "over_25_ms": 8.0,
                                          "over_50_ms": 2.0, "over_100_ms": 1.0}


@pytest.mark.parametrize(("ratio", "ok"), [(1.2, True), (2.0, True), (2.01, False)])
def test_the_verdict_is_the_paired_ratio_within_2x(ratio: float, ok: bool) -> None:
    [(target, measured, met)] = fairness_verdicts({"p99_ratio": ratio})
    assert "flood" in target and measured == f"{ratio:.2f}x" and met is ok


def test_every_row_of_the_full_run_is_judged_and_printed_by_one_entry() -> None:
    from bench.__main__ import Run, rows

    # The rows are made lazily: naming them starts nothing.
    names = list(rows(Run(None, None, None, None)))  # type: ignore[arg-type]
    assert sorted(names) == sorted(ROWS)
    assert all(callable(judge) and callable(printer) for judge, printer in ROWS.values())
