"""Per-tenant ServiceAccount tokens for the proxy, cached.

Key: cluster, namespace, ServiceAccount name, ServiceAccount UID and audience
(the Flux RFC-0010 lesson): every part that distinguishes one credential from
another, so no tenant is ever served another's token, and a replaced
ServiceAccount (new UID) can never be served a token of its predecessor.

A token is renewed once less than `refresh_margin_seconds` of its life is
left (the specification's 10 minutes). Fills are single-flight: however many
requests miss at once, one TokenRequest is made per key and all of them
await it; a failed fetch reaches every waiter and caches nothing. Remaining
life is measured on the injected monotonic clock, so tests move time
instead of waiting for it.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import time
from dataclasses import dataclass
from typing import Awaitable, Callable

from cachetools import LRUCache

from provisioning.models import IssuedToken


@dataclass(frozen=True)
class TokenKey:
    cluster: str
    namespace: str
    service_account: str
    service_account_uid: str
    audience: str


@dataclass(frozen=True)
class _Entry:
    token: str
    deadline: float  # on the monotonic clock


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


class TenantTokenCache:
    def __init__(self, fetch: Callable[[TokenKey], Awaitable[IssuedToken]], *,
                 refresh_margin_seconds: float = 600, maxsize: int = 10_000,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], datetime.datetime] = _utcnow,
                 on_hit: Callable[[], None] | None = None,
                 on_fetch: Callable[[str], None] | None = None) -> None:
        self._fetch = fetch
        self._margin = refresh_margin_seconds
        self._clock = clock
        self._wall_clock = wall_clock
        self._entries: LRUCache[TokenKey, _Entry] = LRUCache(maxsize=maxsize)
        self._inflight: dict[TokenKey, asyncio.Future[_Entry]] = {}
        self._on_hit = on_hit or (lambda: None)
        self._on_fetch = on_fetch or (lambda _result: None)

    def _fresh(self, key: TokenKey) -> _Entry | None:
        entry = self._entries.get(key)
        if entry is not None and entry.deadline - self._clock() > self._margin:
            return entry
        return None

    async def get(self, key: TokenKey) -> str:
        entry = self._fresh(key)
        if entry is not None:
            self._on_hit()
            return entry.token
        fill = self._inflight.get(key)
        if fill is None:
            # A task of its own, so a caller that gives up (client gone)
            # does not cancel the fill the other waiters depend on.
            fill = asyncio.ensure_future(self._fill(key))
            self._inflight[key] = fill
            fill.add_done_callback(functools.partial(self._settled, key))
        return (await asyncio.shield(fill)).token

    def _settled(self, key: TokenKey, fill: "asyncio.Future[_Entry]") -> None:
        self._inflight.pop(key, None)
        if not fill.cancelled():
            fill.exception()  # mark retrieved even if every waiter left

    async def _fill(self, key: TokenKey) -> _Entry:
        try:
            issued = await self._fetch(key)
        except BaseException:
            self._on_fetch("error")
            raise
        self._on_fetch("success")
        life = (issued.expires_at - self._wall_clock()).total_seconds()
        entry = _Entry(issued.token, self._clock() + life)
        self._entries[key] = entry
        return entry

    def invalidate(self, key: TokenKey) -> None:
        self._entries.pop(key, None)

    def evict_namespace(self, namespace: str) -> None:
        for key in [k for k in self._entries if k.namespace == namespace]:
            self._entries.pop(key, None)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
