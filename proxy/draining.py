"""The first half of a graceful stop: refuse new work, let short work finish.

On SIGTERM (see proxy.serving) `Drain.begin` runs: from then on `/readyz`
and every new request are answered 503 with the contract's error
`shutting_down` (and `Connection: close`, so the client's next attempt goes
through the load balancer to another replica); open watches and exec
sessions are ended cleanly by the callbacks registered in `on_begin`; and
`wait_idle` returns when the requests already in flight have finished, or
when the drain time is up. Liveness (`/healthz`) still answers (and `/metrics`, on its own listener):
a pod that is stopping is not a dead pod.

`Drain` also keeps the stop's deadline, which the cleanup steps share (see
`remaining`), so the whole stop ends within GATEWAY_SHUTDOWN_TIMEOUT_SECONDS.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Awaitable, Callable

from aiohttp import web

from proxy.errors import error_response

# Requests cancelled at the end of the drain get this long to send their 503.
_OVERDUE_SECONDS = 0.5
# Still answered while draining.
_ALWAYS = frozenset({"/healthz"})


class Drain:
    def __init__(self, drain_seconds: float, timeout_seconds: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.drain_seconds = drain_seconds
        self.timeout_seconds = timeout_seconds
        self._clock = clock
        self._in_flight = 0
        self._tasks: set[asyncio.Task[object]] = set()
        self._overdue: set[asyncio.Task[object]] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self.started_at: float | None = None
        self.on_begin: list[Callable[[], None]] = []

    @property
    def draining(self) -> bool:
        return self.started_at is not None

    def begin(self) -> None:
        if self.started_at is not None:
            return
        self.started_at = self._clock()
        for callback in self.on_begin:
            callback()

    def remaining(self) -> float:
        """Seconds left of the whole stop (all of it before the stop began)."""
        if self.started_at is None:
            return self.timeout_seconds
        return max(0.0, self.started_at + self.timeout_seconds - self._clock())

    async def wait_idle(self) -> bool:
        """Wait for the requests in flight, for at most the drain time; True if
        all finished. Those still running are then cancelled, and each answers
        503 `shutting_down` if it had not begun its answer yet: a clear error
        rather than a connection cut when the server closes."""
        try:
            await asyncio.wait_for(self._idle.wait(), self.drain_seconds)
            return True
        except asyncio.TimeoutError:
            pass
        for task in list(self._tasks):
            self._overdue.add(task)
            task.cancel("the drain time is up")
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._idle.wait(), _OVERDUE_SECONDS)
        return False

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def _enter(self, task: "asyncio.Task[object]") -> None:
        self._in_flight += 1
        self._tasks.add(task)
        self._idle.clear()

    def _leave(self, task: "asyncio.Task[object]") -> None:
        self._in_flight -= 1
        self._tasks.discard(task)
        self._overdue.discard(task)
        if self._in_flight == 0:
            self._idle.set()

    def middleware(self) -> Callable[..., Awaitable[web.StreamResponse]]:
        @web.middleware
        async def drain(request: web.Request,
                        handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
            if self.draining and request.path not in _ALWAYS:
                return error_response(request, 503, "shutting_down", "this gateway replica is shutting down; retry",
                                      headers={"Connection": "close"}, retry_after=1)
            task = asyncio.current_task()
            assert task is not None
            self._enter(task)
            try:
                return await handler(request)
            except asyncio.CancelledError:
                if task not in self._overdue or request.writer.output_size:
                    raise  # not ours to answer, or the answer has begun: only a cut is left
                task.uncancel()
                return error_response(request, 503, "shutting_down", "this gateway replica stopped before the "
                                      "request finished; it may or may not have taken effect",
                                      headers={"Connection": "close"})
            finally:
                self._leave(task)

        return drain
