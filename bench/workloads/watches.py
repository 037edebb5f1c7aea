"""Open watches through the gateway: memory and descriptors per stream,
memory after they close, and delivery latency through every relay."""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
from typing import Any

import aiohttp

from bench.stack import Stack
from bench.workloads.common import HEAP_TRIM_WAIT, MAX_WATCHES, Targets, pct


async def watches(stack: Stack, targets: Targets) -> dict[str, Any]:
    """Memory and descriptors per open watch (TLS both legs), whether memory
    comes back once the watches close (two bursts: a ratchet shows as the
    second ending higher than the first), and delivery latency."""
    tenant = targets.tenant
    # A selector nothing matches: the streams stay open and idle, so what is
    # measured is the cost of an open watch, not of relaying its initial list.
    path = f"/api/v1/namespaces/{tenant.namespace}/configmaps?watch=1&labelSelector=bench%3Didle-watch"
    base, headers, _ = targets.base["gateway"]

    async def burst(steps: list[int]) -> list[dict[str, float]]:
        """Open watches up to each step (sampling the gateway at each), close them all."""
        samples = []
        async with stack.session(timeout=aiohttp.ClientTimeout(total=None)) as session:
            open_streams: list[aiohttp.ClientResponse] = []
            for step in steps:
                while len(open_streams) < step:
                    batch = [session.get(base + path, headers=headers) for _ in range(min(100, step - len(open_streams)))]
                    opened = await asyncio.gather(*batch)
                    refused = [r.status for r in opened if r.status != 200]
                    if refused:  # a cap or an error would be measured as a cheap "watch"
                        raise RuntimeError(f"{len(refused)} watches refused: {sorted(set(refused))}")
                    open_streams += opened
                await asyncio.sleep(2)
                samples.append({"watches": step, "rss_mib": stack.gateway_rss_mib(), "fds": stack.gateway_fds()})
            for response in open_streams:
                response.close()
        await asyncio.sleep(HEAP_TRIM_WAIT)
        return samples

    samples = await burst([0, MAX_WATCHES // 4, MAX_WATCHES // 2, MAX_WATCHES])
    after_close = [stack.gateway_rss_mib()]
    await burst([MAX_WATCHES])
    after_close.append(stack.gateway_rss_mib())
    base_rss, base_fds = samples[0]["rss_mib"], samples[0]["fds"]
    top = samples[-1]
    per_stream = {
        "kib_rss_per_watch": (top["rss_mib"] - base_rss) * 1024 / max(1, top["watches"]),
        "fds_per_watch": (top["fds"] - base_fds) / max(1, top["watches"]),
    }
    return {"samples": samples, **per_stream, "rss_after_close_mib": after_close,
            "delivery": await delivery_latency(stack, targets)}


async def delivery_latency(stack: Stack, targets: Targets, watchers: int = 20, events: int = 30) -> dict[str, Any]:
    """Objects created at a steady 10/s; every watcher timestamps each arrival."""
    tenant = targets.tenant
    path = f"/api/v1/namespaces/{tenant.namespace}/configmaps?watch=1&labelSelector=bench%3Ddelivery"
    import ssl

    contexts = {t: ssl.create_default_context(cafile=ca) if ca else None for t, (_, _, ca) in targets.base.items()}
    latencies: dict[str, list[float]] = {t: [] for t in targets.base}
    arrivals: dict[str, dict[str, list[float]]] = {t: {} for t in targets.base}
    created: dict[str, float] = {}

    async def watch(target: str, session: aiohttp.ClientSession, ready: asyncio.Event) -> None:
        base, headers, _ = targets.base[target]
        async with session.get(base + path, headers=headers) as response:
            ready.set()
            async for line in response.content:
                # Read before parsing: 40 watchers share this loop, and each
                # parse would otherwise delay the timestamps of those after it.
                arrived = time.perf_counter()
                name = json.loads(line)["object"]["metadata"]["name"]
                if name in created:
                    latencies[target].append((arrived - created[name]) * 1000)
                    arrivals[target].setdefault(name, []).append(arrived)

    sessions = {t: aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, ssl=c if c else False),
                                         timeout=aiohttp.ClientTimeout(total=None)) for t, c in contexts.items()}
    tasks, readies = [], []
    for target, session in sessions.items():
        for _ in range(watchers):
            ready = asyncio.Event()
            readies.append(ready)
            tasks.append(asyncio.create_task(watch(target, session, ready)))
    # A relay that holds a watch's headers back would otherwise hang the run here.
    await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 60)
    await asyncio.sleep(1)
    assert stack.cluster is not None
    import ssl as _ssl

    direct_context = _ssl.create_default_context(cafile=str(stack.cluster.ca_file))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=direct_context)) as writer:
        for i in range(events):
            name = f"delivery-{i}-{random.randrange(1 << 30)}"
            created[name] = time.perf_counter()
            body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"bench": "delivery"}}}
            async with writer.post(f"{stack.cluster.server}/api/v1/namespaces/{tenant.namespace}/configmaps", json=body,
                                   headers={"Authorization": f"Bearer {tenant.sa_token}"}) as r:
                assert r.status == 201
            await asyncio.sleep(0.1)
    await asyncio.sleep(1)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for session in sessions.values():
        await session.close()
    return {t: {"p50_ms": pct(v, 0.5), "p99_ms": pct(v, 0.99), "received": len(v), "expected": watchers * events,
                **({} if t == "direct" else added_by_event(arrivals["direct"], arrivals[t]))}
            for t, v in latencies.items()}


def added_by_event(direct: dict[str, list[float]], relayed: dict[str, list[float]]) -> dict[str, float]:
    """What a relay adds to each delivery, paired by event: its watchers'
    arrivals less the median arrival of the same event at the direct
    watchers. A stall both see (the create itself slow, the API server
    busy) cancels out, which comparing the two p99s does not. Pure."""
    added = [(t - statistics.median(direct[name])) * 1000
             for name, times in relayed.items() if direct.get(name) for t in times]
    # Beside it, by rank: the k-th relayed arrival of an event less its k-th
    # direct one. The API server hands an event to its watchers one after
    # another, in no fixed order; with thousands watching, the last direct
    # watcher can get it well after the median, and so can a relayed one,
    # by the API server's doing alone. `direct_spread` is that: per event,
    # the last direct arrival less the first.
    by_rank = [(t - d) * 1000 for name, times in relayed.items() if direct.get(name)
               for t, d in zip(sorted(times), _ranked(sorted(direct[name]), len(times)))]
    spread = [(max(times) - min(times)) * 1000 for times in direct.values() if times]
    return {"added_p50_ms": pct(added, 0.5), "added_p99_ms": pct(added, 0.99),
            "added_by_rank_p50_ms": pct(by_rank, 0.5), "added_by_rank_p99_ms": pct(by_rank, 0.99),
            "direct_spread_p50_ms": pct(spread, 0.5), "direct_spread_p99_ms": pct(spread, 0.99)}


def _ranked(ordered: list[float], n: int) -> list[float]:
    """`n` of `ordered` at the same ranks (quantiles) as n arrivals would
    have: all of them when the counts agree. Pure."""
    if n == len(ordered):
        return ordered
    return [ordered[min(len(ordered) - 1, round(k * (len(ordered) - 1) / max(1, n - 1)))] for k in range(n)]
