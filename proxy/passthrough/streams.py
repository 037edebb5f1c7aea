"""Open long-running streams per workspace, so suspension can cut them.

RBAC is checked when a request starts: a watch, log follow or exec opened
before a suspension would otherwise run on. Each relay registers its own
task; `cut` cancels them, which closes both the client's connection and the
upstream one.

Each stream holds an upstream connection and a TLS session on both legs, so
a workspace may hold at most `max_per_workspace` at once: `track` refuses
one more (429) before anything is opened upstream, and cuts nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Iterator

from provisioning.errors import RateLimited
from proxy.metrics import Metrics

# A stream ends when a client closes it; a moment is a fair guess at when one will.
_RETRY_AFTER_SECONDS = 5


class StreamRegistry:
    def __init__(self, metrics: Metrics, max_per_workspace: int) -> None:
        self._open: dict[uuid.UUID, set[asyncio.Task[object]]] = {}
        self._metrics = metrics
        self._max = max_per_workspace

    @contextlib.contextmanager
    def track(self, workspace_id: uuid.UUID) -> Iterator[None]:
        task = asyncio.current_task()
        assert task is not None
        tasks = self._open.setdefault(workspace_id, set())
        if len(tasks) >= self._max:
            self._metrics.rate_limited.labels(limit="streams").inc()
            raise RateLimited(_RETRY_AFTER_SECONDS, f"this workspace already has {self._max} open streams "
                                                    "(watch, logs, exec, attach, port-forward); close one first")
        tasks.add(task)
        self._metrics.open_streams.inc()
        try:
            yield
        finally:
            self._metrics.open_streams.dec()
            tasks.discard(task)
            if not tasks:
                self._open.pop(workspace_id, None)

    def cut(self, workspace_id: uuid.UUID) -> int:
        tasks = self._open.get(workspace_id, set())
        for task in list(tasks):
            task.cancel("workspace suspended")
        return len(tasks)

    def cut_all(self) -> None:
        for workspace_id in list(self._open):
            self.cut(workspace_id)

    def count(self, workspace_id: uuid.UUID) -> int:
        return len(self._open.get(workspace_id, ()))
