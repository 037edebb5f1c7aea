"""Issue 41's scale run, its pure parts (bench/scale.py, bench/png.py):
the verdicts (each figure at the largest size within 1.25x of the
smallest; reconcile per workspace, i.e. linear), the walk over a paged
listing, the curves the plot draws, and the PNG itself."""

from __future__ import annotations

import asyncio
import struct
import zlib
from typing import Any

import pytest

from bench.png import Canvas, ratio_chart
from bench.scale import FIGURES, Page, curves, ratio_to_smallest, scale_verdicts, walk_pages


def _result(**at_largest: float) -> dict[str, Any]:
    """Three sizes; every figure 10 at the smallest, 11 above, unless given."""
    steps = []
    for size in (100, 1000, 10000):
        figures = {f.key: 10.0 if size == 100 else 11.0 for f in FIGURES}
        if size == 10000:
            figures.update(at_largest)
        steps.append({"size": size, "figures": figures})
    return {"steps": steps}


def test_a_figure_within_the_tolerance_of_the_smallest_size_is_met() -> None:
    verdicts = scale_verdicts(_result(warm_get_p99_ms=12.5))
    assert len(verdicts) == len(FIGURES) and all(ok for _, _, ok in verdicts)
    assert [v for t, v, _ in verdicts if "warm proxied GET p99" in t] == ["1.25x"]


def test_a_figure_that_grows_more_is_missed_and_named() -> None:
    missed = [(t, v) for t, v, ok in scale_verdicts(_result(page_p50_ms=13.0)) if not ok]
    assert missed == [("every workspace, per page of 100, p50 at 10,000 <= 1.25x at 100", "1.30x")]


def test_reconcile_is_judged_per_workspace_so_linear_growth_passes() -> None:
    verdicts = {t: ok for t, _, ok in scale_verdicts(_result(reconcile_ms_per_workspace=10.0))}
    assert verdicts["linear: reconcile over all, per workspace at 10,000 <= 1.25x at 100"]
    superlinear = {t: ok for t, _, ok in scale_verdicts(_result(reconcile_ms_per_workspace=30.0))}
    assert not superlinear["linear: reconcile over all, per workspace at 10,000 <= 1.25x at 100"]


def test_a_figure_not_measured_is_a_miss_not_a_pass() -> None:
    result = _result()
    del result["steps"][2]["figures"]["login_p50_ms"]
    assert ("login p50 (over its control) at 10,000 <= 1.25x at 100", "not measured", False) in scale_verdicts(result)


def test_one_size_alone_has_nothing_to_judge() -> None:
    assert scale_verdicts({"steps": [{"size": 100, "figures": {"rss_mib": 80.0}}]}) == []


def test_curves_start_at_one_and_are_the_ratio_to_the_smallest_size() -> None:
    drawn = {c.figure.key: c for c in curves(_result(rss_mib=20.0))}
    assert drawn["rss_mib"].points == ((100, 1.0), (1000, 1.1), (10000, 2.0))
    assert [c.number for c in curves(_result())] == list(range(1, len(FIGURES) + 1))
    assert ratio_to_smallest(_result(), "no such figure", 1000) is None


def _pages(items: list[int], limit: int, *, stuck: bool = False) -> Any:
    async def fetch(cursor: str | None) -> Page:
        start = int(cursor) if cursor else 0
        page = items[start:start + limit]
        following = start + limit
        if stuck:
            return page, "0"
        return page, str(following) if following < len(items) else None
    return fetch


def _tick() -> Any:
    now = [0.0]

    def clock() -> float:
        now[0] += 0.5
        return now[0]
    return clock


def test_walking_the_pages_follows_each_cursor_and_times_each_page() -> None:
    items, times = asyncio.run(walk_pages(_pages(list(range(250)), 100), limit=100, clock=_tick()))
    assert items == list(range(250)) and times == [0.5, 0.5, 0.5]


def test_a_listing_that_does_not_advance_is_refused() -> None:
    with pytest.raises(ValueError, match="does not advance"):
        asyncio.run(walk_pages(_pages(list(range(250)), 100, stuck=True), limit=100, clock=_tick()))


def test_a_page_longer_than_asked_is_refused() -> None:
    with pytest.raises(ValueError, match="a page of 100 items"):
        asyncio.run(walk_pages(_pages(list(range(250)), 100), limit=50, clock=_tick()))


def _decoded(png: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and the rows of an 8-bit RGB PNG (filter 0), checking every chunk's CRC."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    at, chunks = 8, {}
    while at < len(png):
        (length,) = struct.unpack(">I", png[at:at + 4])
        kind, data = png[at + 4:at + 8], png[at + 8:at + 8 + length]
        (crc,) = struct.unpack(">I", png[at + 8 + length:at + 12 + length])
        assert crc == zlib.crc32(kind + data) & 0xFFFFFFFF
        chunks[kind] = data
        at += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert (depth, colour) == (8, 2) and b"IEND" in chunks
    raw = zlib.decompress(chunks[b"IDAT"])
    stride = 1 + 3 * width
    rows = [raw[i * stride:(i + 1) * stride] for i in range(height)]
    assert all(row[0] == 0 for row in rows)
    return width, height, [row[1:] for row in rows]


def test_the_canvas_writes_a_png_with_its_pixels() -> None:
    canvas = Canvas(4, 3)
    canvas.dot(1, 2, (10, 20, 30))
    width, height, rows = _decoded(canvas.png())
    assert (width, height) == (4, 3)
    assert rows[2][3:6] == bytes((10, 20, 30)) and rows[0][:3] == bytes((255, 255, 255))


def test_a_line_reaches_both_ends() -> None:
    canvas = Canvas(10, 10)
    canvas.line((1, 1), (8, 6), (0, 0, 0))
    _, _, rows = _decoded(canvas.png())
    assert rows[1][3:6] == bytes(3) and rows[6][24:27] == bytes(3)


def test_the_chart_draws_each_curve_in_its_colour() -> None:
    width, height, rows = _decoded(ratio_chart([(1, [(100.0, 1.0), (10000.0, 1.1)]), (2, [(100.0, 1.0), (10000.0, 9.0)])],
                                               x_ticks=[100.0, 1000.0, 10000.0], threshold=1.25))
    pixels = {bytes(row[i:i + 3]) for row in rows for i in range(0, len(row), 3)}
    assert (width, height) == (900, 560)
    assert bytes((31, 119, 180)) in pixels and bytes((255, 127, 14)) in pixels  # the first two colours
    assert bytes((220, 30, 30)) in pixels  # the target's line


def test_the_readme_table_has_a_row_per_figure_numbered_as_in_the_legend() -> None:
    from bench.scale import markdown_table

    lines = markdown_table(_result(rss_mib=20.0)).splitlines()
    assert lines[0] == "| # | figure | 100 | 1,000 | 10,000 | largest / smallest | its control's | judged |"
    assert len(lines) == 2 + len(FIGURES)
    assert lines[2] == "| 1 | serving replica RSS (MiB) | 10.00 | 11.00 | 20.00 | 2.00x | - | 2.00x |"


def test_reconcile_left_out_at_the_largest_size_is_judged_at_the_largest_it_ran_at() -> None:
    result = _result()
    del result["steps"][2]["figures"]["reconcile_ms_per_workspace"]
    verdicts = {t: (v, ok) for t, v, ok in scale_verdicts(result)}
    assert verdicts["linear: reconcile over all, per workspace at 1,000 <= 1.25x at 100"] == ("1.10x", True)
    del result["steps"][1]["figures"]["reconcile_ms_per_workspace"]
    verdicts = {t: (v, ok) for t, v, ok in scale_verdicts(result)}
    assert verdicts["linear: reconcile over all, per workspace at 100 <= 1.25x at 100"] == ("not measured", False)


def test_a_controlled_figure_is_judged_by_its_growth_over_its_controls() -> None:
    """The machine slowed 1.6x between the sizes (its control grew so): the
    warm GET's growth of 1.8x is the gateway's 1.125x, met. Without a
    control measured (results from before), its own growth is judged."""
    result = _result(warm_get_p50_ms=18.0, control_warm_get_p50_ms=16.0)
    result["steps"][0]["figures"]["control_warm_get_p50_ms"] = 10.0
    verdicts = {t: (v, ok) for t, v, ok in scale_verdicts(result)}
    assert verdicts["warm proxied GET p50 (over its control) at 10,000 <= 1.25x at 100"] == ("1.12x", True)
    uncontrolled = {t: (v, ok) for t, v, ok in scale_verdicts(_result(warm_get_p50_ms=18.0))}
    assert uncontrolled["warm proxied GET p50 (over its control) at 10,000 <= 1.25x at 100"] == ("1.80x", False)


def test_a_figure_growing_while_its_control_does_not_is_missed() -> None:
    result = _result(issuance_p99_ms=14.0, control_issuance_p99_ms=10.0)
    result["steps"][0]["figures"]["control_issuance_p99_ms"] = 10.0
    missed = [(t, v) for t, v, ok in scale_verdicts(result) if not ok]
    assert missed == [("kubeconfig issuance p99 (over its control) at 10,000 <= 1.25x at 100", "1.40x")]
