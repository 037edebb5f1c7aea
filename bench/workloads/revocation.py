"""Issue 37's revocation row: how long after the revoke call
(DELETE /api/v1/credentials/{id}) the API server itself first refuses the
credential's token (401), asked directly, not through the gateway.

Each sample is a token of its own (the token route, as `tenant-gateway
credential` fetches it; bound to its own Secret like a kubeconfig's), revoked
through the gateway, then used against the API server (a LIST of one
ConfigMap of the workspace namespace, what kubectl would do) until it is
refused. The latency runs from sending the DELETE to the first 401. Two
kinds of sample, because the API server caches successful token
authentications for 10 s (kube-apiserver's token success cache; not a flag):

* **idle**: the token was not used at the API server before the revoke (so
  nothing of it is cached); its first use is when the DELETE has answered,
  then every IDLE_POLL_SECONDS. What the revoke itself costs: the DELETE,
  and the API server's Secret informer hearing of the deletion.
* **in use**: the token answered 200 at the API server a random time
  (uniform, 0 to 10 s) before the revoke, as a kubeconfig in use every few
  seconds would have; from the DELETE on it is used every IN_USE_POLL_SECONDS
  until refused. IN_USE_AT_ONCE samples run side by side (each its own
  token); the wait before the revoke takes most of each sample's time.

Reported: p50, p99 and the largest of both, the DELETE's own latency, and
how many uses still succeeded after the DELETE had answered. Checked: every
revoked token was refused within REFUSED_WITHIN_SECONDS.

Alone: `python -m bench.workloads.revocation` (its own stack; the cluster
lock; BENCH_QUICK=1 is smaller), written to results/revocation.json.
"""

from __future__ import annotations

import asyncio
import random
import ssl
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from bench.stack import Stack, Tenant
from bench.workloads.common import QUICK, pct

IDLE_SAMPLES = 20 if QUICK else 100
IN_USE_SAMPLES = 10 if QUICK else 50
IN_USE_AT_ONCE = 5
IDLE_POLL_SECONDS = 0.002
IN_USE_POLL_SECONDS = 0.02
"""Finer than the figures they time; the in-use samples poll five tokens at
once, so each polls less often to keep the API server's load small."""
AUTHENTICATION_CACHE_SECONDS = 10.0
"""kube-apiserver caches a successful token authentication this long."""
REFUSED_WITHIN_SECONDS = 30.0


@dataclass
class Sample:
    seconds: float
    """From sending the DELETE to the first 401."""
    delete_seconds: float
    """The DELETE's own round trip (its 204)."""
    used_after_delete: int
    """Uses that still answered 200 after the DELETE had answered."""


def summary(values: list[float]) -> dict[str, float]:
    """p50, p99 and the extremes of a list of seconds, in milliseconds."""
    return {"p50_ms": pct(values, 0.5) * 1000, "p99_ms": pct(values, 0.99) * 1000,
            "min_ms": min(values) * 1000 if values else float("nan"),
            "max_ms": max(values) * 1000 if values else float("nan"), "samples": len(values)}


def _summarised(samples: list[Sample]) -> dict[str, Any]:
    return {**summary([s.seconds for s in samples]),
            "delete": summary([s.delete_seconds for s in samples]),
            "used_after_delete": sum(s.used_after_delete for s in samples),
            "samples_used_after_delete": sum(1 for s in samples if s.used_after_delete),
            "over_1_s": sum(1 for s in samples if s.seconds > 1),
            # Each sample, in the order taken: [to the 401, the DELETE's answer] in ms, uses after it.
            "each": [[round(s.seconds * 1000, 1), round(s.delete_seconds * 1000, 1), s.used_after_delete]
                     for s in samples]}


class _Revoker:
    def __init__(self, stack: Stack, tenant: Tenant, gateway: aiohttp.ClientSession,
                 direct: aiohttp.ClientSession) -> None:
        assert stack.cluster is not None
        self.stack, self.gateway, self.direct = stack, gateway, direct
        self.session = {"Authorization": f"Bearer {tenant.session_token}"}
        self.probe = f"{stack.cluster.server}/api/v1/namespaces/{tenant.namespace}/configmaps?limit=1"

    async def issue(self) -> tuple[str, str]:
        """A new token and its credential's id."""
        async with self.gateway.get(f"{self.stack.gateway_url}/api/v1/workspaces/credentials/token",
                                    headers=self.session) as answer:
            assert answer.status == 200, await answer.text()
            body = await answer.json()
        return str(body["token"]), str(body["credential"])

    async def use(self, token: str) -> int:
        async with self.direct.get(self.probe, headers={"Authorization": f"Bearer {token}"}) as answer:
            await answer.read()
            return answer.status

    async def revoke(self, credential: str) -> float:
        """DELETE the credential; the moment its 204 arrived."""
        async with self.gateway.delete(f"{self.stack.gateway_url}/api/v1/credentials/{credential}",
                                       headers=self.session) as answer:
            assert answer.status == 204, await answer.text()
        return time.perf_counter()

    async def until_refused(self, token: str, began: float, poll: float,
                            deleted: asyncio.Future[float] | None = None) -> tuple[float, int]:
        """Use the token every `poll` seconds until the API server answers
        401: when that answer arrived, and how many uses answered 200 after
        the DELETE had (`deleted` is when its answer came, once it has)."""
        used_after = 0
        while True:
            status = await self.use(token)
            now = time.perf_counter()
            if status == 401:
                return now, used_after
            if status != 200:
                raise RuntimeError(f"the token's use answered {status}")
            if now - began > REFUSED_WITHIN_SECONDS:
                raise RuntimeError(f"a revoked token still worked after {REFUSED_WITHIN_SECONDS:.0f} s")
            if deleted is None or (deleted.done() and deleted.result() < now):
                used_after += 1
            await asyncio.sleep(poll)

    async def idle_sample(self) -> Sample:
        token, credential = await self.issue()
        began = time.perf_counter()
        deleted = await self.revoke(credential)
        refused, used_after = await self.until_refused(token, began, IDLE_POLL_SECONDS)
        return Sample(refused - began, deleted - began, used_after)

    async def in_use_sample(self) -> Sample:
        token, credential = await self.issue()
        if await self.use(token) != 200:
            raise RuntimeError("a new token did not work at the API server")
        await asyncio.sleep(random.uniform(0, AUTHENTICATION_CACHE_SECONDS))
        began = time.perf_counter()
        deleting = asyncio.ensure_future(self.revoke(credential))
        refused, used_after = await self.until_refused(token, began, IN_USE_POLL_SECONDS, deleting)
        deleted = await deleting
        return Sample(refused - began, deleted - began, used_after)


async def revocation_latency(stack: Stack, *, idle_samples: int = IDLE_SAMPLES,
                             in_use_samples: int = IN_USE_SAMPLES) -> dict[str, Any]:
    assert stack.cluster is not None
    direct_tls = ssl.create_default_context(cafile=str(stack.cluster.ca_file))
    async with stack.session() as gateway, \
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, ssl=direct_tls)) as direct:
        tenant = await stack.new_tenant(gateway)
        revoker = _Revoker(stack, tenant, gateway, direct)
        # Warm both paths (connections, the gateway's caches) before the first sample.
        token, credential = await revoker.issue()
        assert await revoker.use(token) == 200
        await revoker.revoke(credential)
        idle = [await revoker.idle_sample() for _ in range(idle_samples)]
        slots = asyncio.Semaphore(IN_USE_AT_ONCE)

        async def in_use() -> Sample:
            async with slots:
                return await revoker.in_use_sample()

        busy = await asyncio.gather(*(in_use() for _ in range(in_use_samples)))
    return {"idle": _summarised(idle), "in_use": _summarised(list(busy)),
            "idle_poll_ms": IDLE_POLL_SECONDS * 1000, "in_use_poll_ms": IN_USE_POLL_SECONDS * 1000,
            "in_use_at_once": IN_USE_AT_ONCE, "refused_within_s": REFUSED_WITHIN_SECONDS}


def revocation_verdicts(r: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """The issue asks for the figures, not a bound: the row checks only that
    every revoked token was refused (a sample that was not stops the run)."""
    samples = r["idle"]["samples"] + r["in_use"]["samples"]
    return [("revoked tokens refused by the API server", f"{samples} of {samples}", samples > 0)]


def print_revocation(r: dict[str, Any]) -> None:
    print("\nrevocation           revoke call -> first 401 at the API server   p50 ms    p99 ms    max ms"
          "   (DELETE p50 ms, uses after its 204)")
    for kind, label in (("idle", f"idle (polled every {r['idle_poll_ms']:.0f} ms)"),
                        ("in_use", f"in use (polled every {r['in_use_poll_ms']:.0f} ms)")):
        v = r[kind]
        print(f"  {label:<41} {v['samples']:>4} samples {v['p50_ms']:>8.1f}  {v['p99_ms']:>8.1f}  "
              f"{v['max_ms']:>8.1f}   ({v['delete']['p50_ms']:.1f} ms, {v['used_after_delete']} uses "
              f"in {v['samples_used_after_delete']} samples; {v['over_1_s']} samples over 1 s)")


if __name__ == "__main__":
    from bench.alone import run_alone

    run_alone("revocation", revocation_latency, revocation_verdicts, print_revocation)
