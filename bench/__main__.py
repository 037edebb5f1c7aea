"""`make bench`: the gateway against the physical limit (direct to the API
server) and the peer baseline (`kubectl proxy`), measured side by side in one
run, rounds interleaved and shuffled, every target acting as the same tenant
ServiceAccount. Writes bench/results/latest.json, adds a row to
bench/results/history.csv (bench/record.py) and prints a table.

BENCH_QUICK=1 shrinks every workload (a smoke run, not a measurement).
`python -m bench --only ROW` runs one row (a key of bench/report.py ROWS) on
a stack of its own, set up as in the full run, and writes results/<row>.json.
"""

from __future__ import annotations

import asyncio
import datetime
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, Callable, Coroutine

from bench.alone import run_alone
from bench.fairness import fair_share
from bench.pods import pod_streams
from bench.record import record
from bench.report import ROWS, print_table, relay_comparison, verdicts
from bench.rolling import rolling_restart
from bench.sso import preflight, sso
from bench.sso import settings as sso_settings
from bench.stack import Stack, Tenant, temp_root
from bench.workloads.audit_burst import audit_burst
from bench.workloads.audit_ingest import audit_ingest
from bench.workloads.cold_burst import cold_burst
from bench.workloads.common import QUICK, ROUNDS, Targets, create_configmaps, interleaved
from bench.workloads.issuing import issuance, onboarding
from bench.workloads.members import member_get
from bench.workloads.reads import list_500, small_get
from bench.workloads.revocation import revocation_latency
from bench.workloads.soak import soak
from bench.workloads.stalled import stalled_readers
from bench.workloads.watches import watches

__all__ = ["create_configmaps", "main"]


@dataclass
class Run:
    """What a run's rows are given: its stack, the tenant every target acts
    as, a second tenant (the fair-share row's flooder) and the targets."""

    stack: Stack
    tenant: Tenant
    flooder: Tenant
    targets: Targets


async def prepare(stack: Stack) -> Run:
    """A started stack made ready for the rows: two tenants, `kubectl proxy`,
    the floor relay and the reference relays, all idle before anything is timed."""
    async with stack.session() as session:
        tenant = await stack.new_tenant(session)
        flooder = await stack.new_tenant(session)
    stack.start_kubectl_proxy(tenant)
    stack.start_floor_relay(tenant)
    stack.start_references(tenant)
    await asyncio.sleep(2)
    return Run(stack, tenant, flooder, Targets(stack, tenant))


def rows(run: Run) -> dict[str, Callable[[], Coroutine[Any, Any, dict[str, Any]]]]:
    """The full run's rows in the order they run, each started only when its
    turn comes. The cold burst counts database transactions, so it runs
    before the workloads whose late writes (onboarding, audit) could land in
    its window."""
    stack, tenant, targets = run.stack, run.tenant, run.targets
    return {
        "small_get": lambda: small_get(stack, targets),
        "list_500": lambda: list_500(stack, targets),
        "cold_burst": lambda: cold_burst(stack),
        "watches": lambda: watches(stack, targets),
        "stalled_readers": lambda: stalled_readers(stack, tenant),
        "pod_streams": lambda: pod_streams(stack, tenant, order=interleaved(["direct", "gateway"], ROUNDS),
                                           round_trips=200 if QUICK else 1000, sessions=50 if QUICK else 200),
        "fair_share": lambda: fair_share(stack, tenant, run.flooder, create_configmaps),
        "rolling_restart": lambda: rolling_restart(stack, tenant, getters=8, watches=20),
        "issuance": lambda: issuance(stack, tenant),
        "onboarding": lambda: onboarding(stack),
        "audit_burst": lambda: audit_burst(stack),
        "revocation": lambda: revocation_latency(stack),
        "audit_ingest": lambda: audit_ingest(stack),
        "soak": lambda: soak(stack, targets),
        # After the soak: its gateway under callgrind and the member's
        # account and token would otherwise land in the soak's window.
        "member_get": lambda: member_get(stack, tenant),
        # Last: nothing else is measured while Keycloak's JVM starts (minutes
        # of CPU here) or runs; the SSO gateway is a process of its own.
        "sso": lambda: sso(stack, **sso_settings(QUICK)),
    }


def _preflight(names: list[str]) -> None:
    """What the rows named need, found before a long run starts rather than after it."""
    if "sso" in names:
        preflight()
    if "member_get" in names and shutil.which("valgrind") is None:  # it counts instructions under callgrind
        sys.exit("make bench needs valgrind (Debian: apt-get install valgrind)")


async def main() -> None:
    stack = Stack(temp_root())
    started = datetime.datetime.now(datetime.timezone.utc)
    try:
        stack.start()
        run = await prepare(stack)
        results: dict[str, Any] = {"idle_rss_mib": stack.gateway_rss_mib(), "quick": QUICK,
                                   "cluster_start_seconds": stack.cluster_start_seconds}
        for name, workload in rows(run).items():
            print(f"running {name} ...", flush=True)
            results[name] = await workload()
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


def only(name: str) -> None:
    """One row of the full run on a stack of its own, set up as in the full
    run (bench/alone.py), written to results/<row>.json."""
    if name not in ROWS:
        sys.exit(f"no row {name!r}; the rows: {', '.join(ROWS)}")
    _preflight([name])
    judge, printer = ROWS[name]

    async def workload(stack: Stack) -> dict[str, Any]:
        return await rows(await prepare(stack))[name]()

    run_alone(name.replace("_", "-"), workload, judge, printer)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--only"] and len(sys.argv) == 3:
        only(sys.argv[2])
    elif sys.argv[1:]:
        sys.exit("usage: python -m bench [--only ROW]")
    else:
        _preflight(list(ROWS))
        # Stopped from outside: still stop every process the run started.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        asyncio.run(main())
