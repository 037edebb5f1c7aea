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
        """The requests in flight, by task: both request paths (the front
        middleware and the express lane) `enter` and `leave` them here."""
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

    def refuses(self, path: str) -> bool:
        """Whether a request for `path` that arrives now is refused (503
        `shutting_down`): during the drain, all but liveness."""
        return self.started_at is not None and path not in _ALWAYS

    def enter(self, task: "asyncio.Task[object]") -> None:
        """A request's task is in flight, for `wait_idle`."""
        self.tasks.add(task)

    def leave(self, task: "asyncio.Task[object]") -> None:
        """A request's task has finished; while `wait_idle` watches, idle if it was the last."""
        self.tasks.discard(task)
        if self.watched:  # only while a stop waits (sets and clears on every request cost)
            self._overdue.discard(task)
            if not self.tasks:
                self._idle.set()

    def owes_refusal(self, task: "asyncio.Task[object]", *, began: bool) -> bool:
        """On a request's CancelledError: True if `wait_idle` cancelled it at
        the end of the drain before its answer `began`. The cancellation is
        then consumed, and the caller answers 503 (StoppedMidRequest)
        rather than leaving the client a cut connection. False otherwise:
        not ours to answer (its client went away), or the answer has begun
        and only a cut is left."""
        if began or task not in self._overdue:
            return False
        task.uncancel()
        return True
