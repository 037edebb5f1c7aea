"""Fair share at the API server (API Priority and Fairness, the objects in
deploy/kubernetes/flowcontrol.yaml): one tenant floods LISTs straight at the
API server with its own ServiceAccount token, as a tenant holding a kubeconfig
can; another tenant's small GET is timed idle and during the flood.

Both tenants' ServiceAccounts fall in the tenant priority level, queued by
namespace, so the flood waits in its own queues instead of the victim's.

The flood's client runs at the lowest CPU priority. A flooding tenant's
kubectl runs on its own machine; here it shares the API server's two cores,
and reading 60+ MB/s of LIST answers through TLS in Python would take a core
from the API server and the victim alike: a contest APF has no part in.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

from bench.stack import Stack, Tenant, to_thread_load


def _job(stack: Stack, tenant: Tenant, path: str, **extra: Any) -> dict[str, Any]:
    assert stack.cluster is not None
    return {"url": stack.cluster.server + path, "headers": {"Authorization": f"Bearer {tenant.sa_token}"},
            "ca_file": str(stack.cluster.ca_file), **extra}


async def fair_share(stack: Stack, victim: Tenant, flooder: Tenant,
                     create_configmaps: Callable[[Stack, Tenant, str, int, int], Awaitable[None]],
                     *, requests: int, flood_seconds: float) -> dict[str, Any]:
    await create_configmaps(stack, victim, "victim", 1, 64)
    await create_configmaps(stack, flooder, "flood", 40, 4096)  # within the default tier's 50
    victim_get = _job(stack, victim, f"/api/v1/namespaces/{victim.namespace}/configmaps/victim-0",
                      concurrency=1, requests=requests)
    flood = _job(stack, flooder, f"/api/v1/namespaces/{flooder.namespace}/configmaps",
                 concurrency=64, requests=10**9, seconds=flood_seconds, nice=19)
    idle = await to_thread_load(victim_get)
    flooding = asyncio.create_task(to_thread_load(flood))
    await asyncio.sleep(2)  # the flood has its connections open and the queues filled
    busy = await to_thread_load({**victim_get, "seconds": flood_seconds - 4})
    flooded = await flooding
    return {"victim_idle": idle, "victim_during_flood": busy, "flood": flooded,
            "p99_ratio": busy["p99_ms"] / idle["p99_ms"]}


def fairness_verdicts(r: dict[str, Any]) -> list[tuple[str, str, bool]]:
    return [("victim GET p99 during a flood <= 2x idle", f"{r['p99_ratio']:.2f}x", r["p99_ratio"] <= 2)]
