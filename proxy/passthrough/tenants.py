"""Workspace and membership lookups for the proxy, cached so a warm
request costs no database round trip.

Entries are trusted only while the cross-replica event listener is connected;
every status change publishes `workspace_changed`, which evicts the entry
here, drops the workspace's cached tokens and cuts its open streams, on
every replica; every membership change (added, removed, a new role or
account) publishes `member_changed`, which evicts that membership (also a
cached "not a member") and cuts that member's streams in that workspace.
The TTL is a backstop, not the mechanism.

When the listener loses its connection (and again when it is back), events
may have been missed: the cache is dropped and `on_reset` runs, which cuts
every open stream, since a stream is authorised once, at its start. A read
that was in flight when an event arrived is not cached: it may predate the
change.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Callable, cast

from provisioning.db import members as member_rows
from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.events import EventListener
from provisioning.models import Member, Workspace
from proxy.http.expiring import ExpiringMap

MembershipKey = tuple[uuid.UUID, uuid.UUID]
"""(workspace id, user id)."""
NOT_CACHED: Any = object()
"""What `cached_member` answers when it does not know (None: not a member)."""
_NO_MEMBER: Any = object()  # a cached "not a member" (the map's get answers None for a miss)


class WorkspaceDirectory:
    def __init__(self, db: Database, events: EventListener, *, on_change: Callable[[uuid.UUID, str], None],
                 on_member_change: Callable[[uuid.UUID, uuid.UUID], object],
                 on_reset: Callable[[], None], cache_seconds: float = 300,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._db = db
        self._events = events
        self._on_change = on_change
        self._on_member_change = on_member_change
        self._on_reset = on_reset
        self._cache: ExpiringMap[uuid.UUID, Workspace] = ExpiringMap(100_000, clock, cache_seconds)
        self._members: ExpiringMap[MembershipKey, Any] = ExpiringMap(100_000, clock, cache_seconds)
        events.subscribe(self._on_event, on_reset=self._reset)

    def _reset(self) -> None:
        self._cache.clear()
        self._members.clear()
        self._on_reset()

    def _on_event(self, message: dict[str, Any]) -> None:
        kind = message.get("kind")
        if kind == "workspace_changed":
            workspace_id = uuid.UUID(message["id"])
            self._cache.pop(workspace_id, None)
            self._on_change(workspace_id, str(message.get("namespace", "")))
        elif kind == "member_changed":
            workspace_id, user_id = uuid.UUID(message["workspace_id"]), uuid.UUID(message["user_id"])
            self._members.pop((workspace_id, user_id), None)
            self._on_member_change(workspace_id, user_id)

    def cached(self, workspace_id: uuid.UUID) -> Workspace | None:
        """The cached workspace while the cache is trusted, else None (then
        `get` reads it): the warm path, without a coroutine."""
        return self._cache.get(workspace_id) if self._events.connected else None

    async def get(self, workspace_id: uuid.UUID) -> Workspace | None:
        cached = self.cached(workspace_id)
        if cached is not None:
            return cached
        generation = self._events.generation
        workspace = await repo.get_workspace(self._db, workspace_id)
        if workspace is not None and self._events.may_cache(generation):
            self._cache[workspace_id] = workspace
        return workspace

    def cached_member(self, workspace_id: uuid.UUID, user_id: uuid.UUID) -> Member | None:
        """The cached membership (None: cached as not a member), or
        NOT_CACHED: the warm path, without a coroutine."""
        if not self._events.connected:
            return cast(Member, NOT_CACHED)
        found = self._members.get((workspace_id, user_id))
        if found is None:
            return cast(Member, NOT_CACHED)
        return None if found is _NO_MEMBER else cast(Member, found)

    async def member(self, workspace_id: uuid.UUID, user_id: uuid.UUID) -> Member | None:
        cached = self.cached_member(workspace_id, user_id)
        if cached is not NOT_CACHED:
            return cached
        generation = self._events.generation
        found = await member_rows.membership(self._db, workspace_id, user_id)
        if self._events.may_cache(generation):
            self._members[(workspace_id, user_id)] = _NO_MEMBER if found is None else found
        return found
