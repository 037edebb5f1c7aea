"""Fair share at the API server (API Priority and Fairness, the objects in
deploy/kubernetes/flowcontrol.yaml): one tenant floods LISTs straight at the
API server with its own ServiceAccount token, as a tenant holding a kubeconfig
can; another tenant's small GET is timed idle and during the flood.

Both tenants' ServiceAccounts fall in the tenant priority level, queued by
account, so the flood waits in its own queues instead of the victim's.

The flood's client runs at the lowest CPU priority. A flooding tenant's
kubectl runs on its own machine; here it shares the API server's two cores,
and reading 60+ MB/s of LIST answers through TLS in Python would take a core
from the API server and the victim alike: a contest APF has no part in.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, Awaitable, Callable

from bench.stack import Stack, Tenant, to_thread_load

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


def _server_view(before: dict[float, float], after: dict[float, float]) -> dict[str, Any]:
    """How many of the GETs between two histogram reads took longer than
    each bound inside the API server. Pure."""
    total = after.get(float("inf"), 0.0) - before.get(float("inf"), 0.0)
    over = {f"over_{int(bound * 1000)}_ms": total - (after.get(bound, 0.0) - before.get(bound, 0.0))
            for bound in (0.005, 0.025, 0.05, 0.1) if bound in after}
    return {"requests": total, **over}


async def fair_share(stack: Stack, victim: Tenant, flooder: Tenant,
                     create_configmaps: Callable[[Stack, Tenant, str, int, int], Awaitable[None]],
                     *, requests: int, flood_seconds: float) -> dict[str, Any]:
    await create_configmaps(stack, victim, "victim", 1, 64)
    await create_configmaps(stack, flooder, "flood", 40, 4096)  # within the default tier's 50
    victim_get = _job(stack, victim, f"/api/v1/namespaces/{victim.namespace}/configmaps/victim-0",
                      concurrency=1, requests=requests)
    flood = _job(stack, flooder, f"/api/v1/namespaces/{flooder.namespace}/configmaps",
                 concurrency=64, requests=10**9, seconds=flood_seconds, nice=19)
    before_idle = await asyncio.to_thread(_configmap_get_buckets, stack)
    idle = await to_thread_load(victim_get)
    after_idle = await asyncio.to_thread(_configmap_get_buckets, stack)
    flooding = asyncio.create_task(to_thread_load(flood))
    await asyncio.sleep(2)  # the flood has its connections open and the queues filled
    before_busy = await asyncio.to_thread(_configmap_get_buckets, stack)
    busy = await to_thread_load({**victim_get, "seconds": flood_seconds - 4})
    after_busy = await asyncio.to_thread(_configmap_get_buckets, stack)
    flooded = await flooding
    return {"victim_idle": idle, "victim_during_flood": busy, "flood": flooded,
            "p99_ratio": busy["p99_ms"] / idle["p99_ms"],
            # Where the victim's tail is: the API server's own histogram of its GETs.
            "victim_in_server": {"idle": _server_view(before_idle, after_idle),
                                 "during_flood": _server_view(before_busy, after_busy)}}


def fairness_verdicts(r: dict[str, Any]) -> list[tuple[str, str, bool]]:
    return [("victim GET p99 during a flood <= 2x idle", f"{r['p99_ratio']:.2f}x", r["p99_ratio"] <= 2)]
