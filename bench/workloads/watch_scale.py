"""Issue 41's watch row: 10,000 concurrent watches through one replica.

The watches are held by CROWDS processes of their own (bench/watch_crowd.py:
uvloop, a bare protocol per TLS connection), so the load generator is
neither the gateway's CPU nor its bottleneck. In order:

1. the gateway's RSS and descriptors with no watch (the baseline: after
   WARM_UP watches were opened and closed, one heap trim later; the cold
   start's figures are kept beside it), then at a quarter, half and all of
   the watches open: KiB and descriptors per watch;
2. with all of them open, the delivery row of the smaller watches row
   (bench/workloads/watches.py: 20 watchers on the gateway and 20 on the API
   server directly, an object created every 100 ms): the added p99;
3. a fan-out: FANOUT_EVENTS objects that every one of the crowd's watches
   selects, one every FANOUT_SPACING_SECONDS: each must reach every watch
   (no event lost), and how long the last of them takes;
4. every watch closed, one heap trim later: RSS and descriptors against the
   baseline;
5. the same crowd and fan-out straight at the API server, the reference
   for the fan-out, and what the API server's RSS and descriptors grow by
   per watch connection (each watch through the gateway is one HTTP/1.1
   connection upstream as well: the same cost again).

The watches are as many as asked (BENCH_SCALE_WATCHES, 10,000) or as the
gateway's descriptor limit holds at two a watch, whichever is fewer; a
run held below the number asked says so in its verdict.

Alone: `flock /tmp/cluster.lock python -m bench.workloads.watch_scale`
(its own stack), written to results/watches-10k.json.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import ssl
import sys
import time
from typing import Any

import aiohttp
import psutil

from bench.stack import Stack, Tenant
from bench.workloads.common import HEAP_TRIM_WAIT, QUICK, Targets, pct
from bench.workloads.watches import delivery_latency

SCALE = int(os.environ.get("BENCH_SCALE_WATCHES", "1000" if QUICK else "10000"))
CROWDS = 4
"""Processes holding the watches: two cores, and each process reads only its share of a fan-out."""
FANOUT_EVENTS = 5
FANOUT_SPACING_SECONDS = 3.0
SETTLE_SECONDS = 3.0
WARM_UP = 100
"""Watches opened and closed before the baseline is taken."""
FD_RESERVE = 64
"""Descriptors kept free in the gateway beyond its baseline: the delivery
row's 20 watchers (two each), database connections opened under load."""

KIB_PER_WATCH = 100
FDS_PER_WATCH = 2.0
ADDED_P99_MS = 5.0
BASELINE_SLACK_MIB = 10.0
"""'Back to its baseline': within this of the RSS before the first watch."""


def watch_capacity(fd_limit: int, baseline_fds: int, asked: int, reserve: int = FD_RESERVE) -> int:
    """How many watches to open: as many as asked, or as many as the
    gateway's descriptor limit holds at two a watch. Pure."""
    return max(0, min(asked, (fd_limit - baseline_fds - reserve) // 2))


def fan_out_summary(created: dict[str, float], arrivals: list[dict[str, list[float]]], watches: int) -> dict[str, Any]:
    """Latency from each object's creation to its arrival at each watch, and
    how many (event, watch) deliveries never came. Pure."""
    latencies = [(t - created[name]) * 1000 for report in arrivals for name, times in report.items()
                 if name in created for t in times]
    expected = watches * len(created)
    return {"p50_ms": pct(latencies, 0.5), "p99_ms": pct(latencies, 0.99), "max_ms": max(latencies, default=float("nan")),
            "received": len(latencies), "expected": expected, "lost": expected - len(latencies)}


class CrowdProcess:
    """One bench.watch_crowd process, asked one line at a time."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls, url: str, headers: dict[str, str], ca_file: str | None) -> "CrowdProcess":
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.watch_crowd", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            limit=2**28)
        crowd = cls(process)
        crowd._send({"url": url, "headers": headers, "ca_file": ca_file})
        return crowd

    def _send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write((json.dumps(message) + "\n").encode())

    async def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        self._send(message)
        assert self.process.stdout is not None
        line = await self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"a watch crowd exited ({await self.process.wait()}) while asked {message}")
        return dict(json.loads(line))

    async def close(self) -> None:
        if self.process.returncode is None:
            try:
                self._send({"close": True})
                await asyncio.wait_for(self.process.wait(), 30)
            except (OSError, asyncio.TimeoutError):
                self.process.kill()
                await self.process.wait()


def _shares(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


async def _open_to(crowds: list[CrowdProcess], total: int) -> dict[str, int]:
    answers = await asyncio.gather(*(c.ask({"open": n}) for c, n in zip(crowds, _shares(total, len(crowds)))))
    refused: dict[str, int] = {}
    for answer in answers:
        for status, count in answer["refused"].items():
            refused[status] = refused.get(status, 0) + count
    return refused


async def _fan_out(stack: Stack, tenant: Tenant, crowds: list[CrowdProcess], watches: int,
                   label: str) -> dict[str, Any]:
    """FANOUT_EVENTS objects every crowd watch selects; each one's arrival at every watch."""
    assert stack.cluster is not None
    context = ssl.create_default_context(cafile=str(stack.cluster.ca_file))
    created: dict[str, float] = {}
    url = f"{stack.cluster.server}/api/v1/namespaces/{tenant.namespace}/configmaps"
    cpu_before = [r["cpu_s"] for r in await asyncio.gather(*(c.ask({"report": True}) for c in crowds))]
    began = time.perf_counter()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as writer:
        for i in range(FANOUT_EVENTS):
            name = f"fanout-{label}-{i}-{random.randrange(1 << 30)}"
            body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"bench": "fanout"}}}
            created[name] = time.perf_counter()
            async with writer.post(url, json=body, headers={"Authorization": f"Bearer {tenant.sa_token}"}) as r:
                assert r.status == 201, await r.text()
            await asyncio.sleep(FANOUT_SPACING_SECONDS)
    await asyncio.sleep(2 * FANOUT_SPACING_SECONDS)
    reports = await asyncio.gather(*(c.ask({"report": True}) for c in crowds))
    summary = fan_out_summary(created, [r["arrivals"] for r in reports], watches)
    summary["watches_ended_early"] = sum(r["ended"] for r in reports)
    # The load generator is not the bottleneck if no crowd process was near a whole core.
    wall = time.perf_counter() - began
    summary["crowd_cpu_share"] = [round((r["cpu_s"] - before) / wall, 3) for r, before in zip(reports, cpu_before)]
    return summary


def resident_by_kind(smaps: str) -> dict[str, float]:
    """Resident MiB of a process's mappings (/proc/PID/smaps) by kind: glibc's
    main heap ([heap]: C allocations, OpenSSL's and uvloop's buffers among
    them; Python's objects too, where the gateway runs with
    PYTHONMALLOC=malloc), anonymous mappings (pymalloc's arenas where it is
    used, glibc's thread arenas and its largest chunks) and everything else (files, stacks). What stays
    resident after the watches close says which allocator keeps it. Pure."""
    kinds = {"heap_mib": 0.0, "anonymous_mib": 0.0, "other_mib": 0.0}
    kind = "other_mib"
    for line in smaps.splitlines():
        fields = line.split()
        if not fields:
            continue
        if "-" in fields[0] and not fields[0].endswith(":"):  # a mapping's first line
            name = fields[5] if len(fields) > 5 else ""
            kind = "heap_mib" if name == "[heap]" else "anonymous_mib" if not name else "other_mib"
        elif fields[0] == "Rss:":
            kinds[kind] += int(fields[1]) / 1024
    return kinds


async def _gateway_sample(stack: Stack, watches: int | None = None) -> dict[str, Any]:
    """RSS (by allocator), descriptors, and the gateway's own count of open
    streams and live asyncio tasks: after a close, memory kept with no task
    or stream left is the allocator's, not a leak."""
    process = stack.gateway_process()
    with open(f"/proc/{process.pid}/smaps") as smaps:
        kinds = resident_by_kind(smaps.read())
    async with stack.session() as session:
        streams = await stack.metric(session, "tenant_gateway_proxy_open_streams")
        tasks = await stack.metric(session, "tenant_gateway_event_loop_tasks")
    sample: dict[str, Any] = {"rss_mib": stack.gateway_rss_mib(), "fds": stack.gateway_fds(), **kinds,
                              "open_streams": streams, "tasks": tasks}
    return sample if watches is None else {"watches": watches, **sample}


def _process_figures(pid: int) -> dict[str, float]:
    process = psutil.Process(pid)
    return {"rss_mib": process.memory_info().rss / 2**20, "fds": process.num_fds()}


async def watch_scale(stack: Stack) -> dict[str, Any]:
    assert stack.cluster is not None
    async with stack.session() as session:
        tenant = await stack.new_tenant(session)
        # The delivery row's watchers are another tenant's, in a namespace of
        # their own: the API server hands an event to the watchers of its
        # namespace, not to the crowd's 10,000, so its own spread (tens of ms,
        # in no fixed order, direct and relayed alike) stays out of what is
        # paired (the row's `direct_spread` says how much it is).
        delivered = await stack.new_tenant(session)
    targets = Targets(stack, tenant)
    targets.base = {name: targets.base[name] for name in ("direct", "gateway")}
    delivery_targets = Targets(stack, delivered)
    delivery_targets.base = {name: delivery_targets.base[name] for name in ("direct", "gateway")}
    apiserver = stack.cluster.pids()["kube-apiserver"]
    gateway_base, gateway_headers, gateway_ca = targets.base["gateway"]
    direct_base, direct_headers, direct_ca = targets.base["direct"]
    path = f"/api/v1/namespaces/{tenant.namespace}/configmaps?watch=1&labelSelector=bench%3Dfanout"

    await asyncio.sleep(SETTLE_SECONDS)
    cold = await _gateway_sample(stack)
    # A replica in service has opened watches before: the baseline is taken
    # after a few, closed and trimmed away, so that what the first watch
    # through a fresh process loads for good (modules, the upstream TLS
    # context, the tenant's token) is not counted as memory kept.
    warm = await CrowdProcess.start(gateway_base + path, gateway_headers, gateway_ca)
    try:
        await warm.ask({"open": WARM_UP})
    finally:
        await warm.close()
    await asyncio.sleep(HEAP_TRIM_WAIT)
    baseline = await _gateway_sample(stack, 0)
    fd_limit = stack.gateway_process().rlimit(psutil.RLIMIT_NOFILE)[0]
    count = watch_capacity(fd_limit, int(baseline["fds"]), SCALE)
    apiserver_before = _process_figures(apiserver)

    crowds = [await CrowdProcess.start(gateway_base + path, gateway_headers, gateway_ca) for _ in range(CROWDS)]
    samples, opening_s = [baseline], 0.0
    refused: dict[str, int] = {}
    try:
        for step in (count // 4, count // 2, count):
            began = time.monotonic()
            for status, n in (await _open_to(crowds, step)).items():
                refused[status] = refused.get(status, 0) + n
            opening_s += time.monotonic() - began
            await asyncio.sleep(SETTLE_SECONDS)
            samples.append(await _gateway_sample(stack, step))
        apiserver_through_gateway = _process_figures(apiserver)
        delivery = await delivery_latency(stack, delivery_targets)
        fan_out = await _fan_out(stack, tenant, crowds, count, "gateway")
    finally:
        await asyncio.gather(*(c.close() for c in crowds))
    await asyncio.sleep(HEAP_TRIM_WAIT)
    after_close = await _gateway_sample(stack)

    crowds = [await CrowdProcess.start(direct_base + path, direct_headers, direct_ca) for _ in range(CROWDS)]
    try:
        await _open_to(crowds, count)
        await asyncio.sleep(SETTLE_SECONDS)
        apiserver_direct = _process_figures(apiserver)
        direct_fan_out = await _fan_out(stack, tenant, crowds, count, "direct")
    finally:
        await asyncio.gather(*(c.close() for c in crowds))

    top = samples[-1]
    return {
        "asked": SCALE, "watches": count, "cold_start": cold, "warm_up_watches": WARM_UP, "gateway_fd_limit": fd_limit, "crowds": CROWDS,
        "opened_per_s": count / opening_s if opening_s else None, "refused_then_retried": refused,
        "samples": samples,
        "kib_rss_per_watch": (top["rss_mib"] - baseline["rss_mib"]) * 1024 / max(1, count),
        "fds_per_watch": (top["fds"] - baseline["fds"]) / max(1, count),
        "after_close": after_close,
        "delivery": delivery,
        "fan_out": {"gateway": fan_out, "direct": direct_fan_out},
        "apiserver": {
            "before": apiserver_before, "gateway_watches": apiserver_through_gateway, "direct_watches": apiserver_direct,
            "kib_per_upstream_watch": (apiserver_through_gateway["rss_mib"] - apiserver_before["rss_mib"]) * 1024
            / max(1, count),
            "fds_per_upstream_watch": (apiserver_through_gateway["fds"] - apiserver_before["fds"]) / max(1, count),
        },
    }


def scale_verdicts(r: dict[str, Any]) -> list[tuple[str, str, bool]]:
    d, fan = r["delivery"], r["fan_out"]["gateway"]
    added = d["gateway"]["added_p99_ms"]
    received = d["gateway"]["received"] + fan["received"]
    expected = d["gateway"]["expected"] + fan["expected"]
    baseline, after = r["samples"][0]["rss_mib"], r["after_close"]["rss_mib"]
    held_by = "" if r["watches"] >= r["asked"] else f" (fd limit {r['gateway_fd_limit']:,})"
    return [
        (f"{r['asked']:,} concurrent watches, one replica", f"{r['watches']:,}{held_by}", r["watches"] >= r["asked"]),
        (f"<= {KIB_PER_WATCH} KiB RSS per watch", f"{r['kib_rss_per_watch']:.0f} KiB", r["kib_rss_per_watch"] <= KIB_PER_WATCH),
        (f"<= {FDS_PER_WATCH:.0f} descriptors per watch", f"{r['fds_per_watch']:.3f}",
         r["fds_per_watch"] <= FDS_PER_WATCH + 0.005),
        (f"added delivery p99 <= {ADDED_P99_MS:.0f} ms (by event), all open", f"{added:.2f} ms", added <= ADDED_P99_MS),
        ("no event lost (delivery + fan-out)", f"{received:,}/{expected:,}", received == expected),
        (f"RSS after close within {BASELINE_SLACK_MIB:.0f} MiB of baseline", f"{baseline:.0f} -> {after:.0f} MiB",
         after - baseline <= BASELINE_SLACK_MIB),
    ]


def _kinds(sample: dict[str, Any]) -> str:
    return (f"RSS {sample['rss_mib']:7.1f} MiB ([heap] {sample.get('heap_mib', 0):6.1f}, anonymous "
            f"{sample.get('anonymous_mib', 0):6.1f}), {sample['fds']:>6} fds, {sample.get('open_streams', 0):>6.0f} streams, "
            f"{sample.get('tasks', 0):>6.0f} tasks")


def print_scale(r: dict[str, Any]) -> None:
    print(f"\n{r['watches']:,} watches (asked {r['asked']:,}; gateway fd limit {r['gateway_fd_limit']:,}), "
          f"{r['crowds']} crowd processes, opened at {r['opened_per_s'] or 0:.0f}/s, refused then retried "
          f"{r['refused_then_retried']}")
    print(f"  cold start:    {_kinds(r['cold_start'])} (then {r['warm_up_watches']} watches opened and closed)")
    for sample in r["samples"]:
        print(f"  {sample['watches']:>6} watches: {_kinds(sample)}")
    print(f"  after close:   {_kinds(r['after_close'])}")
    for target, v in r["delivery"].items():
        paired = (f"  added by event p50 {v['added_p50_ms']:.2f} ms p99 {v['added_p99_ms']:.2f} ms, by rank p50 "
                  f"{v.get('added_by_rank_p50_ms', 0):.2f} p99 {v.get('added_by_rank_p99_ms', 0):.2f} ms; direct "
                  f"spread per event p99 {v.get('direct_spread_p99_ms', 0):.2f} ms") if "added_p99_ms" in v else ""
        print(f"  delivery {target:<8} p50 {v['p50_ms']:6.2f} ms  p99 {v['p99_ms']:6.2f} ms  "
              f"{v['received']}/{v['expected']}{paired}")
    for target, v in r["fan_out"].items():
        print(f"  fan-out  {target:<8} p50 {v['p50_ms']:7.1f} ms  p99 {v['p99_ms']:7.1f} ms  max {v['max_ms']:7.1f} ms"
              f"  {v['received']:,}/{v['expected']:,} (ended early: {v['watches_ended_early']}; each crowd's "
              f"share of a core {v.get('crowd_cpu_share')})")
    a = r["apiserver"]
    print(f"  API server: {a['before']['rss_mib']:.0f} MiB, {a['before']['fds']} fds before; "
          f"{a['gateway_watches']['rss_mib']:.0f} MiB, {a['gateway_watches']['fds']} fds with the gateway's; "
          f"{a['kib_per_upstream_watch']:.0f} KiB and {a['fds_per_upstream_watch']:.2f} fds per upstream watch")


if __name__ == "__main__":
    from bench.alone import run_alone

    run_alone("watches-10k", watch_scale, scale_verdicts, print_scale)
