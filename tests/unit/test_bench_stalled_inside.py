"""bench.stalled_inside's arithmetic, and bench.heap_view's view of this process."""

from __future__ import annotations

from typing import Any

from bench.heap_view import view
from bench.stalled_inside import per_added_reader


def _sample(stalled: int, rss_mib: float, heap_kib: int, upstream_kib: int) -> dict[str, Any]:
    return {"stalled": stalled, "rss_mib": rss_mib, "heap_in_use": heap_kib * 1024, "heap_free": 0,
            "mapped_apart": 0, "resident_kib_by_mapping": {"[heap]": heap_kib, "[anon]": 100},
            "tls_read_buffers": {"upstream": {"connections": stalled, "resident_kib": upstream_kib}}}


def test_what_each_added_reader_cost_by_where_it_went() -> None:
    per_reader = per_added_reader(_sample(20, 70.0, 10_000, 700), _sample(200, 115.0, 46_000, 7_000))
    assert per_reader["rss"] == 256.0  # 45 MiB over 180 readers
    assert per_reader["resident [heap]"] == 200.0
    assert per_reader["heap in use"] == 200.0
    assert per_reader["resident [anon]"] == 0.0
    assert per_reader["TLS read buffers resident, upstream"] == 35.0
    assert per_reader["TLS read buffers resident, client"] == 0.0


def test_a_view_of_this_process() -> None:
    seen = view()
    assert seen["heap_in_use"] > 0 and seen["resident_kib_by_mapping"]["[heap]"] > 0
    assert seen["objects"] > 1000 and seen["tls_read_buffers"] == {}
