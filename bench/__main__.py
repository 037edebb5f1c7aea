"""`make bench`: the gateway against the physical limit (direct to the API
server) and the peer baseline (`kubectl proxy`), measured side by side in one
run, rounds interleaved and shuffled, every target acting as the same tenant
ServiceAccount. Writes bench/results/latest.json, adds a row to
bench/results/history.csv (bench/record.py) and prints a table.

BENCH_QUICK=1 shrinks every workload (a smoke run, not a measurement).
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from typing import Any, Awaitable, Callable

import aiohttp

from bench.fairness import fair_share, fairness_verdicts
from bench.pods import pod_streams, pod_verdicts
from bench.record import record
from bench.rolling import rolling_restart, rolling_verdicts
from bench.sso import preflight, print_sso, sso, sso_verdicts
from bench.sso import settings as sso_settings
from bench.stack import Stack, Tenant, run_load, temp_root
from proxy.heap import TRIM_INTERVAL_SECONDS

QUICK = os.environ.get("BENCH_QUICK") == "1"
ROUNDS = 2 if QUICK else 5
SOAK_SECONDS = int(os.environ.get("BENCH_SOAK_SECONDS", "60" if QUICK else "600"))
MAX_WATCHES = int(os.environ.get("BENCH_MAX_WATCHES", "200" if QUICK else "2000"))
HEAP_TRIM_WAIT = TRIM_INTERVAL_SECONDS + 5
"""Long enough after a burst closes for the gateway to have trimmed its heap once."""


def median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


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


# -- workloads -----------------------------------------------------------------

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
    created: dict[str, float] = {}

    async def watch(target: str, session: aiohttp.ClientSession, ready: asyncio.Event) -> None:
        base, headers, _ = targets.base[target]
        async with session.get(base + path, headers=headers) as response:
            ready.set()
            async for line in response.content:
                name = json.loads(line)["object"]["metadata"]["name"]
                arrived = time.perf_counter()
                if name in created:
                    latencies[target].append((arrived - created[name]) * 1000)

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
    return {t: {"p50_ms": pct(v, 0.5), "p99_ms": pct(v, 0.99), "received": len(v), "expected": watchers * events}
            for t, v in latencies.items()}


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


async def cold_burst(stack: Stack) -> dict[str, Any]:
    async with stack.session() as session:
        tenant = await stack.new_tenant(session)
        before = await stack.metric(session, 'tenant_gateway_token_requests_total{result="success"}')
        url = f"{stack.gateway_url}/k8s/{tenant.workspace_id}/api/v1/namespaces/{tenant.namespace}/configmaps"
        headers = {"Authorization": f"Bearer {tenant.session_token}"}

        async def one() -> int:
            async with session.get(url, headers=headers) as r:
                await r.read()
                return r.status

        statuses = await asyncio.gather(*(one() for _ in range(8)))
        after = await stack.metric(session, 'tenant_gateway_token_requests_total{result="success"}')
        warm_before = after
        # The gateway counts every connection taken from its pool; PostgreSQL's
        # own counters lag by up to 10 s and include the earlier set-up.
        checkouts_before = await stack.metric(session, "tenant_gateway_database_checkouts_total")
        for _ in range(WARM_REQUESTS):
            await one()
        checkouts_after = await stack.metric(session, "tenant_gateway_database_checkouts_total")
        warm_after = await stack.metric(session, 'tenant_gateway_token_requests_total{result="success"}')
    return {"statuses": statuses, "token_requests": after - before, "warm_token_requests": warm_after - warm_before,
            "warm_requests": WARM_REQUESTS, "warm_database_checkouts": checkouts_after - checkouts_before}


WARM_REQUESTS = 200


async def soak(stack: Stack, targets: Targets) -> dict[str, Any]:
    samples = []
    path = f"/api/v1/namespaces/{targets.tenant.namespace}/configmaps/small-0"
    deadline = time.monotonic() + SOAK_SECONDS
    async with stack.session() as session:
        while time.monotonic() < deadline:
            await asyncio.to_thread(run_load, targets.job("gateway", path, concurrency=8, requests=400))
            tasks = await stack.metric(session, "tenant_gateway_event_loop_tasks")
            samples.append({"t": round(SOAK_SECONDS - (deadline - time.monotonic())), "rss_mib": stack.gateway_rss_mib(),
                            "fds": stack.gateway_fds(), "tasks": tasks})
            await asyncio.sleep(max(0.0, min(10.0, deadline - time.monotonic())))
    half = max(1, len(samples) // 2)
    first, last = samples[half - 1], samples[-1]  # after warm-up
    return {"samples": samples, "rss_drift": (last["rss_mib"] - first["rss_mib"]) / first["rss_mib"],
            "fd_drift": last["fds"] - first["fds"], "task_drift": last["tasks"] - first["tasks"]}


# -- report ----------------------------------------------------------------------

def verdicts(r: dict[str, Any]) -> list[tuple[str, str, bool]]:
    g1, g32 = r["small_get"]["c1"], r["small_get"]["c32"]
    lst = r["list_500"]
    w, iss, onb = r["watches"], r["issuance"], r["onboarding"]
    delivery = w["delivery"]
    added_p99 = delivery["gateway"]["p99_ms"] - delivery["direct"]["p99_ms"]
    checks = [
        ("GET c1 p50 <= 1.3x direct", f"{g1['gateway']['p50_ms'] / g1['direct']['p50_ms']:.2f}x",
         g1["gateway"]["p50_ms"] <= 1.3 * g1["direct"]["p50_ms"]),
        ("GET c32 rps >= 0.75x direct", f"{g32['gateway']['rps'] / g32['direct']['rps']:.2f}x",
         g32["gateway"]["rps"] >= 0.75 * g32["direct"]["rps"]),
        ("GET c32 rps >= kubectl proxy", f"{g32['gateway']['rps'] / g32['kubectl-proxy']['rps']:.2f}x",
         g32["gateway"]["rps"] >= g32["kubectl-proxy"]["rps"]),
        ("gateway CPU <= 0.3 ms/request", f"{g32['gateway']['cpu_ms_per_request']:.3f} ms",
         g32["gateway"]["cpu_ms_per_request"] <= 0.3),
        ("LIST 500 identity <= 1.15x direct", f"{lst['identity']['gateway']['p50_ms'] / lst['identity']['direct']['p50_ms']:.2f}x",
         lst["identity"]["gateway"]["p50_ms"] <= 1.15 * lst["identity"]["direct"]["p50_ms"]),
        ("LIST 500 gzip <= 1.05x direct", f"{lst['gzip']['gateway']['p50_ms'] / lst['gzip']['direct']['p50_ms']:.2f}x",
         lst["gzip"]["gateway"]["p50_ms"] <= 1.05 * lst["gzip"]["direct"]["p50_ms"]),
        ("watch RSS <= 100 KiB/stream", f"{w['kib_rss_per_watch']:.0f} KiB", w["kib_rss_per_watch"] <= 100),
        ("watch fds == 2/stream", f"{w['fds_per_watch']:.2f}", w["fds_per_watch"] <= 2.05),
        ("watch added delivery p99 <= 5 ms", f"{added_p99:.2f} ms", added_p99 <= 5),
        ("no watch event lost", f"{delivery['gateway']['received']}/{delivery['gateway']['expected']}",
         delivery["gateway"]["received"] == delivery["gateway"]["expected"]),
        ("issuance >= 0.85x raw TokenRequest", f"{iss['gateway']['rate'] / iss['raw']['rate']:.2f}x",
         iss["gateway"]["rate"] >= 0.85 * iss["raw"]["rate"]),
        ("issuance p99 <= 50 ms", f"{iss['gateway']['p99_ms']:.1f} ms", iss["gateway"]["p99_ms"] <= 50),
        ("onboarding >= 0.85x raw creates", f"{onb['gateway']['rate'] / onb['raw']['rate']:.2f}x",
         onb["gateway"]["rate"] >= 0.85 * onb["raw"]["rate"]),
        ("onboarding p99 <= 250 ms", f"{onb['gateway']['p99_ms']:.0f} ms", onb["gateway"]["p99_ms"] <= 250),
        ("onboarding: none half-made", str(onb["half_made"]), onb["half_made"] == 0),
        ("cold burst: 1 TokenRequest", str(r["cold_burst"]["token_requests"]), r["cold_burst"]["token_requests"] == 1),
        ("warm request: 0 TokenRequests", str(r["cold_burst"]["warm_token_requests"]),
         r["cold_burst"]["warm_token_requests"] == 0),
        ("warm request: 0 database queries",
         f"{r['cold_burst']['warm_database_checkouts']:.0f} in {r['cold_burst']['warm_requests']} requests",
         r["cold_burst"]["warm_database_checkouts"] == 0),
        ("local cluster start < 30 s", f"{r['cluster_start_seconds']:.1f} s", r["cluster_start_seconds"] < 30),
        ("idle RSS <= 80 MiB", f"{r['idle_rss_mib']:.1f} MiB", r["idle_rss_mib"] <= 80),
        ("soak RSS drift <= 5%", f"{r['soak']['rss_drift'] * 100:.1f}%", abs(r["soak"]["rss_drift"]) <= 0.05),
        # Not one of the issue's targets: the soak's "no trend", for bursts of watches.
        ("RSS after watch bursts: no ratchet", " -> ".join(f"{m:.0f}" for m in w["rss_after_close_mib"]) + " MiB",
         w["rss_after_close_mib"][1] <= 1.05 * w["rss_after_close_mib"][0]),
    ]
    return (checks + pod_verdicts(r["pod_streams"]) + fairness_verdicts(r["fair_share"])
            + rolling_verdicts(r["rolling_restart"]) + sso_verdicts(r["sso"]))


def print_fair_share(r: dict[str, Any]) -> None:
    print("\nfair share           victim GET      p50 ms   p99 ms   inside the API server: over 25 ms, over 50 ms")
    for phase, load in (("idle", "victim_idle"), ("during_flood", "victim_during_flood")):
        server = r.get("victim_in_server", {}).get(phase, {})
        inside = (f"{server.get('over_25_ms', 0):.0f}, {server.get('over_50_ms', 0):.0f} of {server['requests']:.0f}"
                  if server.get("requests") else "-")
        print(f"  {'':<18} {phase:<14} {r[load]['p50_ms']:>7.2f}  {r[load]['p99_ms']:>7.2f}   {inside}")


def print_table(r: dict[str, Any]) -> None:
    print("\nsmall GET            target          rps     p50 ms   p99 ms   CPU ms/request")
    for c in ("c1", "c32"):
        for target, v in r["small_get"][c].items():
            cpu = f"{v['cpu_ms_per_request']:>8.3f}" if "cpu_ms_per_request" in v else ""
            print(f"  {c:<18} {target:<14} {v['rps']:>7.0f}  {v['p50_ms']:>7.2f}  {v['p99_ms']:>7.2f}  {cpu}")
    print("\nLIST 500             target          rps     p50 ms   p99 ms")
    for enc in ("identity", "gzip"):
        for target, v in r["list_500"][enc].items():
            print(f"  {enc:<18} {target:<14} {v['rps']:>7.1f}  {v['p50_ms']:>7.2f}  {v['p99_ms']:>7.2f}")
    pods = r["pod_streams"]
    print("\npod streams          target       exec p50 ms  exec p99 ms  port-forward MiB/s")
    for target, v in pods["exec_round_trip"].items():
        print(f"  {'':<18} {target:<14} {v['p50_ms']:>9.2f}  {v['p99_ms']:>11.2f}  "
              f"{pods['port_forward_mib_per_s'][target]:>12.1f}")
    print_fair_share(r["fair_share"])
    print_sso(r["sso"])
    print("\ntarget                               measured     ok")
    for name, value, ok in verdicts(r):
        print(f"  {name:<36} {value:>12}  {'yes' if ok else 'NO'}")
    print_relays(r)


def relay_comparison(r: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """Every relay against the direct connection, in one table: the gateway,
    the bare aiohttp relay, kubectl proxy (plain HTTP on its client leg) and
    the compiled references. Shows which targets any relay could meet here."""
    g1, g32, lst = r["small_get"]["c1"], r["small_get"]["c32"], r["list_500"]
    delivery = r["watches"]["delivery"]

    def ratio(table: dict[str, Any], relay: str, key: str) -> float | None:
        return table[relay][key] / table["direct"][key] if relay in table else None

    return {
        relay: {
            "c1_p50_vs_direct": ratio(g1, relay, "p50_ms"),
            "c32_rps_vs_direct": ratio(g32, relay, "rps"),
            "cpu_ms_per_get": g32[relay].get("cpu_ms_per_request"),
            "list_identity_p50_vs_direct": ratio(lst["identity"], relay, "p50_ms"),
            "list_gzip_p50_vs_direct": ratio(lst["gzip"], relay, "p50_ms"),
            "watch_delivery_p99_added_ms": delivery[relay]["p99_ms"] - delivery["direct"]["p99_ms"]
            if relay in delivery else None,
        }
        for relay in g32 if relay != "direct"
    }


def print_relays(r: dict[str, Any]) -> None:
    print("\nevery relay against direct (targets: c1 <= 1.3x, c32 >= 0.75x, CPU <= 0.3 ms, LIST <= 1.15x / 1.05x)")
    print(f"  {'relay':<15} {'c1 p50':>7} {'c32 rps':>8} {'CPU/GET':>8} {'LIST id':>8} {'LIST gz':>8} {'watch +p99':>11}")
    for relay, row in r["relays"].items():
        def cell(key: str, form: str) -> str:
            value = row[key]
            return format(value, form) if value is not None else "-"
        print(f"  {relay:<15} {cell('c1_p50_vs_direct', '.2f'):>6}x {cell('c32_rps_vs_direct', '.2f'):>7}x "
              f"{cell('cpu_ms_per_get', '.3f'):>8} {cell('list_identity_p50_vs_direct', '.2f'):>7}x "
              f"{cell('list_gzip_p50_vs_direct', '.2f'):>7}x {cell('watch_delivery_p99_added_ms', '.2f'):>8} ms")
    for relay, why in r.get("missing_references", {}).items():
        print(f"  {relay:<15} not measured: {why}")
    gateway, floor = r["relays"]["gateway"]["cpu_ms_per_get"], r["relays"]["aiohttp-floor"]["cpu_ms_per_get"]
    if gateway is not None and floor is not None:
        print(f"  the gateway's own work per GET (gateway - aiohttp floor): {gateway - floor:.3f} ms CPU")


async def main() -> None:
    preflight()
    stack = Stack(temp_root())
    started = datetime.datetime.now(datetime.timezone.utc)
    try:
        stack.start()
        async with stack.session() as session:
            tenant = await stack.new_tenant(session)
            flooder = await stack.new_tenant(session)
        stack.start_kubectl_proxy(tenant)
        stack.start_floor_relay(tenant)
        stack.start_references(tenant)
        await asyncio.sleep(2)
        results: dict[str, Any] = {"idle_rss_mib": stack.gateway_rss_mib(), "quick": QUICK,
                                   "cluster_start_seconds": stack.cluster_start_seconds}
        targets = Targets(stack, tenant)
        # The cold burst counts database transactions, so it runs before the
        # workloads whose late writes (onboarding, audit) could land in its window.
        for name, workload in (("small_get", small_get(stack, targets)), ("list_500", list_500(stack, targets)),
                               ("cold_burst", cold_burst(stack)), ("watches", watches(stack, targets)),
                               ("pod_streams", pod_streams(stack, tenant, order=interleaved(["direct", "gateway"], ROUNDS),
                                                           round_trips=200 if QUICK else 1000,
                                                           sessions=50 if QUICK else 200)),
                               ("fair_share", fair_share(stack, tenant, flooder, create_configmaps,
                                                         requests=300 if QUICK else 3000,
                                                         flood_seconds=15 if QUICK else 40)),
                               ("rolling_restart", rolling_restart(stack, tenant, getters=8, watches=20)),
                               ("issuance", issuance(stack, targets)), ("onboarding", onboarding(stack)),
                               ("soak", soak(stack, targets)),
                               # Last: nothing else is measured while Keycloak's JVM starts (minutes
                               # of CPU here) or runs; the SSO gateway is a process of its own.
                               ("sso", sso(stack, **sso_settings(QUICK)))):
            print(f"running {name} ...", flush=True)
            results[name] = await workload
    finally:
        stack.stop()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip() or "nogit"
    results["verdicts"] = [{"target": n, "measured": v, "ok": ok} for n, v, ok in verdicts(results)]
    results["relays"] = relay_comparison(results)
    results["missing_references"] = stack.missing_references
    results["started"] = started.isoformat()
    results["commit"] = commit
    path = record(results)
    print_table(results)
    print(f"\nwritten: {path}")


if __name__ == "__main__":
    # Stopped from outside: still stop every process the run started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    asyncio.run(main())
