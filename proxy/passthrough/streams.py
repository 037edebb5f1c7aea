"""Open long-running streams, so they end when their right to exist ends.

RBAC is checked when a request starts: a watch, log follow or exec opened
before a suspension would otherwise run on. Each relay registers its own
task with what authorised it (workspace, session, user); cutting cancels the
task, which closes both the client's connection and the upstream one. Streams
are cut when their workspace changes (suspension), their session is revoked
(logout) or reaches its expiry (a timer per stream), or their user changes
(suspension; a password change ends them too). The events arrive on every
replica through PostgreSQL NOTIFY (provisioning.events).

Each stream holds an upstream connection and a TLS session on both legs, so
a workspace may hold at most `max_per_workspace` at once: `track` refuses
one more (429) before anything is opened upstream, and cuts nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import uuid
from dataclasses import dataclass
from typing import Callable, Iterator

from provisioning.errors import RateLimited
from proxy.metrics import Metrics

# A stream ends when a client closes it; a moment is a fair guess at when one will.
_RETRY_AFTER_SECONDS = 5


@dataclass(frozen=True)
class Owner:
    """What authorised a stream; any of them ending ends it."""

    workspace_id: uuid.UUID
    session_id: uuid.UUID
    user_id: uuid.UUID
    session_expires_at: datetime.datetime


class StreamRegistry:
    def __init__(self, metrics: Metrics, max_per_workspace: int) -> None:
        self._open: dict[uuid.UUID, set[asyncio.Task[object]]] = {}
        self._owners: dict[asyncio.Task[object], Owner] = {}
        self._metrics = metrics
        self._max = max_per_workspace

    @contextlib.contextmanager
    def track(self, owner: Owner) -> Iterator[None]:
        task = asyncio.current_task()
        assert task is not None
        tasks = self._open.setdefault(owner.workspace_id, set())
        if len(tasks) >= self._max:
            if not tasks:
                self._open.pop(owner.workspace_id, None)
            self._metrics.rate_limited.labels(limit="streams").inc()
            raise RateLimited(_RETRY_AFTER_SECONDS, f"this workspace already has {self._max} open streams "
                                                    "(watch, logs, exec, attach, port-forward); close one first")
        tasks.add(task)
        self._owners[task] = owner
        left = (owner.session_expires_at - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
        expiry = asyncio.get_running_loop().call_later(max(left, 0.0), task.cancel, "session expired")
        self._metrics.open_streams.inc()
        try:
            yield
        finally:
            expiry.cancel()
            self._metrics.open_streams.dec()
            self._owners.pop(task, None)
            tasks.discard(task)
            if not tasks:
                self._open.pop(owner.workspace_id, None)

    def cut(self, workspace_id: uuid.UUID) -> int:
        tasks = self._open.get(workspace_id, set())
        for task in list(tasks):
            task.cancel("workspace changed")
        return len(tasks)

    def cut_session(self, session_id: uuid.UUID) -> int:
        return self._cut_where(lambda owner: owner.session_id == session_id, "session ended")

    def cut_user(self, user_id: uuid.UUID) -> int:
        return self._cut_where(lambda owner: owner.user_id == user_id, "user changed")

    def _cut_where(self, matches: Callable[[Owner], bool], why: str) -> int:
        chosen = [task for task, owner in self._owners.items() if matches(owner)]
        for task in chosen:
            task.cancel(why)
        return len(chosen)

    def cut_all(self) -> None:
        for workspace_id in list(self._open):
            self.cut(workspace_id)

    def count(self, workspace_id: uuid.UUID) -> int:
        return len(self._open.get(workspace_id, ()))
