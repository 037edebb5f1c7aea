"""Small GET and LIST 500 through every relay, rounds interleaved and shuffled."""

from __future__ import annotations

import asyncio
from typing import Any

from bench.stack import Stack, run_load
from bench.workloads.common import QUICK, ROUNDS, Targets, create_configmaps, interleaved, median


async def small_get(stack: Stack, targets: Targets) -> dict[str, Any]:
    await create_configmaps(stack, targets.tenant, "small", 1, 64)
    path = f"/api/v1/namespaces/{targets.tenant.namespace}/configmaps/small-0"
    out: dict[str, Any] = {}
    for concurrency, requests in ((1, 200 if QUICK else 1000), (32, 1000 if QUICK else 6000)):
        per: dict[str, list[dict[str, Any]]] = {t: [] for t in targets.base}
        cpu: dict[str, list[float]] = {t: [] for t in targets.processes}
        for target in interleaved(list(targets.base), ROUNDS):
            process = targets.processes.get(target)
            before = stack.cpu_seconds(process) if process else 0.0
            result = await asyncio.to_thread(run_load, targets.job(target, path, concurrency=concurrency, requests=requests))
            if process:
                cpu[target].append((stack.cpu_seconds(process) - before) / result["requests"] * 1000)
            per[target].append(result)
        out[f"c{concurrency}"] = {
            t: {"rps": median([r["rps"] for r in rs]), "p50_ms": median([r["p50_ms"] for r in rs]),
                "p99_ms": median([r["p99_ms"] for r in rs]), "errors": sum(r["errors"] for r in rs)}
            for t, rs in per.items()
        }
        for target, values in cpu.items():
            out[f"c{concurrency}"][target]["cpu_ms_per_request"] = median(values)
    return out


async def list_500(stack: Stack, targets: Targets) -> dict[str, Any]:
    await create_configmaps(stack, targets.tenant, "list", 500, 900)
    path = f"/api/v1/namespaces/{targets.tenant.namespace}/configmaps"
    out: dict[str, Any] = {}
    for gzip in (False, True):
        per: dict[str, list[dict[str, Any]]] = {t: [] for t in targets.base}
        for target in interleaved(list(targets.base), ROUNDS):
            per[target].append(await asyncio.to_thread(
                run_load, targets.job(target, path, concurrency=4, requests=20 if QUICK else 100, gzip=gzip)))
        out["gzip" if gzip else "identity"] = {
            t: {"rps": median([r["rps"] for r in rs]), "p50_ms": median([r["p50_ms"] for r in rs]),
                "p99_ms": median([r["p99_ms"] for r in rs]), "bytes_per_response": rs[0]["bytes"] / max(1, rs[0]["requests"])}
            for t, rs in per.items()
        }
    return out
