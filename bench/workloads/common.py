"""What the workloads share: the run's sizes (BENCH_QUICK=1 shrinks every
workload), the targets every relay is reached by, and the tenant's objects."""

from __future__ import annotations

import asyncio
import os
import random
import statistics
from typing import Any, Sequence

import aiohttp

from bench.stack import Stack, Tenant
from proxy.server.heap import TRIM_INTERVAL_SECONDS

QUICK = os.environ.get("BENCH_QUICK") == "1"
ROUNDS = 2 if QUICK else 5
SOAK_SECONDS = int(os.environ.get("BENCH_SOAK_SECONDS", "60" if QUICK else "600"))
MAX_WATCHES = int(os.environ.get("BENCH_MAX_WATCHES", "200" if QUICK else "2000"))
HEAP_TRIM_WAIT = TRIM_INTERVAL_SECONDS + 5
"""Long enough after a burst closes for the gateway to have trimmed its heap once."""


def median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def paired_ratio(baseline: Sequence[float], other: Sequence[float]) -> float:
    """The median over pairs of blocks of other / baseline. Each pair ran
    back to back, so a burst of background load is in both of its halves;
    a median of each side's blocks would leave it in whichever side it hit.
    Pure."""
    return statistics.median(b / a for a, b in zip(baseline, other, strict=True))


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


class Targets:
    """The same Kubernetes path reached every way: the three the issue names;
    the bare aiohttp relay, which shows what the chosen libraries cost on
    this machine before the gateway does any work of its own; and the
    compiled references (Go's reverse proxy, nginx, a plain TCP hop), which
    show what a relay in another language would cost here."""

    def __init__(self, stack: Stack, tenant: Tenant) -> None:
        assert stack.cluster is not None
        self.stack, self.tenant = stack, tenant
        self.base = {
            "direct": (stack.cluster.server, {"Authorization": f"Bearer {tenant.sa_token}"}, str(stack.cluster.ca_file)),
            "gateway": (f"{stack.gateway_url}/k8s/{tenant.workspace_id}",
                        {"Authorization": f"Bearer {tenant.session_token}"}, str(stack.ca_file)),
            "kubectl-proxy": (stack.proxy_url, {}, None),
            "aiohttp-floor": (stack.floor_url, {}, str(stack.ca_file)),
        }
        self.processes = {"gateway": stack.gateway, "aiohttp-floor": stack.floor_relay}
        """The relays whose CPU per request is read from /proc."""
        for name, reference in stack.references.items():
            self.base[name] = (reference.url, reference.headers, reference.ca_file)
            self.processes[name] = reference.process

    def job(self, target: str, path: str, **extra: Any) -> dict[str, Any]:
        base, headers, ca = self.base[target]
        return {"url": base + path, "headers": headers, "ca_file": ca, **extra}


def interleaved(targets: list[str], rounds: int) -> list[str]:
    order = []
    for _ in range(rounds):
        batch = list(targets)
        random.shuffle(batch)
        order += batch
    return order


async def create_configmaps(stack: Stack, tenant: Tenant, prefix: str, count: int, size: int) -> None:
    assert stack.cluster is not None
    url = f"{stack.cluster.server}/api/v1/namespaces/{tenant.namespace}/configmaps"
    headers = {"Authorization": f"Bearer {tenant.sa_token}"}
    import ssl

    context = ssl.create_default_context(cafile=str(stack.cluster.ca_file))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
        semaphore = asyncio.Semaphore(16)

        async def one(i: int) -> None:
            async with semaphore:
                body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{prefix}-{i}"},
                        "data": {"v": "x" * size}}
                async with session.post(url, json=body, headers=headers) as r:
                    assert r.status in (201, 409), await r.text()

        await asyncio.gather(*(one(i) for i in range(count)))
