"""The gateway under steady load for SOAK_SECONDS: RSS, descriptors and
event-loop tasks sampled every 10 s."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench.stack import Stack, run_load
from bench.workloads.common import SOAK_SECONDS, Targets


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
