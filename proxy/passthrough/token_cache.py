"""Per-tenant ServiceAccount tokens for the proxy, cached.

Key: namespace, ServiceAccount name, ServiceAccount UID, person and
cluster (the Flux RFC-0010 lesson): every part that distinguishes one of
the proxy's credentials from another, so no tenant is ever served another's
token, a replaced ServiceAccount (new UID) can never be served a token of
its predecessor, and a token minted by one cluster is never sent to another
(it would be refused there anyway: each cluster signs its own). The person
is part of it because each token is recorded as theirs
(proxy.passthrough.token_minting), which the cluster's audit events are
joined to: a gateway admin acting as a workspace's owner account gets a
token of their own, never the owner's. Nothing more: the proxy's tokens all
have the API server's default audience.

A token is renewed once less than `refresh_margin_seconds` of its life is
left (the specification's 10 minutes), or once half its life is gone if it
was issued with less than twice the margin: otherwise a short-lived token
would be fetched anew on every request. Entries expire by themselves at that
point (an `ExpiringMap` on the injected clock), and the cache is bounded.

Fills are single-flight: however many requests miss at once, one
TokenRequest is made per key and all of them await it; a failed fetch
reaches every waiter and caches nothing. The fetch runs in a task the cache
owns, so a waiter that gives up (its client went away) does not cancel the
fill the others are waiting for.

Remaining life is measured on the injected monotonic clock: the token's
expiry is converted once, at fetch time, from the wall clock into a deadline
on the monotonic one. Wall-clock jumps then cannot keep a dead token alive,
and tests move time instead of waiting for it.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, NamedTuple

from provisioning.clusters import DEFAULT_CLUSTER
from provisioning.models import IssuedToken
from proxy.http.expiring import ExpiringMap, GroupIndex


class TokenKey(NamedTuple):
    """A tuple, so hashing and comparing it (every proxied request does,
    in the cache) runs in C."""

    namespace: str
    service_account: str
    service_account_uid: str
    person: int
    """The user id of the person it acts for (`uuid.UUID.int`), whom its
    audit events are joined to: an int, so the key still hashes and compares
    in C (a uuid.UUID does both in Python)."""
    cluster: str = DEFAULT_CLUSTER
    """Which cluster mints it, and the only one it is sent to."""


@dataclass(frozen=True)
class _Entry:
    token: str = field(repr=False)
    refresh_at: float
    """On the monotonic clock: when this entry stops being served."""


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _ignore_hit() -> None:
    pass


def _ignore_fetch(result: str) -> None:
    pass


class TenantTokenCache:
    """Tokens by TokenKey, renewed ahead of expiry, filled single-flight."""

    def __init__(self, fetch: Callable[[TokenKey], Awaitable[IssuedToken]], *,
                 refresh_margin_seconds: float = 600, maxsize: int = 10_000,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], datetime.datetime] = _utcnow,
                 on_hit: Callable[[], None] = _ignore_hit,
                 on_fetch: Callable[[str], None] = _ignore_fetch) -> None:
        self._fetch = fetch
        self._margin = refresh_margin_seconds
        self._clock = clock
        self._wall_clock = wall_clock
        self._entries: ExpiringMap[TokenKey, _Entry] = ExpiringMap(maxsize, clock)
        # Every change of a workspace evicts its namespace's tokens
        # (evict_namespace, on every replica), found by this index.
        self._by_namespace: GroupIndex[str, TokenKey, _Entry] = GroupIndex(
            self._entries, lambda key, _: key.namespace)
        self._inflight: dict[TokenKey, asyncio.Task[str]] = {}
        self._tasks: set[asyncio.Task[str]] = set()
        self._on_hit = on_hit
        self._on_fetch = on_fetch

    def cached(self, key: TokenKey) -> str | None:
        """A cached token for `key` with more than the margin of life left
        (a hit, counted), or None: then `get` fetches one. What a warm
        request needs, without a coroutine."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._on_hit()
        return entry.token

    async def get(self, key: TokenKey) -> str:
        """A token for `key` with more than the margin of life left."""
        token = self.cached(key)
        if token is not None:
            return token
        fill = self._inflight.get(key)
        if fill is None or fill.done():
            fill = asyncio.get_running_loop().create_task(self._fill(key))
            self._inflight[key] = fill
            self._tasks.add(fill)
            fill.add_done_callback(lambda done: self._settled(key, done))
        return await asyncio.shield(fill)

    def _settled(self, key: TokenKey, fill: asyncio.Task[str]) -> None:
        self._tasks.discard(fill)
        if self._inflight.get(key) is fill:
            del self._inflight[key]
        if not fill.cancelled():
            fill.exception()  # retrieved, even if every waiter gave up

    async def _fill(self, key: TokenKey) -> str:
        try:
            issued = await self._fetch(key)
        except Exception:
            self._on_fetch("error")
            raise
        self._on_fetch("success")
        now = self._clock()
        life = (issued.expires_at - self._wall_clock()).total_seconds()
        entry = _Entry(issued.token, now + life - min(self._margin, life / 2))
        # Evicted while fetching (suspension, clear): hand the token to
        # those already waiting, but keep nothing issued before the eviction.
        if self._inflight.get(key) is asyncio.current_task() and entry.refresh_at > now:
            self._entries.put(key, entry, entry.refresh_at)
            self._by_namespace.add(key, entry)
        return issued.token

    def invalidate(self, key: TokenKey, token: str | None = None) -> None:
        """Forget `key`'s token (after the API server refused it with 401).

        Given `token`, forget only if that is still the cached one, so a
        burst of requests refused with the same stale token does not throw
        away the fresh one the first of them already fetched. An in-flight
        fill is kept: it is already fetching a new token.
        """
        entry = self._entries.get(key)
        if entry is not None and (token is None or entry.token == token):
            self._entries.pop(key)

    def evict_namespace(self, namespace: str) -> None:
        """Drop every token of a namespace, cached or being fetched (used on
        suspension and on any change of the workspace)."""
        self._by_namespace.drop_group(namespace)
        if self._inflight:  # fills under way: a handful at most
            for key in [k for k in self._inflight if k.namespace == namespace]:
                del self._inflight[key]

    def clear(self) -> None:
        self._entries.clear()
        self._inflight.clear()
        self._by_namespace.clear()

    async def aclose(self) -> None:
        """Cancel fills still running, for a clean shutdown: the cache owns
        those tasks, so nobody else will."""
        self.clear()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"<TenantTokenCache entries={len(self._entries)} inflight={len(self._inflight)}>"
