"""Open long-running streams, so they end when their right to exist ends,
and end cleanly however they end.

RBAC is checked when a request starts: a watch, log follow or exec opened
before a suspension would otherwise run on. Each relay registers its own
task with what authorised it (workspace, session, user). Its right ends
when its workspace changes (suspension), its session is revoked (logout)
or reaches its expiry (a timer per stream), or its user changes
(suspension, or a new admin flag, email or identity provider: what
migration 0010's `user_changed` trigger fires on). The events arrive on
every replica through PostgreSQL NOTIFY (provisioning.events). The gateway
stopping (`end_all`) ends every stream too.

Every one of these is a clean end (`Stream.end`, with an `Ending` that
says why): the stream is marked and its task cancelled; the relay catches
that cancellation and ends its answer the way the API server ends one: a
watch's chunked body terminated right after the event in flight (nothing
past it: a revoked client gets no further event), a WebSocket closed
between two frames with the Ending's close code (1008 for a right that
ended, 1001 for a stop). So clients see an end, not a broken connection:
kubectl and the console list and watch again, and meet the 401 or 403 of
the right that ended (a broken chunked body is a network error in a
browser). A clean end that does not finish within `CLEAN_END_SECONDS` (an
event that never completes, a client that does not read) becomes a cut:
the task is cancelled again and the client's connection aborted, so a
revocation takes effect within that bound whatever the peers do.

A stream ended before its answer began (still taking its slot, its token,
the exec's audit row, or awaiting the API server's head or 101) has no
answer to end cleanly. For a stop, `track` answers it, and any stream
opened after `end_all`, with the drain's 503 `shutting_down`
(proxy.http.draining), so the client retries elsewhere; for a right that
ended, its connection is closed without an answer (its next request meets
the refusal).

`track` registers a stream and then takes one of its workspace's slots
(proxy.passthrough.stream_slots: the cap across replicas) before anything
is opened upstream; registered first, a stream whose right ends while its
slot is being taken is ended all the same.

A right can also end before the stream is registered, while the gate still
reads what authorises it (a session, a workspace from the database): the
end finds nothing to end, and the stream would open on a stale answer. So
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

from aiohttp import WSCloseCode, web

from provisioning.errors import ShuttingDown
from proxy.http.metrics import Metrics
from proxy.passthrough.stream_buffers import StreamBuffers
from proxy.passthrough.stream_slots import StreamSlots

# Cuts kept for streams authorised while they happened: far more than can
# arrive while one request reads its session and workspace.
_KEPT_CUTS = 1024
CLEAN_END_SECONDS = 5.0
"""A clean end that has not finished by then becomes a cut: the bound on
how long a revoked client may still be sent the rest of one event (or
frame), and on the wait for a client that does not read. The event
listener's own bound on noticing a lost connection is the same 5 s."""


@dataclass(frozen=True)
class Ending:
    """Why a stream ends, as its client is told: a WebSocket gets
    `close_code` and `close_reason` (RFC 6455 7.4); a watch, the end of its
    body (HTTP has no words for why: the client's next request says)."""

    why: str
    close_code: int
    close_reason: bytes
    shutdown: bool = False
    """The gateway stops: a stream still opening is answered 503 `shutting_down`."""


# 1001 "going away": the server goes down; reconnecting (elsewhere) is the cure.
SHUTDOWN = Ending("the gateway is shutting down", WSCloseCode.GOING_AWAY,
                  b"the gateway is shutting down; reconnect", shutdown=True)
# 1008 "policy violation", RFC 6455's generic refusal: the right this stream
# ran on has ended, so reconnecting as before is refused (401/403), and the
# reason tells a person what to do instead of retrying blindly.
WORKSPACE_CHANGED = Ending("workspace changed", WSCloseCode.POLICY_VIOLATION,
                           b"the workspace's access changed; reconnect")
SESSION_ENDED = Ending("session ended", WSCloseCode.POLICY_VIOLATION, b"the session ended; sign in again")
SESSION_EXPIRED = Ending("session expired", WSCloseCode.POLICY_VIOLATION, b"the session expired; sign in again")
USER_CHANGED = Ending("user changed", WSCloseCode.POLICY_VIOLATION, b"the account changed; sign in again")
MEMBER_CHANGED = Ending("membership changed", WSCloseCode.POLICY_VIOLATION,
                        b"your membership of this workspace changed")
# 1013 "try again later": the replica lost track of revocations (its event
# listener reconnected); nothing of the client's ended, but a stream it
# could not cut must not run on. Reopened once the listener is back.
RECHECK = Ending("every stream ended: access changes may have been missed", WSCloseCode.TRY_AGAIN_LATER,
                 b"the gateway must check access again; reconnect")


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

    def __init__(self, task: "asyncio.Task[object]", owner: Owner,
                 transport: asyncio.Transport | None = None) -> None:
        self.task = task
        self.owner = owner
        self.transport = transport
        """The client's connection, aborted by a cut."""
        self.ending: Ending | None = None
        self.was_cut = False
        """Once cut, always cut: a clean end asked for later must not turn
        the cut's cancellation into a clean end."""
        self._deadline: asyncio.TimerHandle | None = None

    def take_end(self) -> Ending | None:
        """Inside the relay, on CancelledError: the Ending if this
        cancellation asks for a clean end (then it is consumed, and the
        relay may await its closing writes, for `CLEAN_END_SECONDS` at
        most); None if the stream must be cut."""
        if self.ending is None or self.was_cut:
            return None
        self.task.uncancel()
        return self.ending

    def end(self, ending: Ending) -> None:
        """End cleanly, or be cut `CLEAN_END_SECONDS` from now. A right that
        ends after a stop asked for its end replaces the stop's words (it
        must not be answered 503 as if it could retry elsewhere)."""
        if self.was_cut:
            return
        if self.ending is not None:
            if self.ending.shutdown and not ending.shutdown:
                self.ending = ending
            return
        self.ending = ending
        self.task.cancel(ending.why)
        self._deadline = asyncio.get_running_loop().call_later(CLEAN_END_SECONDS, self.cut, "no clean end in time")

    def cut(self, why: str) -> None:
        """End at once: the task cancelled (again, if a clean end runs) and
        the client's connection aborted, with nothing queued sent."""
        if self.was_cut:
            return
        self.was_cut = True
        self.task.cancel(why)
        if self.transport is not None:
            self.transport.abort()

    def forget(self) -> None:
        """The stream is over: its deadline has nothing left to cut."""
        if self._deadline is not None:
            self._deadline.cancel()


class StreamRegistry:
    def __init__(self, metrics: Metrics, slots: StreamSlots, buffers: StreamBuffers | None = None) -> None:
        self._open: dict[uuid.UUID, dict[asyncio.Task[object], Stream]] = {}
        self._metrics = metrics
        self.slots = slots
        self.buffers = buffers if buffers is not None else StreamBuffers()
        """What the streams hold in memory, bounded across the replica."""
        self.count = 0
        """Streams open now."""
        self._high_water = 0
        self.closing = False
        self.cuts = 0
        """Cuts made so far: what an authorisation notes before its first read."""
        self._latest_cuts: collections.deque[tuple[int, Callable[[Owner], bool], str]] = \
            collections.deque(maxlen=_KEPT_CUTS)

    @contextlib.asynccontextmanager
    async def track(self, owner: Owner, request: web.BaseRequest) -> AsyncIterator[Stream]:
        """The current task as a stream of `owner`'s, holding one of its
        workspace's slots (429 if none is free). ShuttingDown (503) if
        `end_all` has run, or if the stop ends the stream before
        `request`'s answer began; any other end before the answer began, a
        cut, or an end that the relay did not take after its answer began,
        stays a cancellation."""
        if self.closing:
            raise ShuttingDown()
        with self.register(owner, request.transport) as stream:
            try:
                async with self.slots.held(owner.workspace_id):
                    yield stream
            except asyncio.CancelledError:
                # No answer can follow one that has begun: only a cut is left
                # then, as in Drain.cancelled.
                if request.writer.output_size or stream.ending is None or not stream.ending.shutdown:
                    raise
                if not stream.take_end():
                    raise
                raise ShuttingDown() from None

    @contextlib.contextmanager
    def register(self, owner: Owner, transport: asyncio.Transport | None = None) -> Iterator[Stream]:
        """The current task as a stream of `owner`'s (its client on
        `transport`), so the end of any of its rights ends it; its
        session's expiry is a timer of its own."""
        task = asyncio.current_task()
        assert task is not None
        streams = self._open.setdefault(owner.workspace_id, {})
        stream = streams[task] = Stream(task, owner, transport)
        missed = self._missed_cut(owner)
        if missed is not None:
            stream.cut(missed)  # its right ended while it was being authorised
        left = (owner.session_expires_at - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
        expiry = asyncio.get_running_loop().call_later(max(left, 0.0), stream.end, SESSION_EXPIRED)
        self._metrics.open_streams.inc()
        self.count += 1
        self._high_water = max(self._high_water, self.count)
        try:
            yield stream
        finally:
            expiry.cancel()
            stream.forget()
            self._metrics.open_streams.dec()
            self.count -= 1
            streams.pop(task, None)
            if not streams:
                self._open.pop(owner.workspace_id, None)

    def take_high_water(self) -> tuple[int, int]:
        """The most streams open at once since the last call, and how many
        are open now (the heap trimmer's sign that a burst has ended)."""
        high_water, self._high_water = self._high_water, self.count
        return high_water, self.count

    def require_room(self, workspace_id: uuid.UUID) -> Awaitable[None]:
        """429 if the workspace holds every slot already (takes none)."""
        return self.slots.require_room(workspace_id)

    def cut(self, workspace_id: uuid.UUID) -> int:
        return self._cut_where(lambda owner: owner.workspace_id == workspace_id, WORKSPACE_CHANGED)

    def cut_session(self, session_id: uuid.UUID) -> int:
        return self._cut_where(lambda owner: owner.session_id == session_id, SESSION_ENDED)

    def cut_user(self, user_id: uuid.UUID) -> int:
        return self._cut_where(lambda owner: owner.user_id == user_id, USER_CHANGED)

    def cut_member(self, workspace_id: uuid.UUID, user_id: uuid.UUID) -> int:
        """A membership changed (removed, a new role or account): that member's streams there end."""
        return self._cut_where(lambda owner: owner.workspace_id == workspace_id and owner.user_id == user_id,
                               MEMBER_CHANGED)

    def cut_all(self) -> None:
        """The replica may have missed a revocation: every stream ends (cleanly)."""
        self._cut_where(lambda owner: True, RECHECK)

    def abort_all(self) -> None:
        """After the drain: whatever still runs is cut at once."""
        for streams in list(self._open.values()):
            for stream in list(streams.values()):
                stream.cut("the drain time is up")

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

    def _cut_where(self, matches: Callable[[Owner], bool], ending: Ending) -> int:
        """End the matching streams (cleanly, within CLEAN_END_SECONDS), and
        keep the cut for those being authorised now."""
        self.cuts += 1
        self._latest_cuts.append((self.cuts, matches, ending.why))
        chosen = [stream for streams in self._open.values() for stream in streams.values() if matches(stream.owner)]
        for stream in chosen:
            stream.end(ending)
        return len(chosen)

    def end_all(self) -> None:
        """Shutdown: end every open stream cleanly, and refuse any opened from now on (`track`)."""
        self.closing = True
        for streams in list(self._open.values()):
            for stream in list(streams.values()):
                stream.end(SHUTDOWN)
