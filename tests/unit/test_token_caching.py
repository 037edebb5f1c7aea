"""The proxy's token cache, on a clock the test controls."""

from __future__ import annotations

import asyncio
import datetime

import pytest

from provisioning.models import IssuedToken
from proxy.token_cache import TenantTokenCache, TokenKey

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def wall(self) -> datetime.datetime:
        return T0 + datetime.timedelta(seconds=self.now - 1000.0)


class Fetcher:
    """Counts TokenRequests; each token lives an hour from the fake wall clock."""

    def __init__(self, clock: Clock, fail: bool = False) -> None:
        self.clock, self.fail, self.calls = clock, fail, 0
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self, key: TokenKey) -> IssuedToken:
        self.calls += 1
        await self.gate.wait()
        if self.fail:
            raise RuntimeError("TokenRequest failed")
        return IssuedToken(f"{key.namespace}/{key.service_account_uid}/{self.calls}",
                           self.clock.wall() + datetime.timedelta(hours=1), None)


def key(namespace: str = "tenant-a", uid: str = "uid-1") -> TokenKey:
    return TokenKey("https://api", namespace, "sa-tenant-admin", uid, "")


@pytest.fixture
def clock() -> Clock:
    return Clock()


def make(clock: Clock, fetch: Fetcher) -> TenantTokenCache:
    return TenantTokenCache(fetch, clock=clock, wall_clock=clock.wall)


async def test_a_cold_burst_makes_one_token_request(clock: Clock) -> None:
    fetch = Fetcher(clock)
    fetch.gate.clear()
    cache = make(clock, fetch)
    waiters = [asyncio.create_task(cache.get(key())) for _ in range(50)]
    await asyncio.sleep(0)
    fetch.gate.set()
    tokens = await asyncio.gather(*waiters)
    assert fetch.calls == 1 and len(set(tokens)) == 1


async def test_warm_key_costs_nothing(clock: Clock) -> None:
    fetch = Fetcher(clock)
    cache = make(clock, fetch)
    first = await cache.get(key())
    for _ in range(100):
        assert await cache.get(key()) == first
    assert fetch.calls == 1


async def test_renewed_once_within_ten_minutes_of_expiry(clock: Clock) -> None:
    fetch = Fetcher(clock)
    cache = make(clock, fetch)
    first = await cache.get(key())
    clock.now += 49 * 60  # 11 minutes left: still served
    assert await cache.get(key()) == first and fetch.calls == 1
    clock.now += 2 * 60  # 9 minutes left: renew
    renewed = await asyncio.gather(*(cache.get(key()) for _ in range(10)))
    assert fetch.calls == 2 and set(renewed) == {renewed[0]} and renewed[0] != first


async def test_no_two_tenants_or_service_account_generations_share_a_token(clock: Clock) -> None:
    fetch = Fetcher(clock)
    cache = make(clock, fetch)
    a = await cache.get(key("tenant-a"))
    b = await cache.get(key("tenant-b"))
    a_replaced = await cache.get(key("tenant-a", uid="uid-2"))
    assert len({a, b, a_replaced}) == 3 and fetch.calls == 3


async def test_a_failed_fetch_reaches_every_waiter_and_is_not_cached(clock: Clock) -> None:
    fetch = Fetcher(clock, fail=True)
    fetch.gate.clear()
    cache = make(clock, fetch)
    waiters = [asyncio.create_task(cache.get(key())) for _ in range(5)]
    await asyncio.sleep(0)
    fetch.gate.set()
    results = await asyncio.gather(*waiters, return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results) and fetch.calls == 1
    fetch.fail = False
    assert await cache.get(key()) and fetch.calls == 2


async def test_a_waiter_that_gives_up_does_not_cancel_the_fill(clock: Clock) -> None:
    fetch = Fetcher(clock)
    fetch.gate.clear()
    cache = make(clock, fetch)
    impatient = asyncio.create_task(cache.get(key()))
    patient = asyncio.create_task(cache.get(key()))
    await asyncio.sleep(0)
    impatient.cancel()
    fetch.gate.set()
    assert await patient and fetch.calls == 1


async def test_eviction(clock: Clock) -> None:
    fetch = Fetcher(clock)
    cache = make(clock, fetch)
    await cache.get(key("tenant-a"))
    await cache.get(key("tenant-b"))
    cache.evict_namespace("tenant-a")
    await cache.get(key("tenant-a"))
    await cache.get(key("tenant-b"))
    assert fetch.calls == 3
    cache.invalidate(key("tenant-b"))
    await cache.get(key("tenant-b"))
    assert fetch.calls == 4
