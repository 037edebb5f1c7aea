"""Open long-running streams per workspace, so suspension and shutdown can end them.

RBAC is checked when a request starts: a watch, log follow or exec opened
before a suspension would otherwise run on. Each relay registers its own
task. There are two ways to end one:

- `cut` (suspension, a lost event listener): the task is cancelled, which
  closes both the client's connection and the upstream one at once. Nothing
  more may reach a client whose access was just revoked.
- `end_all` (shutdown): the stream is marked `ending` and then cancelled; the
  relay catches that cancellation and ends its answer the way the API server
  ends one (a watch's chunked body terminated after a whole event, a
  WebSocket closed with 1001 "going away"), so clients reconnect elsewhere
  without reporting an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Iterator

from proxy.metrics import Metrics

_ENDING = "the gateway is shutting down"


class Stream:
    """One open relay, as its task sees it."""

    def __init__(self, task: "asyncio.Task[object]") -> None:
        self.task = task
        self.ending = False

    def take_end(self) -> bool:
        """Inside the relay, on CancelledError: True if this cancellation
        asks for a clean end (then it is consumed, and the relay may await
        its closing writes); False if the stream must be cut."""
        if not self.ending:
            return False
        self.task.uncancel()
        return True


class StreamRegistry:
    def __init__(self, metrics: Metrics) -> None:
        self._open: dict[uuid.UUID, dict[asyncio.Task[object], Stream]] = {}
        self._metrics = metrics
        self.closing = False

    @contextlib.contextmanager
    def track(self, workspace_id: uuid.UUID) -> Iterator[Stream]:
        task = asyncio.current_task()
        assert task is not None
        stream = Stream(task)
        streams = self._open.setdefault(workspace_id, {})
        streams[task] = stream
        self._metrics.open_streams.inc()
        try:
            if self.closing:  # opened during the drain: end it at its first wait
                self._end(stream)
            yield stream
        finally:
            self._metrics.open_streams.dec()
            streams.pop(task, None)
            if not streams:
                self._open.pop(workspace_id, None)

    def cut(self, workspace_id: uuid.UUID) -> int:
        streams = self._open.get(workspace_id, {})
        for stream in list(streams.values()):
            stream.ending = False  # a cut wins over a clean end
            stream.task.cancel("workspace suspended")
        return len(streams)

    def cut_all(self) -> None:
        for workspace_id in list(self._open):
            self.cut(workspace_id)

    def end_all(self) -> None:
        """Shutdown: end every open stream cleanly, and any opened from now on."""
        self.closing = True
        for streams in list(self._open.values()):
            for stream in list(streams.values()):
                self._end(stream)

    @staticmethod
    def _end(stream: Stream) -> None:
        if not stream.ending:
            stream.ending = True
            stream.task.cancel(_ENDING)

    def count(self, workspace_id: uuid.UUID) -> int:
        return len(self._open.get(workspace_id, ()))
