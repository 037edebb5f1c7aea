"""Loaded by Python at start-up when this directory is on PYTHONPATH (as
bench.stalled_inside puts it for the gateway it launches): in a gateway's
`serve` process, with BENCH_HEAP_VIEW_DIR set, answers requests for a view
of its memory (bench.heap_view). Anywhere else, nothing."""

import os
import sys

if os.environ.get("BENCH_HEAP_VIEW_DIR") and sys.argv[-1:] == ["serve"]:
    from bench.heap_view import start

    start(os.environ["BENCH_HEAP_VIEW_DIR"])
