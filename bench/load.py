"""The load generator: a separate process, so its CPU never counts as the
gateway's. Reads one JSON job on stdin, prints one JSON result.

job: {"url", "headers", "concurrency", "requests", "ca_file", "gzip", "seconds" (optional: stop by then),
      "nice" (optional: run at this niceness)}
result: {"requests", "seconds", "rps", "p50_ms", "p99_ms", "errors", "bytes"}
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import sys
import time
from typing import Any, Callable, Coroutine

import aiohttp


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(job: dict[str, object]) -> dict[str, object]:
    context = ssl.create_default_context(cafile=str(job["ca_file"])) if job.get("ca_file") else None
    headers = dict(job.get("headers") or {})  # type: ignore[call-overload]
    headers["Accept-Encoding"] = "gzip" if job.get("gzip") else "identity"
    latencies: list[float] = []
    errors = 0
    received = 0
    remaining = int(job["requests"])  # type: ignore[call-overload]
    limit = float(job["seconds"]) if job.get("seconds") else None  # type: ignore[arg-type]
    stop_at = float("inf")
    connector = aiohttp.TCPConnector(limit=0, ssl=context if context else False)
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
        async def worker() -> None:
            nonlocal remaining, errors, received
            while remaining > 0 and time.perf_counter() < stop_at:
                remaining -= 1
                start = time.perf_counter()
                try:
                    async with session.get(str(job["url"]), headers=headers) as response:
                        body = await response.read()
                        received += len(body)
                        if response.status != 200:
                            errors += 1
                except aiohttp.ClientError:
                    errors += 1
                latencies.append(time.perf_counter() - start)

        # Warm the pool so connection set-up is not measured.
        async with session.get(str(job["url"]), headers=headers) as warm:
            await warm.read()
        began = time.perf_counter()
        if limit is not None:
            stop_at = began + limit
        await asyncio.gather(*(worker() for _ in range(int(job["concurrency"]))))  # type: ignore[call-overload]
        seconds = time.perf_counter() - began
    return {
        "requests": len(latencies), "seconds": seconds, "rps": len(latencies) / seconds,
        "p50_ms": percentile(latencies, 0.50) * 1000, "p99_ms": percentile(latencies, 0.99) * 1000,
        "errors": errors, "bytes": received,
    }


def serve(run: Callable[[dict[str, Any]], Coroutine[Any, Any, dict[str, Any]]]) -> None:
    """A load process's main (this one's and bench/paired_load.py's): one
    JSON job on stdin, `run` on uvloop (when installed), one JSON result
    on stdout. A job's "nice" lowers the process's priority first."""
    job = json.load(sys.stdin)
    if job.get("nice"):
        os.nice(int(job["nice"]))
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    print(json.dumps(asyncio.run(run(job))))


def main() -> None:
    serve(run)


if __name__ == "__main__":
    main()
