"""One benchmark row run on its own (`python -m bench.<row>`): a stack of
its own started, the row measured, the stack stopped, and the result
written to results/<name>.json and printed (bench/record.py,
`report_alone`). Needs the cluster lock, as `make bench` does."""

from __future__ import annotations

import asyncio
import datetime
import signal
import sys
from typing import Any, Callable, Coroutine

from bench.record import report_alone
from bench.stack import Stack, Tenant, temp_root
from bench.workloads.common import QUICK

Workload = Callable[[Stack], Coroutine[Any, Any, dict[str, Any]]]
TenantWorkload = Callable[[Stack, Tenant], Coroutine[Any, Any, dict[str, Any]]]


def with_tenant(workload: TenantWorkload) -> Workload:
    """A row measured as one tenant, given a tenant of its own (registered,
    logged in and onboarded through the stack's gateway) before it runs."""
    async def run(stack: Stack) -> dict[str, Any]:
        async with stack.session() as session:
            tenant = await stack.new_tenant(session)
        return await workload(stack, tenant)

    return run


def run_alone(name: str, workload: Workload, verdicts: Callable[[dict[str, Any]], list[tuple[str, str, bool]]],
              printer: Callable[[dict[str, Any]], None]) -> None:
    # Stopped from outside: still stop every process the run started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = datetime.datetime.now(datetime.timezone.utc)
    stack = Stack(temp_root())
    try:
        stack.start()
        result = asyncio.run(workload(stack))
    finally:
        stack.stop()
    report_alone(name, result, verdicts(result), printer, quick=QUICK, started=started)
