"""The first half of a graceful stop: refuse new work, let short work finish.

On SIGTERM (see proxy.server.serving) `Drain.begin` runs: from then on `/readyz`
and every new request are answered 503 with the contract's error
`shutting_down` (and `Connection: close`, so the client's next attempt goes
through the load balancer to another replica); open watches and exec
sessions are ended cleanly by the callbacks registered in `on_begin` (one
still being opened gets the same 503: proxy.passthrough.streams); and
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
from typing import Callable

from aiohttp import web

from provisioning.errors import ShuttingDown, StoppedMidRequest
from proxy.http.errors import render

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
        self.tasks: set[asyncio.Task[object]] = set()
        """The requests in flight, by task: the front middleware
        (proxy.server.front) adds and discards its own, and calls `settle` once
        `watched`."""
        self._overdue: set[asyncio.Task[object]] = set()
        self._idle = asyncio.Event()
        """Set when nothing is in flight, once `wait_idle` watches: until
        then a request does not touch it (sets and clears on every request cost)."""
        self.watched = False
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
        self.watched = True
        if not self.tasks:
            self._idle.set()
        else:
            self._idle.clear()
        try:
            await asyncio.wait_for(self._idle.wait(), self.drain_seconds)
            return True
        except asyncio.TimeoutError:
            pass
        for task in list(self.tasks):
            self._overdue.add(task)
            task.cancel("the drain time is up")
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._idle.wait(), _OVERDUE_SECONDS)
        return False

    @property
    def in_flight(self) -> int:
        return len(self.tasks)

    def refusal(self, request: web.BaseRequest) -> web.Response | None:
        """The 503 for a request that arrives during the drain, or None."""
        if self.started_at is None or request.path in _ALWAYS:
            return None
        return render(request, ShuttingDown())

    def settle(self, task: "asyncio.Task[object]") -> None:
        """After `task` left, while `wait_idle` watches: idle if it was the last."""
        self._overdue.discard(task)
        if not self.tasks:
            self._idle.set()

    def overdue(self, task: "asyncio.Task[object]") -> bool:
        """Cancelled by `wait_idle` at the end of the drain (not by its client)."""
        return task in self._overdue

    def cancelled(self, request: web.BaseRequest, task: "asyncio.Task[object]") -> web.Response | None:
        """On a request's CancelledError: the 503 it still owes if it was
        cancelled at the end of the drain before its answer began (the
        cancellation is then consumed), or None: not ours to answer, or the
        answer has begun, so only a cut is left."""
        if not self.overdue(task) or request.writer.output_size:
            return None
        task.uncancel()
        return render(request, StoppedMidRequest())
