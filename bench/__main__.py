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
import shutil
import signal
import subprocess
import sys
from typing import Any

from bench.fairness import fair_share
from bench.pods import pod_streams
from bench.record import record
from bench.report import print_table, relay_comparison, verdicts
from bench.rolling import rolling_restart
from bench.sso import preflight, sso
from bench.sso import settings as sso_settings
from bench.stack import Stack, temp_root
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


async def main() -> None:
    preflight()
    if shutil.which("valgrind") is None:  # the member row counts instructions under callgrind
        sys.exit("make bench needs valgrind (Debian: apt-get install valgrind)")
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
                               ("stalled_readers", stalled_readers(stack, tenant)),
                               ("pod_streams", pod_streams(stack, tenant, order=interleaved(["direct", "gateway"], ROUNDS),
                                                           round_trips=200 if QUICK else 1000,
                                                           sessions=50 if QUICK else 200)),
                               ("fair_share", fair_share(stack, tenant, flooder, create_configmaps,
                                                         requests=300 if QUICK else 3000,
                                                         flood_seconds=15 if QUICK else 40)),
                               ("rolling_restart", rolling_restart(stack, tenant, getters=8, watches=20)),
                               ("issuance", issuance(stack, tenant)), ("onboarding", onboarding(stack)),
                               ("audit_burst", audit_burst(stack)),
                               ("revocation", revocation_latency(stack)),
                               ("audit_ingest", audit_ingest(stack)),
                               ("soak", soak(stack, targets)),
                               # After the soak: its gateway under callgrind and the member's
                               # account and token would otherwise land in the soak's window.
                               ("member_get", member_get(stack, tenant)),
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
