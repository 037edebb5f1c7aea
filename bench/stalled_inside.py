"""Where the stalled-readers row's memory goes, seen from inside its gateway
(`python -m bench.stalled_inside [stalled] [idle]`; the cluster lock, each
mode a stack of its own). Not a row: the row is bench/workloads/stalled.py,
and this runs its steps (N, then 10N stalled readers) with the gateway's
memory viewed at each (bench.heap_view, loaded by bench/heap_hook).

`stalled` is the row itself; `idle` the same watches with nothing to send
them (no ConfigMap carries the row's label), the cost of an open watch
alone. The difference per added reader, by where it is (glibc's heap in use
and free, blocks mapped apart, pymalloc's arenas, each leg's TLS read
buffers), is what the row's figure is made of. Written to
results/stalled-readers-inside.json and printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

from bench.alone import with_tenant
from bench.record import RESULTS
from bench.stack import Stack, Tenant, temp_root
from bench.workloads import stalled as row

_HOOK = Path(__file__).with_name("heap_hook")


async def _view(directory: Path, label: str) -> dict[str, Any]:
    (directory / "request").write_text(label)
    answer = directory / f"view-{label}.json"
    async with asyncio.timeout(60):
        while not answer.exists():
            await asyncio.sleep(0.2)
    await asyncio.sleep(0.2)  # written whole
    result: dict[str, Any] = json.loads(answer.read_text())
    if "error" in result:
        raise RuntimeError(f"the gateway's view failed: {result['error']}")
    return result


async def _steps(stack: Stack, tenant: Tenant, mode: str, directory: Path) -> dict[str, Any]:
    if mode == "stalled":
        await row.create_configmaps_labelled(stack, tenant)
    context = stack.ssl_context()
    writers: list[asyncio.StreamWriter] = []
    samples = [{"stalled": 0, "rss_mib": stack.gateway_rss_mib(), **await _view(directory, "0")}]
    try:
        for step in (row.STALLED, 10 * row.STALLED):
            while len(writers) < step:
                writers += await asyncio.gather(*(row._opened(stack, tenant, context)
                                                  for _ in range(min(row._OPENED_AT_ONCE, step - len(writers)))))
            await asyncio.sleep(row._SETTLE_SECONDS)
            rss = stack.gateway_rss_mib()  # before the view: its thread allocates too
            samples.append({"stalled": step, "rss_mib": rss, **await _view(directory, str(step))})
    finally:
        for writer in writers:
            writer.close()
    return {"mode": mode, "samples": samples, "per_added_reader_kib": per_added_reader(samples[1], samples[2])}


def per_added_reader(first: dict[str, Any], last: dict[str, Any]) -> dict[str, float]:
    """KiB per reader added between two views, by where it went. Pure."""
    added = int(last["stalled"]) - int(first["stalled"])

    def kib(a: float, b: float) -> float:
        return round(float(b - a) / added, 1)

    mappings = first["resident_kib_by_mapping"], last["resident_kib_by_mapping"]
    legs = first["tls_read_buffers"], last["tls_read_buffers"]
    return {
        "rss": kib(first["rss_mib"] * 1024, last["rss_mib"] * 1024),
        "resident [heap]": kib(mappings[0].get("[heap]", 0), mappings[1].get("[heap]", 0)),
        "resident [anon]": kib(mappings[0].get("[anon]", 0), mappings[1].get("[anon]", 0)),
        "heap in use": kib(first["heap_in_use"] / 1024, last["heap_in_use"] / 1024),
        "heap free": kib(first["heap_free"] / 1024, last["heap_free"] / 1024),
        "mapped apart": kib(first["mapped_apart"] / 1024, last["mapped_apart"] / 1024),
        **{f"TLS read buffers resident, {leg}": kib(legs[0].get(leg, {}).get("resident_kib", 0),
                                                    legs[1].get(leg, {}).get("resident_kib", 0))
           for leg in ("upstream", "client")},
    }


@contextlib.contextmanager
def viewed_stack(extra_env: dict[str, str] | None = None) -> Iterator[tuple[Stack, Path]]:
    """A started stack whose gateway answers views (bench.heap_view) in the
    directory given with it; `extra_env` for the gateway too."""
    with tempfile.TemporaryDirectory() as views:
        directory = Path(views)
        os.environ["BENCH_HEAP_VIEW_DIR"] = str(directory)  # the gateway's environment is this one's
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (str(_HOOK), os.environ.get("PYTHONPATH"))))
        os.environ.update(extra_env or {})
        stack = Stack(temp_root())
        try:
            stack.start()
            yield stack, directory
        finally:
            stack.stop()


def run(mode: str) -> dict[str, Any]:
    with viewed_stack() as (stack, directory):
        return asyncio.run(with_tenant(lambda s, t: _steps(s, t, mode, directory))(stack))


def main(modes: list[str]) -> None:
    results = [run(mode) for mode in modes]
    path = RESULTS / "stalled-readers-inside.json"
    path.write_text(json.dumps(results, indent=1) + "\n")
    for result in results:
        print(result["mode"], "per added reader, KiB:")
        for where, kib in result["per_added_reader_kib"].items():
            print(f"  {where:<40} {kib:>8}")
    print(f"\nwritten: {path}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["stalled", "idle"])
