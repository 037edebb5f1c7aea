"""Owned background tasks: started by a component, stopped by the same one."""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

from provisioning.errors import ServiceUnavailable

log = logging.getLogger(__name__)

# How often a task that swallowed its cancellation is cancelled again.
_RECANCEL_SECONDS = 0.1


async def cancel_and_wait(task: "asyncio.Task[None] | None", timeout: float | None = None) -> bool:
    """Cancel a component's task and wait until it has really finished.

    A library call can swallow one cancellation (Python 3.11's
    `asyncio.wait_for` returns its inner result when both arrive together), so
    the task is cancelled again until it ends. With `timeout`, gives up after
    that long and returns False: a stop must never outlast the shutdown bound.
    """
    if task is None:
        return True
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    while not task.done():
        task.cancel()
        wait = _RECANCEL_SECONDS if deadline is None else min(_RECANCEL_SECONDS, deadline - loop.time())
        if wait <= 0:
            return False
        await asyncio.wait({task}, timeout=wait)
    if not task.cancelled() and task.exception() is not None:
        # It failed before it could be stopped; the stop itself still succeeds.
        log.error("background task %s had failed", task.get_name(), exc_info=task.exception())
    return True


class Periodic:
    """`work` every `interval` seconds until stopped, as each replica's
    sweeps run (rate-limit counters, expired credentials' Secrets, old
    cluster events): a round that fails (the database or the API server
    away, or a fault of its own) is logged and the next one tries again.
    `work` answers how many things it did; `done` names them in the log."""

    def __init__(self, name: str, work: Callable[[], Awaitable[int]], interval: float, *, done: str) -> None:
        self._name, self._work, self._interval, self._done = name, work, interval, done
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self._name)

    async def stop(self, timeout: float) -> None:
        await cancel_and_wait(self._task, timeout)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                count = await self._work()
            except ServiceUnavailable as gone:
                log.warning("%s: not this time; will retry", self._name, extra={"error": gone.code})
                continue
            except Exception:
                log.exception("%s failed; will retry", self._name)
                continue
            if count:
                log.info(self._done, extra={"count": count})
