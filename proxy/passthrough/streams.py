"""Open long-running streams, so they end when their right to exist ends,
and end cleanly when the gateway stops.

RBAC is checked when a request starts: a watch, log follow or exec opened
before a suspension would otherwise run on. Each relay registers its own
task with what authorised it (workspace, session, user). There are two ways
to end one:

- a cut: the task is cancelled, which closes both the client's connection
  and the upstream one at once; nothing more may reach a client whose access
  was just revoked. Streams are cut when their workspace changes
  (suspension), their session is revoked (logout) or reaches its expiry (a
  timer per stream), or their user changes (suspension; a password change
  ends them too). The events arrive on every replica through PostgreSQL
  NOTIFY (provisioning.events).
- `end_all` (shutdown): the stream is marked `ending` and then cancelled;
  the relay catches that cancellation and ends its answer the way the API
  server ends one (a watch's chunked body terminated after a whole event, a
  WebSocket closed with 1001 "going away"), so clients reconnect elsewhere
  without reporting an error.

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
_ENDING = "the gateway is shutting down"


@dataclass(frozen=True)
class Owner:
    """What authorised a stream; any of them ending ends it."""

    workspace_id: uuid.UUID
    session_id: uuid.UUID
    user_id: uuid.UUID
    session_expires_at: datetime.datetime


class Stream:
    """One open relay, as its task sees it."""

    def __init__(self, task: "asyncio.Task[object]", owner: Owner) -> None:
        self.task = task
        self.owner = owner
        self.ending = False

    def take_end(self) -> bool:
        """Inside the relay, on CancelledError: True if this cancellation
        asks for a clean end (then it is consumed, and the relay may await
        its closing writes); False if the stream must be cut."""
        if not self.ending:
            return False
        self.task.uncancel()
        return True

    def cut(self, why: str) -> None:
        self.ending = False  # a cut wins over a clean end
        self.task.cancel(why)

    def end(self) -> None:
        if not self.ending:
            self.ending = True
            self.task.cancel(_ENDING)


class StreamRegistry:
    def __init__(self, metrics: Metrics, max_per_workspace: int) -> None:
        self._open: dict[uuid.UUID, dict[asyncio.Task[object], Stream]] = {}
        self._metrics = metrics
        self._max = max_per_workspace
        self.closing = False

    @contextlib.contextmanager
    def track(self, owner: Owner) -> Iterator[Stream]:
        task = asyncio.current_task()
        assert task is not None
        self.require_room(owner.workspace_id)
        streams = self._open.setdefault(owner.workspace_id, {})
        stream = streams[task] = Stream(task, owner)
        left = (owner.session_expires_at - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
        expiry = asyncio.get_running_loop().call_later(max(left, 0.0), stream.cut, "session expired")
        self._metrics.open_streams.inc()
        try:
            if self.closing:  # opened during the drain: end it at its first wait
                stream.end()
            yield stream
        finally:
            expiry.cancel()
            self._metrics.open_streams.dec()
            streams.pop(task, None)
            if not streams:
                self._open.pop(owner.workspace_id, None)

    def require_room(self, workspace_id: uuid.UUID) -> None:
        """429 if the workspace holds its maximum of open streams already."""
        if self.count(workspace_id) >= self._max:
            self._metrics.rate_limited.labels(limit="streams").inc()
            raise RateLimited(_RETRY_AFTER_SECONDS, f"this workspace already has {self._max} open streams "
                                                    "(watch, logs, exec, attach, port-forward); close one first")

    def cut(self, workspace_id: uuid.UUID) -> int:
        return self._cut_where(lambda owner: owner.workspace_id == workspace_id, "workspace changed")

    def cut_session(self, session_id: uuid.UUID) -> int:
        return self._cut_where(lambda owner: owner.session_id == session_id, "session ended")

    def cut_user(self, user_id: uuid.UUID) -> int:
        return self._cut_where(lambda owner: owner.user_id == user_id, "user changed")

    def cut_all(self) -> None:
        self._cut_where(lambda owner: True, "every stream cut")

    def _cut_where(self, matches: Callable[[Owner], bool], why: str) -> int:
        chosen = [stream for streams in self._open.values() for stream in streams.values() if matches(stream.owner)]
        for stream in chosen:
            stream.cut(why)
        return len(chosen)

    def end_all(self) -> None:
        """Shutdown: end every open stream cleanly, and any opened from now on."""
        self.closing = True
        for streams in list(self._open.values()):
            for stream in list(streams.values()):
                stream.end()

    def count(self, workspace_id: uuid.UUID) -> int:
        return len(self._open.get(workspace_id, ()))
