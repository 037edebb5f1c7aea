"""Where the binding Secret's cost goes (issue 37's binding row): the API
server's CPU per call, for a bare TokenRequest, one bound to a Secret that
exists, the binding Secret's create and delete in a tenant's namespace, and
the same create where less of the tenant's admission applies (a namespace
labelled like a tenant's, so the admission policies match, but with no
ResourceQuota; a plain namespace, neither). Read from /proc like the
issuance row (stack_cpu_seconds), 8 clients, interleaved rounds, medians.
Alone: `python -m bench.workloads.binding_cost` (its own stack; the
cluster lock), written to results/binding-cost.json."""

from __future__ import annotations

import asyncio
import ssl
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from bench.stack import Stack, Tenant
from bench.workloads.common import QUICK, interleaved, median
from bench.workloads.issuing import stack_cpu_seconds

CLIENTS = 8
CASES = ("token", "token_bound", "create", "delete", "create_admission_only", "create_plain")


def _client(stack: Stack, stem: str) -> aiohttp.ClientSession:
    """The cluster identity `stem` of the stack's PKI (`gateway`, `admin`)."""
    assert stack.cluster is not None
    context = ssl.create_default_context(cafile=str(stack.cluster.ca_file))
    pki_dir = stack.cluster.state_dir / "pki"
    context.load_cert_chain(pki_dir / f"{stem}.crt", pki_dir / f"{stem}.key")
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, ssl=context))


async def _cpu_per_call(stack: Stack, count: int, call: Callable[[int], Awaitable[None]]) -> dict[str, float]:
    semaphore = asyncio.Semaphore(CLIENTS)

    async def one(i: int) -> None:
        async with semaphore:
            await call(i)

    before = stack_cpu_seconds(stack)
    began = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(count)))
    seconds = time.perf_counter() - began
    after = stack_cpu_seconds(stack)
    return {"rate": count / seconds,
            "apiserver_ms": (after["kube-apiserver"] - before["kube-apiserver"]) * 1000 / count,
            "etcd_ms": (after["etcd"] - before["etcd"]) * 1000 / count}


async def binding_cost(stack: Stack, tenant: Tenant) -> dict[str, Any]:
    from provisioning import manifests

    assert stack.cluster is not None
    server, namespace = stack.cluster.server, tenant.namespace
    count = 60 if QUICK else 300
    async with _client(stack, "gateway") as gateway, _client(stack, "admin") as admin:
        async with admin.get(f"{server}/api/v1/namespaces/{namespace}") as r:
            labels = (await r.json())["metadata"]["labels"]
        elsewhere = {"create_admission_only": f"bench-labelled-{uuid.uuid4().hex[:8]}",
                     "create_plain": f"bench-plain-{uuid.uuid4().hex[:8]}"}
        for case, name in elsewhere.items():
            ns_labels = ({k: v for k, v in labels.items() if k != "kubernetes.io/metadata.name"}
                         if case == "create_admission_only" else {})
            async with admin.post(f"{server}/api/v1/namespaces",
                                  json={"metadata": {"name": name, "labels": ns_labels}}) as r:
                assert r.status == 201, await r.text()

        def secrets_url(ns: str) -> str:
            return f"{server}/api/v1/namespaces/{ns}/secrets"

        async def create(http: aiohttp.ClientSession, ns: str) -> tuple[str, str]:
            credential = str(uuid.uuid4())
            async with http.post(secrets_url(ns), json=manifests.credential_secret(ns, tenant.workspace_id,
                                                                                   credential)) as r:
                assert r.status == 201, await r.text()
                body = await r.json()
            return body["metadata"]["name"], body["metadata"]["uid"]

        token_url = f"{server}/api/v1/namespaces/{namespace}/serviceaccounts/sa-tenant-admin/token"
        bound_to = await create(gateway, namespace)
        made: dict[str, list[str]] = {}

        async def token(_: int) -> None:
            async with gateway.post(token_url, json={"spec": {"expirationSeconds": 7200}}) as r:
                assert r.status == 201, await r.text()
                await r.read()

        async def token_bound(_: int) -> None:
            bound = manifests.token_request(7200, None, {"name": bound_to[0], "uid": bound_to[1]})
            async with gateway.post(token_url, json=bound) as r:
                assert r.status == 201, await r.text()
                await r.read()

        def creating(http: aiohttp.ClientSession, ns: str) -> Callable[[int], Awaitable[None]]:
            async def call(_: int) -> None:
                made.setdefault(ns, []).append((await create(http, ns))[0])
            return call

        async def delete_made(http: aiohttp.ClientSession, ns: str) -> dict[str, float]:
            names = made.pop(ns, [])

            async def call(i: int) -> None:
                async with http.delete(f"{secrets_url(ns)}/{names[i]}") as r:
                    assert r.status == 200, await r.text()
            return await _cpu_per_call(stack, len(names), call) if names else {}

        rounds: dict[str, list[dict[str, float]]] = {case: [] for case in CASES}

        async def run(case: str) -> None:
            if case == "token":
                rounds[case].append(await _cpu_per_call(stack, count, token))
            elif case == "token_bound":
                rounds[case].append(await _cpu_per_call(stack, count, token_bound))
            elif case == "create":  # then "delete": the same Secrets, by the gateway
                rounds[case].append(await _cpu_per_call(stack, count, creating(gateway, namespace)))
                rounds["delete"].append(await delete_made(gateway, namespace))
            elif case in elsewhere:
                rounds[case].append(await _cpu_per_call(stack, count, creating(admin, elsewhere[case])))
                await delete_made(admin, elsewhere[case])

        for case in interleaved([case for case in CASES if case != "delete"], 3):
            await run(case)
        for name in elsewhere.values():
            async with admin.delete(f"{server}/api/v1/namespaces/{name}") as r:
                await r.read()
    result: dict[str, Any] = {case: {key: median([r[key] for r in results]) for key in results[0]}
                              for case, results in rounds.items()}
    bare = result["token"]["apiserver_ms"]
    result["binding_vs_bare"] = (result["create"]["apiserver_ms"] + result["token_bound"]["apiserver_ms"]
                                 + result["delete"]["apiserver_ms"]) / bare
    result["claimed_vs_bare"] = result["token_bound"]["apiserver_ms"] / bare
    return result


def print_binding_cost(result: dict[str, Any]) -> None:
    print(f"\n{'API server CPU per call, 8 clients':<44} {'per s':>8} {'apiserver ms':>13} {'etcd ms':>8}")
    for case in CASES:
        row = result[case]
        print(f"  {case:<42} {row['rate']:8.0f} {row['apiserver_ms']:13.2f} {row['etcd_ms']:8.2f}")
    print(f"  binding (create + bound token + delete) / bare token: {result['binding_vs_bare']:.2f}x")
    print(f"  bound token to a spare / bare token:                  {result['claimed_vs_bare']:.2f}x")


def binding_verdicts(result: dict[str, Any]) -> list[tuple[str, str, bool]]:
    ratio = result["binding_vs_bare"]
    return [("binding's API-server CPU <= 1.15x a bare token", f"{ratio:.2f}x", ratio <= 1.15)]


if __name__ == "__main__":
    from bench.alone import run_alone, with_tenant

    run_alone("binding-cost", with_tenant(binding_cost), binding_verdicts, print_binding_cost)
