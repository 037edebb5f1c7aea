"""Kubeconfig issuance and onboarding through the gateway, against the raw
API calls made with the gateway's own credential."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any, Awaitable, Callable

import aiohttp

from bench.stack import Stack
from bench.workloads.common import QUICK, ROUNDS, Targets, interleaved, median, pct


async def timed_calls(count: int, concurrency: int, call: Callable[[int], Awaitable[None]]) -> dict[str, float]:
    latencies: list[float] = []
    semaphore = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with semaphore:
            start = time.perf_counter()
            await call(i)
            latencies.append(time.perf_counter() - start)

    began = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(count)))
    seconds = time.perf_counter() - began
    return {"rate": count / seconds, "p50_ms": pct(latencies, 0.5) * 1000, "p99_ms": pct(latencies, 0.99) * 1000}


def medians_of_rounds(rounds: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    return {name: {k: median([r[k] for r in results]) for k in ("rate", "p50_ms", "p99_ms")}
            for name, results in rounds.items()}


def gateway_identity_session(stack: Stack) -> aiohttp.ClientSession:
    """The gateway's own client certificate: the 'raw' rate of its API calls."""
    import ssl

    assert stack.cluster is not None
    pki_dir = stack.cluster.state_dir / "pki"
    context = ssl.create_default_context(cafile=str(stack.cluster.ca_file))
    context.load_cert_chain(pki_dir / "gateway.crt", pki_dir / "gateway.key")
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, ssl=context))


async def issuance(stack: Stack, targets: Targets) -> dict[str, Any]:
    assert stack.cluster is not None
    tenant, count = targets.tenant, 50 if QUICK else 300
    server = stack.cluster.server
    headers = {"Authorization": f"Bearer {tenant.session_token}"}
    async with stack.session() as gw, gateway_identity_session(stack) as raw:
        async def via_gateway(_i: int) -> None:
            async with gw.get(f"{stack.gateway_url}/api/v1/workspaces/credentials/kubeconfig", headers=headers) as r:
                assert r.status == 200, await r.text()
                await r.read()

        async def raw_token(_i: int) -> None:
            async with raw.post(f"{server}/api/v1/namespaces/{tenant.namespace}/serviceaccounts/sa-tenant-admin/token",
                                json={"spec": {"expirationSeconds": 7200}}) as r:
                assert r.status == 201
                await r.read()

        rounds: dict[str, list[dict[str, float]]] = {"gateway": [], "raw": []}
        for name in interleaved(["gateway", "raw"], ROUNDS):
            rounds[name].append(await timed_calls(count // ROUNDS, 8, via_gateway if name == "gateway" else raw_token))
    return medians_of_rounds(rounds)


async def onboarding(stack: Stack) -> dict[str, Any]:
    from provisioning import manifests
    from provisioning.tiers import DEFAULT_TIERS

    assert stack.cluster is not None
    per_round = 10 if QUICK else 20
    async with stack.session() as gw, gateway_identity_session(stack) as raw:
        tokens = []
        for _ in range(per_round * ROUNDS):
            email = f"onb-{random.randrange(1 << 40)}@example.test"
            await (await gw.post(f"{stack.gateway_url}/api/v1/auth/register", json={"email": email, "password": "benchmark passphrase 1"})).read()
            async with gw.post(f"{stack.gateway_url}/api/v1/auth/login", json={"email": email, "password": "benchmark passphrase 1"}) as r:
                tokens.append((await r.json())["token"])
        unused = iter(tokens)
        statuses: list[str] = []

        async def via_gateway(_i: int) -> None:
            async with gw.post(f"{stack.gateway_url}/api/v1/workspaces/init", json={},
                               headers={"Authorization": f"Bearer {next(unused)}"}) as r:
                statuses.append((await r.json())["status"])

        async def raw_creates(_i: int) -> None:
            ns = f"tenant-rawbench-{random.randrange(1 << 40)}"  # the confinement policy admits only tenant-*
            for step in manifests.onboarding_steps(ns, "bench", DEFAULT_TIERS["basic"], "tenant-admin"):
                async with raw.post(stack.cluster.server + step.collection, json=step.body) as r:  # type: ignore[union-attr]
                    assert r.status == 201, await r.text()

        rounds: dict[str, list[dict[str, float]]] = {"gateway": [], "raw": []}
        for name in interleaved(["gateway", "raw"], ROUNDS):
            rounds[name].append(await timed_calls(per_round, 4, via_gateway if name == "gateway" else raw_creates))
    return {**medians_of_rounds(rounds), "half_made": sum(1 for s in statuses if s != "provisioned")}
