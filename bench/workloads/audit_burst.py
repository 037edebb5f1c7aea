"""Audit burst: audit rows of proxied writes under a burst, and none lost.

Two parts, both against the run's PostgreSQL (the gateway's own database):

- **The writer** (provisioning.audit.AuditWriter with the gateway's default
  settings, in this process: its own event loop, as in the gateway it
  shares one with the requests). *Burst*: writes offered at BURST_PER_SECOND
  for BURST_SECONDS, each taking its place before its row is handed over,
  as a proxied write does; rows/s sustained over the burst (until the last
  row is stored), writes refused, rows lost (accepted minus stored) and
  stored twice. *Drain*: DRAIN_ROWS rows offered as fast as places come
  free: the writer's own ceiling in rows/s. The API server cannot take
  thousands of writes a second on this machine, so this is where the
  writer's rate is measured.
- **Through the gateway**: 32 clients POST ConfigMaps with `dryRun=All`
  (nothing is stored in etcd) to `/k8s/` for GATEWAY_SECONDS; every answer
  that came from the API server must have its ProxyWrite row, with its
  status: rows lost is answers minus rows, status by status.

Targets: 0 rows lost in both; none refused at the burst rate (the writer
keeps up); the drain at least the burst rate.

`python -m bench.workloads.audit_burst` runs it alone (its own cluster
and gateway; BENCH_QUICK=1: smaller) and writes results/audit-burst.json
(results/audit-burst-quick.json for a smoke run).
"""

from __future__ import annotations

import asyncio
import collections
import time
import uuid
from typing import Any

from bench.stack import Stack
from bench.workloads.common import QUICK
from provisioning.audit import AuditWriter
from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.errors import AuditUnavailable
from provisioning.models import AuditEvent

BURST_PER_SECOND = 8_000
"""The rate of the probe that found the drops (issue 40): 8,000 writes/s."""
BURST_SECONDS = 10 if QUICK else 35
DRAIN_ROWS = 30_000 if QUICK else 100_000
GATEWAY_SECONDS = 5 if QUICK else 20
GATEWAY_CLIENTS = 32


def _row(user_id: uuid.UUID, run: str, n: int) -> AuditEvent:
    """A row the size of a proxied write's."""
    return AuditEvent("ProxyWrite", user_id, None, "10.0.0.1",
                      {"method": "POST", "path": f"/api/v1/namespaces/tenant-bench/configmaps/burst-{n}",
                       "status": 201, "run": run, "n": n})


async def _until_stored(writer: AuditWriter) -> None:
    while writer.queue.taken:
        await asyncio.sleep(0.005)


async def _counted(db: Database, run: str) -> tuple[int, int]:
    """Rows of `run` stored, and how many distinct writes they are."""
    row = await db.fetchrow("SELECT count(*) AS rows, count(DISTINCT details->>'n') AS writes FROM audit_logs "
                            "WHERE action = 'ProxyWrite' AND details->>'run' = $1", run)
    assert row is not None
    return int(row["rows"]), int(row["writes"])


async def writer_burst(database_url: str) -> dict[str, Any]:
    db = await Database.connect(database_url, min_size=1, max_size=4)
    try:
        user = await repo.create_user(db, f"audit-burst-{uuid.uuid4().hex[:10]}@example.test", "not-a-real-hash")
        writer = AuditWriter(db)
        await writer.start()
        try:
            loop = asyncio.get_running_loop()
            burst_run, offered, accepted = uuid.uuid4().hex, 0, 0
            total = BURST_PER_SECOND * BURST_SECONDS
            began = loop.time()
            while offered < total:
                due = min(total, int((loop.time() - began) * BURST_PER_SECOND))
                while offered < due:
                    try:
                        place = await writer.reserve()
                    except AuditUnavailable:
                        pass
                    else:
                        place.fill(_row(user.id, burst_run, offered))
                        accepted += 1
                    offered += 1
                await asyncio.sleep(0.002)
            offered_seconds = loop.time() - began
            await _until_stored(writer)
            burst_seconds = loop.time() - began
            burst_refused, most_waits = writer.queue.refusals, writer.queue.waits

            drain_run = uuid.uuid4().hex
            began = loop.time()
            for n in range(DRAIN_ROWS):
                place = writer.queue.try_reserve() or await writer.reserve()
                place.fill(_row(user.id, drain_run, n))
            await _until_stored(writer)
            drain_seconds = loop.time() - began
        finally:
            await writer.stop(timeout=60)
        burst_rows, burst_writes = await _counted(db, burst_run)
        drain_rows, drain_writes = await _counted(db, drain_run)
    finally:
        await db.close()
    return {
        "burst": {"per_second": BURST_PER_SECOND, "seconds": BURST_SECONDS, "offered": offered,
                  "offered_seconds": offered_seconds, "accepted": accepted, "refused": burst_refused,
                  "waited": most_waits, "stored": burst_rows, "lost": accepted - burst_writes,
                  "stored_twice": burst_rows - burst_writes, "rows_per_s": burst_rows / burst_seconds},
        "drain": {"rows": DRAIN_ROWS, "stored": drain_rows, "lost": DRAIN_ROWS - drain_writes,
                  "stored_twice": drain_rows - drain_writes, "rows_per_s": drain_rows / drain_seconds},
        "logged_instead": writer.rows_logged,
    }


async def gateway_writes(stack: Stack) -> dict[str, Any]:
    """Dry-run creates through the gateway; then the workspace's ProxyWrite
    rows, by status, against the answers, by status."""
    async with stack.session() as session:
        tenant = await stack.new_tenant(session)
        url = (f"{stack.gateway_url}/k8s/{tenant.workspace_id}/api/v1/namespaces/{tenant.namespace}"
               "/configmaps?dryRun=All")
        headers = {"Authorization": f"Bearer {tenant.session_token}"}
        answers: collections.Counter[int] = collections.Counter()
        refused = 0
        stop_at = time.perf_counter() + GATEWAY_SECONDS

        async def client(c: int) -> None:
            nonlocal refused
            n = 0
            while time.perf_counter() < stop_at:
                body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"burst-{c}-{n}"}}
                async with session.post(url, json=body, headers=headers) as r:
                    payload = await r.read()
                    if r.status == 503 and b"audit_unavailable" in payload:
                        refused += 1  # refused before it was sent: no row is owed
                    else:
                        answers[r.status] += 1
                n += 1

        began = time.perf_counter()
        await asyncio.gather(*(client(c) for c in range(GATEWAY_CLIENTS)))
        seconds = time.perf_counter() - began
    db = await Database.connect(stack.database_url, min_size=1, max_size=1)
    try:
        rows: collections.Counter[int] = collections.Counter()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the last batch may still be on its way
            found = await db.fetch("SELECT (details->>'status')::int AS status, count(*) AS n FROM audit_logs "
                                   "WHERE action = 'ProxyWrite' AND workspace_id = $1 GROUP BY 1",
                                   uuid.UUID(tenant.workspace_id))
            rows = collections.Counter({int(r["status"]): int(r["n"]) for r in found})
            if sum(rows.values()) >= sum(answers.values()):
                break
            await asyncio.sleep(0.2)
    finally:
        await db.close()
    lost = sum(max(0, answers[s] - rows[s]) for s in answers)
    return {"seconds": seconds, "clients": GATEWAY_CLIENTS, "answers": {str(s): n for s, n in answers.items()},
            "rows": {str(s): n for s, n in rows.items()}, "refused": refused,
            "writes_per_s": sum(answers.values()) / seconds, "lost": lost,
            "extra_rows": sum(max(0, rows[s] - answers[s]) for s in rows)}


async def audit_burst(stack: Stack) -> dict[str, Any]:
    return {"writer": await writer_burst(stack.database_url), "gateway": await gateway_writes(stack)}


def audit_verdicts(r: dict[str, Any]) -> list[tuple[str, str, bool]]:
    burst, drain, gateway = r["writer"]["burst"], r["writer"]["drain"], r["gateway"]
    lost = burst["lost"] + drain["lost"] + gateway["lost"]
    written = burst["accepted"] + drain["rows"] + sum(gateway["answers"].values())
    return [
        ("audit burst: 0 rows lost", f"{lost} of {written}", lost == 0),
        (f"audit burst {burst['per_second']:,}/s: 0 refused", f"{burst['refused']} of {burst['offered']}",
         burst["refused"] == 0),
        (f"audit writer >= {burst['per_second']:,} rows/s", f"{drain['rows_per_s']:,.0f} rows/s",
         drain["rows_per_s"] >= burst["per_second"]),
    ]


def print_audit(r: dict[str, Any]) -> None:
    burst, drain, gateway = r["writer"]["burst"], r["writer"]["drain"], r["gateway"]
    print(f"\naudit burst          writer: {burst['offered']:,} writes offered at {burst['per_second']:,}/s over "
          f"{burst['offered_seconds']:.1f} s, {burst['refused']} refused, {burst['lost']} lost, "
          f"{burst['rows_per_s']:,.0f} rows/s sustained")
    print(f"  {'':<18} drain: {drain['rows']:,} rows at {drain['rows_per_s']:,.0f} rows/s, {drain['lost']} lost, "
          f"{drain['stored_twice']} stored twice")
    print(f"  {'':<18} through the gateway: {sum(gateway['answers'].values()):,} writes "
          f"({gateway['writes_per_s']:.0f}/s, {gateway['clients']} clients), answers {gateway['answers']}, "
          f"rows {gateway['rows']}, {gateway['lost']} lost, {gateway['refused']} refused")


if __name__ == "__main__":
    from bench.alone import run_alone

    run_alone("audit-burst", audit_burst, audit_verdicts, print_audit)
