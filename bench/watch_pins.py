"""What a burst of watches leaves alive in the gateway once they have all
closed (`python -m bench.watch_pins [N]`; the cluster lock). Not a row: a
diagnosis for issue 41's "RSS back to its baseline after they close".

pymalloc gives a 1 MiB arena back only once every object in it is gone, so
a few objects made during a burst and kept after it hold the arenas the
burst filled. This starts tracing the gateway's allocations (tracemalloc)
just before a burst (bench.heap_view's `mark`), opens N
watches (default 2,000) through it as the watch row does (bench.watch_crowd
processes), closes them, waits one heap trim (the trimmer's collection
after a burst runs then), and lists the allocations made since the mark
that are still alive, by traceback. Tracing
slows the gateway and grows its memory: figures here are for finding what
stays, not for the row. Printed, and written to results/watch-pins.json.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from bench.alone import with_tenant
from bench.record import RESULTS
from bench.stack import Stack, Tenant
from bench.stalled_inside import _view, viewed_stack
from bench.workloads.common import HEAP_TRIM_WAIT, Targets
from bench.workloads.watch_scale import CROWDS, SETTLE_SECONDS, WARM_UP, CrowdProcess, _open_to

TRACED_FRAMES = 12


async def _steps(stack: Stack, tenant: Tenant, watches: int, directory: Path) -> dict[str, Any]:
    base, headers, ca = Targets(stack, tenant).base["gateway"]
    url = base + f"/api/v1/namespaces/{tenant.namespace}/configmaps?watch=1&labelSelector=bench%3Dpins"
    warm = await CrowdProcess.start(url, headers, ca)
    try:
        await warm.ask({"open": WARM_UP})
    finally:
        await warm.close()
    await asyncio.sleep(HEAP_TRIM_WAIT)
    before = {"rss_mib": stack.gateway_rss_mib(), **await _view(directory, "mark")}
    crowds = [await CrowdProcess.start(url, headers, ca) for _ in range(CROWDS)]
    try:
        refused = await _open_to(crowds, watches)
        await asyncio.sleep(SETTLE_SECONDS)
        rss_open = stack.gateway_rss_mib()
    finally:
        await asyncio.gather(*(c.close() for c in crowds))
    await asyncio.sleep(HEAP_TRIM_WAIT)
    after = {"rss_mib": stack.gateway_rss_mib(), **await _view(directory, "after")}
    return {"watches": watches, "refused": refused, "rss_open_mib": rss_open, "before": before, "after": after}


def run(watches: int) -> dict[str, Any]:
    with viewed_stack({"BENCH_TRACE_FRAMES": str(TRACED_FRAMES)}) as (stack, directory):
        return asyncio.run(with_tenant(lambda s, t: _steps(s, t, watches, directory))(stack))


def main(watches: int) -> None:
    result = run(watches)
    before, after = result["before"], result["after"]
    print(f"{result['watches']:,} watches: RSS {before['rss_mib']:.0f} -> {result['rss_open_mib']:.0f} open -> "
          f"{after['rss_mib']:.0f} MiB after close; traced {before.get('traced_kib')} -> {after.get('traced_kib')} KiB")
    for survivor in after.get("survivors_since_mark", []):
        print(f"{survivor['kib']:>9} KiB {survivor['blocks']:>7} blocks")
        for where in survivor["where"][-TRACED_FRAMES:]:
            print(f"      {where}")
    for view in (before, after):
        view.pop("objects_by_type", None)
    path = RESULTS / "watch-pins.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"written: {path}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
