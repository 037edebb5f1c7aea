"""Owned background tasks: started by a component, stopped by the same one."""

from __future__ import annotations

import asyncio
import contextlib


async def cancel_and_wait(task: "asyncio.Task[None] | None") -> None:
    """Cancel a component's task and wait until it has really finished."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
