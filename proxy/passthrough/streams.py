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
  timer per stream), or their user changes (suspension, or a new admin
  flag, email or identity provider: what migration 0010's `user_changed`
  trigger fires on). The events arrive on every replica through PostgreSQL
  NOTIFY (provisioning.events).
- `end_all` (shutdown): the stream is marked `ending` and then cancelled;
  the relay catches that cancellation and ends its answer the way the API
  server ends one (a watch's chunked body terminated after a whole event, a
  WebSocket closed with 1001 "going away"), so clients reconnect elsewhere
  without reporting an error. A stream ended before its answer began (still
  taking its slot, its token, the exec's audit row, or awaiting the API
  server's head or 101) has nothing to end cleanly: `track` answers it, and
  any stream opened after `end_all`, with the drain's 503 `shutting_down`
  (proxy.http.draining), so the client retries elsewhere rather than see its
  connection closed without an answer.

`track` registers a stream and then takes one of its workspace's slots
(proxy.passthrough.stream_slots: the cap across replicas) before anything
is opened upstream; registered first, a stream whose right ends while its
slot is being taken is cut all the same.

A right can also end before the stream is registered, while the gate still
reads what authorises it (a session, a workspace from the database): the
cut finds nothing to cut, and the stream would open on a stale answer. So
the registry numbers its cuts and keeps the latest; the gate notes the
number before it reads anything (`Owner.cuts_seen`), and `register` cuts a
stream at once if a cut made since then matches it (or if so many cuts came
since that the ones it missed are no longer kept).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime
import uuid
from dataclasses import dataclass
from typing import AsyncIterator, Awaitable, Callable, Iterator

from aiohttp import web

from provisioning.errors import ShuttingDown
from proxy.http.metrics import Metrics
from proxy.passthrough.stream_slots import StreamSlots

_ENDING = "the gateway is shutting down"
# Cuts kept for streams authorised while they happened: far more than can
# arrive while one request reads its session and workspace.
_KEPT_CUTS = 1024


@dataclass(frozen=True)
class Owner:
    """What authorised a stream; any of them ending ends it."""

    workspace_id: uuid.UUID
    session_id: uuid.UUID
    user_id: uuid.UUID
    session_expires_at: datetime.datetime
    cuts_seen: int = 0
    """The registry's cut count before anything that authorised it was read."""


class Stream:
    """One open relay, as its task sees it."""

    def __init__(self, task: "asyncio.Task[object]", owner: Owner) -> None:
        self.task = task
        self.owner = owner
        self.ending = False
        self.was_cut = False
        """Once cut, always cut: a clean end asked for later (a shutdown's
        `end_all` in the same loop iteration, before the relay ran) must not
        turn the cut's cancellation into a clean end."""

    def take_end(self) -> bool:
        """Inside the relay, on CancelledError: True if this cancellation
        asks for a clean end (then it is consumed, and the relay may await
        its closing writes); False if the stream must be cut."""
        if not self.ending or self.was_cut:
            return False
        self.task.uncancel()
        return True

    def cut(self, why: str) -> None:
        self.was_cut = True  # a cut wins over a clean end, asked for before or after
        self.ending = False
        self.task.cancel(why)

    def end(self) -> None:
        if not self.ending and not self.was_cut:
            self.ending = True
            self.task.cancel(_ENDING)


class StreamRegistry:
    def __init__(self, metrics: Metrics, slots: StreamSlots) -> None:
        self._open: dict[uuid.UUID, dict[asyncio.Task[object], Stream]] = {}
        self._metrics = metrics
        self.slots = slots
        self.closing = False
        self.cuts = 0
        """Cuts made so far: what an authorisation notes before its first read."""
        self._latest_cuts: collections.deque[tuple[int, Callable[[Owner], bool], str]] = \
            collections.deque(maxlen=_KEPT_CUTS)

    @contextlib.asynccontextmanager
    async def track(self, owner: Owner, request: web.BaseRequest) -> AsyncIterator[Stream]:
        """The current task as a stream of `owner`'s, holding one of its
        workspace's slots (429 if none is free). ShuttingDown (503) if
        `end_all` has run, or if it ends the stream before `request`'s
        answer began; a cut, or an end that the relay did not take after
        its answer began, stays a cancellation."""
        if self.closing:
            raise ShuttingDown()
        with self.register(owner) as stream:
            try:
                async with self.slots.held(owner.workspace_id):
                    yield stream
            except asyncio.CancelledError:
                # No answer can follow one that has begun: only a cut is left
                # then, as in Drain.cancelled.
                if request.writer.output_size or not stream.take_end():
                    raise
                raise ShuttingDown() from None

    @contextlib.contextmanager
    def register(self, owner: Owner) -> Iterator[Stream]:
        """The current task as a stream of `owner`'s, so the end of any of
        its rights cuts it; its session's expiry is a timer of its own."""
        task = asyncio.current_task()
        assert task is not None
        streams = self._open.setdefault(owner.workspace_id, {})
        stream = streams[task] = Stream(task, owner)
        missed = self._missed_cut(owner)
        if missed is not None:
            stream.cut(missed)  # its right ended while it was being authorised
        left = (owner.session_expires_at - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
        expiry = asyncio.get_running_loop().call_later(max(left, 0.0), stream.cut, "session expired")
        self._metrics.open_streams.inc()
        try:
            yield stream
        finally:
            expiry.cancel()
            self._metrics.open_streams.dec()
            streams.pop(task, None)
            if not streams:
                self._open.pop(owner.workspace_id, None)

    def require_room(self, workspace_id: uuid.UUID) -> Awaitable[None]:
        """429 if the workspace holds every slot already (takes none)."""
        return self.slots.require_room(workspace_id)

    def cut(self, workspace_id: uuid.UUID) -> int:
        return self._cut_where(lambda owner: owner.workspace_id == workspace_id, "workspace changed")

    def cut_session(self, session_id: uuid.UUID) -> int:
        return self._cut_where(lambda owner: owner.session_id == session_id, "session ended")

    def cut_user(self, user_id: uuid.UUID) -> int:
        return self._cut_where(lambda owner: owner.user_id == user_id, "user changed")

    def cut_all(self) -> None:
        self._cut_where(lambda owner: True, "every stream cut")

    def _missed_cut(self, owner: Owner) -> str | None:
        """Why a cut made since `owner.cuts_seen` ends this owner's stream, if one does."""
        if owner.cuts_seen == self.cuts:
            return None
        if self.cuts - owner.cuts_seen > len(self._latest_cuts):
            return "authorised before the cuts kept"
        for number, matches, why in reversed(self._latest_cuts):
            if number <= owner.cuts_seen:
                break
            if matches(owner):
                return why
        return None

    def _cut_where(self, matches: Callable[[Owner], bool], why: str) -> int:
        self.cuts += 1
        self._latest_cuts.append((self.cuts, matches, why))
        chosen = [stream for streams in self._open.values() for stream in streams.values() if matches(stream.owner)]
        for stream in chosen:
            stream.cut(why)
        return len(chosen)

    def end_all(self) -> None:
        """Shutdown: end every open stream cleanly, and refuse any opened from now on (`track`)."""
        self.closing = True
        for streams in list(self._open.values()):
            for stream in list(streams.values()):
                stream.end()
