"""A load generator for two ways of asking one relay the same thing (e.g.
two kinds of bearer token): one client, the two alternating in short blocks
(ABBA, so neither always goes first), the relay's CPU read around each
block. Background load on a shared machine then falls on both alike, which
rounds of seconds each cannot promise, and the two blocks of each pair can
be compared with each other (the per-block figures are in the result). A
separate process, like bench/load.py (whose main it shares); reads one
JSON job on stdin, prints one JSON result.

job: {"url", "ca_file", "headers": {name: {header: value}} (two names), "pid" (the relay's),
      "blocks", "block_requests"}
result: {name: {"requests", "errors", "p50_ms", "p99_ms", "cpu_ms_per_request" (median of blocks),
                 "p50_ms_blocks", "cpu_ms_per_request_blocks" (block k of each name form pair k)}}
"""

from __future__ import annotations

import ssl
import statistics
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.load import percentile, serve

WARM_UP = 5
"""GETs per name before anything is timed (connection and TLS set-up)."""


def cpu_seconds(pid: int) -> float:
    """On-CPU time of all the process's threads, from the scheduler's
    nanosecond counts (/proc/<pid>/task/*/schedstat): psutil's user and
    system times come in 10 ms ticks, too coarse for blocks this short."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return total / 1e9


async def run(job: dict[str, Any]) -> dict[str, Any]:
    context = ssl.create_default_context(cafile=str(job["ca_file"]))
    url, pid = str(job["url"]), int(job["pid"])
    names = list(job["headers"])
    latencies: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    block_p50: dict[str, list[float]] = {name: [] for name in names}
    errors = dict.fromkeys(names, 0)
    # One kept-alive connection per name, opened and used before anything is timed.
    sessions = {name: aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1, ssl=context),
                                            headers={**job["headers"][name], "Accept-Encoding": "identity"})
                for name in names}
    try:
        for name, session in sessions.items():
            for _ in range(WARM_UP):
                async with session.get(url) as warm:
                    await warm.read()
        for block in range(int(job["blocks"])):
            for name in names if block % 2 == 0 else names[::-1]:
                session = sessions[name]
                before = cpu_seconds(pid)
                timed: list[float] = []
                for _ in range(int(job["block_requests"])):
                    start = time.perf_counter()
                    try:
                        async with session.get(url) as response:
                            await response.read()
                            if response.status != 200:
                                errors[name] += 1
                    except aiohttp.ClientError:
                        errors[name] += 1
                    timed.append(time.perf_counter() - start)
                cpu[name].append((cpu_seconds(pid) - before) / int(job["block_requests"]) * 1000)
                latencies[name] += timed
                block_p50[name].append(percentile(timed, 0.5) * 1000)
    finally:
        for session in sessions.values():
            await session.close()
    return {name: {"requests": len(latencies[name]), "errors": errors[name],
                   "p50_ms": percentile(latencies[name], 0.5) * 1000,
                   "p99_ms": percentile(latencies[name], 0.99) * 1000,
                   "cpu_ms_per_request": statistics.median(cpu[name]),
                   "p50_ms_blocks": block_p50[name], "cpu_ms_per_request_blocks": cpu[name]}
            for name in names}


def main() -> None:
    serve(run)


if __name__ == "__main__":
    main()
