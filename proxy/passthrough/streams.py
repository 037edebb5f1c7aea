"""Open long-running streams per workspace, so suspension can cut them.

RBAC is checked when a request starts: a watch, log follow or exec opened
before a suspension would otherwise run on. Each relay registers its own
task; `cut` cancels them, which closes both the client's connection and the
upstream one.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Iterator

from proxy.metrics import Metrics


class StreamRegistry:
    def __init__(self, metrics: Metrics) -> None:
        self._open: dict[uuid.UUID, set[asyncio.Task[object]]] = {}
        self._metrics = metrics

    @contextlib.contextmanager
    def track(self, workspace_id: uuid.UUID) -> Iterator[None]:
        task = asyncio.current_task()
        assert task is not None
        tasks = self._open.setdefault(workspace_id, set())
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
