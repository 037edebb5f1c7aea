"""Fair share at the API server (API Priority and Fairness, the objects in
deploy/kubernetes/flowcontrol.yaml): one tenant floods LISTs straight at the
API server with its own ServiceAccount token, as a tenant holding a kubeconfig
can; another tenant's small GET is timed idle and during the flood.

Both tenants' ServiceAccounts fall in the tenant priority level, queued by
account, so the flood waits in its own queues instead of the victim's.

The method: idle and flood in alternating blocks of BLOCK_SECONDS each,
PAIRS pairs back to back (idle first in one pair, the flood first in the
next: `block_order`), and the ratio is the median over pairs of the flood
block's p99 over the idle block's (`judge`). Each pair's two halves see the
same background, so what the machine's other work does to the victim's tail
falls on both. The row's first form timed 3,000 idle GETs, then 3,000
during one flood: the idle p99 moved between 2.5 and 10 ms from run to run
with whatever else the machine did then, and decided the ratio as much as
the flood did (1.51x to 2.94x on the same code).

The flood's client runs at the lowest CPU priority. A flooding tenant's
kubectl runs on its own machine; here it shares the API server's two cores,
and reading 60+ MB/s of LIST answers through TLS in Python would take a core
from the API server and the victim alike: a contest APF has no part in.

Alone: `python -m bench --only fair_share` (its own stack; the cluster lock).
"""

from __future__ import annotations

import asyncio
import re
import statistics
from typing import Any, Awaitable, Callable

from bench.stack import Stack, Tenant, to_thread_load
from bench.workloads.common import QUICK, paired_ratio

PAIRS, BLOCK_SECONDS = (3, 3.0) if QUICK else (6, 6.0)
"""Pairs of blocks (one idle, one flooded), and how long the victim is timed in each."""
FLOOD_LEAD_SECONDS = 2.0
"""From starting the flood to timing the victim: its connections open and its queues filled."""
FLOOD_TAIL_SECONDS = 4.0
"""How much longer the flood is asked to run than the victim is timed (its and the victim's start-up,
the histogram reads): the victim's whole block is flooded, which the row checks."""
SETTLE_SECONDS = 2.0
"""After a flood ends, before the next block: the API server's answers to it drained."""

_BUCKET = re.compile(r'^apiserver_request_duration_seconds_bucket\{([^}]*)\} (\S+)$', re.MULTILINE)
_LE = re.compile(r'le="([^"]+)"')


def _job(stack: Stack, tenant: Tenant, path: str, **extra: Any) -> dict[str, Any]:
    assert stack.cluster is not None
    return {"url": stack.cluster.server + path, "headers": {"Authorization": f"Bearer {tenant.sa_token}"},
            "ca_file": str(stack.cluster.ca_file), **extra}


def _configmap_get_buckets(stack: Stack) -> dict[float, float]:
    """The API server's own latency histogram of configmap GETs, cumulative
    counts by upper bound (seconds), summed over its other labels. While the
    benchmark runs, the victim is the only client that GETs configmaps
    (controllers do so rarely): this is the victim's latency inside the
    server, APF queueing included, without its client or the network."""
    assert stack.cluster is not None
    text = stack.cluster.kubectl_run("get", "--raw", "/metrics").stdout
    buckets: dict[float, float] = {}
    for labels, count in _BUCKET.findall(text):
        if 'verb="GET"' in labels and 'resource="configmaps"' in labels:
            found = _LE.search(labels)
            if found is not None:
                bound = float(found.group(1))
                buckets[bound] = buckets.get(bound, 0.0) + float(count)
    return buckets


def server_view(before: dict[float, float], after: dict[float, float]) -> dict[str, Any]:
    """How many of the GETs between two histogram reads took longer than
    each bound inside the API server. Pure."""
    total = after.get(float("inf"), 0.0) - before.get(float("inf"), 0.0)
    over = {f"over_{int(bound * 1000)}_ms": total - (after.get(bound, 0.0) - before.get(bound, 0.0))
            for bound in (0.005, 0.025, 0.05, 0.1) if bound in after}
    return {"requests": total, **over}


def block_order(pairs: int) -> list[str]:
    """The blocks in the order they run: each pair's idle and flood blocks
    back to back, which goes first alternating pair by pair (idle, flood,
    flood, idle, ...), so neither always follows the other. Pure."""
    order: list[str] = []
    for pair in range(pairs):
        order += ["idle", "flood"] if pair % 2 == 0 else ["flood", "idle"]
    return order


def judge(idle: list[dict[str, Any]], flood: list[dict[str, Any]]) -> dict[str, Any]:
    """The row's figures from the victim's blocks (block k of each phase is
    pair k): the verdict's ratio is the median over pairs of the flood
    block's p99 over the idle block's; each phase's p50 and p99 are the
    medians of its blocks', and its server view the sum of its blocks'.
    Pure."""
    if not idle or len(idle) != len(flood):
        raise ValueError(f"pairs of blocks needed: {len(idle)} idle, {len(flood)} flooded")
    ratios = [f["p99_ms"] / i["p99_ms"] for i, f in zip(idle, flood, strict=True)]

    def phase(blocks: list[dict[str, Any]]) -> dict[str, Any]:
        views = [b["in_server"] for b in blocks if b.get("in_server")]
        return {"p50_ms": statistics.median(b["p50_ms"] for b in blocks),
                "p99_ms": statistics.median(b["p99_ms"] for b in blocks),
                "requests": sum(b["requests"] for b in blocks), "errors": sum(b["errors"] for b in blocks),
                "in_server": {key: sum(v.get(key, 0.0) for v in views) for key in (views[0] if views else {})}}

    quiet, busy = phase(idle), phase(flood)
    return {"pair_p99_ratios": ratios,
            "p99_ratio": paired_ratio([i["p99_ms"] for i in idle], [f["p99_ms"] for f in flood]),
            "p50_ratio": paired_ratio([i["p50_ms"] for i in idle], [f["p50_ms"] for f in flood]),
            "victim_idle": quiet, "victim_during_flood": busy,
            "victim_in_server": {"idle": quiet["in_server"], "during_flood": busy["in_server"]}}


async def _victim_block(stack: Stack, victim_get: dict[str, Any]) -> dict[str, Any]:
    """The victim's GETs for one block, with the API server's view of them."""
    before = await asyncio.to_thread(_configmap_get_buckets, stack)
    timed = await to_thread_load(victim_get)
    after = await asyncio.to_thread(_configmap_get_buckets, stack)
    return {**timed, "in_server": server_view(before, after)}


async def fair_share(stack: Stack, victim: Tenant, flooder: Tenant,
                     create_configmaps: Callable[[Stack, Tenant, str, int, int], Awaitable[None]],
                     *, pairs: int = PAIRS, block_seconds: float = BLOCK_SECONDS) -> dict[str, Any]:
    await create_configmaps(stack, victim, "victim", 1, 64)
    await create_configmaps(stack, flooder, "flood", 40, 4096)  # within the default tier's 50
    victim_get = _job(stack, victim, f"/api/v1/namespaces/{victim.namespace}/configmaps/victim-0",
                      concurrency=1, requests=10**9, seconds=block_seconds)
    flood = _job(stack, flooder, f"/api/v1/namespaces/{flooder.namespace}/configmaps",
                 concurrency=64, requests=10**9, seconds=FLOOD_LEAD_SECONDS + block_seconds + FLOOD_TAIL_SECONDS,
                 nice=19)
    order = block_order(pairs)
    blocks: dict[str, list[dict[str, Any]]] = {"idle": [], "flood": []}
    floods: list[dict[str, Any]] = []
    for phase in order:
        if phase == "idle":
            blocks["idle"].append(await _victim_block(stack, victim_get))
            continue
        flooding = asyncio.create_task(to_thread_load(flood))
        await asyncio.sleep(FLOOD_LEAD_SECONDS)
        timed = await _victim_block(stack, victim_get)
        if flooding.done():
            raise RuntimeError("the flood ended before the victim's block did: raise FLOOD_TAIL_SECONDS")
        floods.append(await flooding)
        blocks["flood"].append(timed)
        await asyncio.sleep(SETTLE_SECONDS)
    return {"method": "paired blocks", "pairs": pairs, "block_seconds": block_seconds, "order": order,
            "blocks": blocks, "flood": floods,
            "flood_lists_per_s": statistics.median(f["rps"] for f in floods),
            **judge(blocks["idle"], blocks["flood"])}


def fairness_verdicts(r: dict[str, Any]) -> list[tuple[str, str, bool]]:
    return [("victim GET p99 during a flood <= 2x idle", f"{r['p99_ratio']:.2f}x", r["p99_ratio"] <= 2)]
