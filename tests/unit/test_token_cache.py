"""The proxy's token cache (proxy.passthrough.token_cache), on clocks the test moves."""

from __future__ import annotations

import asyncio
import datetime
import uuid

import pytest

from provisioning.models import IssuedToken
from proxy.passthrough.token_cache import TenantTokenCache, TokenKey

EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
HOUR = 3600.0


class FakeClock:
    """A monotonic clock and a wall clock that move together, by hand.

    The monotonic one starts far from zero so that nothing can pass by
    confusing "monotonic seconds" with "seconds of life".
    """

    def __init__(self) -> None:
        self.now = 50_000.0

    def __call__(self) -> float:
        return self.now

    def wall(self) -> datetime.datetime:
        return EPOCH + datetime.timedelta(seconds=self.now)

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeTokenRequest:
    """Counts TokenRequests; a gate holds them in flight until the test opens it."""

    def __init__(self, clock: FakeClock, lifetime: float = HOUR) -> None:
        self.clock = clock
        self.lifetime = lifetime
        self.calls: list[TokenKey] = []
        self.error: Exception | None = None
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self, key: TokenKey) -> IssuedToken:
        self.calls.append(key)
        await self.gate.wait()
        if self.error is not None:
            raise self.error
        return IssuedToken(f"{key.namespace}/{key.service_account_uid}/{len(self.calls)}",
                           self.clock.wall() + datetime.timedelta(seconds=self.lifetime), None)


PERSON = uuid.UUID("00000000-0000-4000-8000-000000000001")


def key(namespace: str = "tenant-a", uid: str = "uid-1", **changes: object) -> TokenKey:
    fields = {"namespace": namespace, "service_account": "sa-tenant-admin", "service_account_uid": uid,
              "person": PERSON.int, **changes}
    return TokenKey(**fields)  # type: ignore[arg-type]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def fetch(clock: FakeClock) -> FakeTokenRequest:
    return FakeTokenRequest(clock)


class Counters:
    def __init__(self) -> None:
        self.hits = 0
        self.fetches: list[str] = []

    def hit(self) -> None:
        self.hits += 1

    def fetched(self, result: str) -> None:
        self.fetches.append(result)


@pytest.fixture
def counters() -> Counters:
    return Counters()


@pytest.fixture
def cache(clock: FakeClock, fetch: FakeTokenRequest, counters: Counters) -> TenantTokenCache:
    return TenantTokenCache(fetch, clock=clock, wall_clock=clock.wall, on_hit=counters.hit,
                            on_fetch=counters.fetched)


async def burst(cache: TenantTokenCache, fetch: FakeTokenRequest, k: TokenKey, n: int) -> list[str | BaseException]:
    """n concurrent gets, all issued while the TokenRequest is held in flight."""
    fetch.gate.clear()
    waiters = [asyncio.create_task(cache.get(k)) for _ in range(n)]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    fetch.gate.set()
    return await asyncio.gather(*waiters, return_exceptions=True)


async def test_a_cold_burst_makes_exactly_one_token_request(
        cache: TenantTokenCache, fetch: FakeTokenRequest, counters: Counters) -> None:
    tokens = await burst(cache, fetch, key(), 100)
    assert len(fetch.calls) == 1
    assert set(tokens) == {"tenant-a/uid-1/1"}
    assert counters.fetches == ["success"]


async def test_a_warm_key_makes_no_token_request(
        cache: TenantTokenCache, fetch: FakeTokenRequest, clock: FakeClock, counters: Counters) -> None:
    first = await cache.get(key())
    for _ in range(100):
        clock.advance(1)
        assert await cache.get(key()) == first
    assert len(fetch.calls) == 1
    assert counters.hits == 100


async def test_each_person_has_a_token_of_their_own_for_the_same_account(
        cache: TenantTokenCache, fetch: FakeTokenRequest) -> None:
    """A gateway admin who is no member acts as the owner's account: the
    token is recorded as theirs (proxy.passthrough.token_minting), so it is
    never the owner's token they are served."""
    admin = uuid.UUID("00000000-0000-4000-8000-00000000000a")
    owners = await cache.get(key())
    admins = await cache.get(key(person=admin.int))
    assert owners != admins
    assert [k.person for k in fetch.calls] == [PERSON.int, admin.int]
    assert await cache.get(key()) == owners and await cache.get(key(person=admin.int)) == admins


@pytest.mark.parametrize("elapsed, renewed", [
    (0, False),
    (49 * 60, False),  # 11 minutes left
    (50 * 60 - 1, False),  # one second more than 10 minutes left
    (50 * 60 + 1, True),  # just under 10 minutes left
    (55 * 60, True),
    (2 * HOUR, True),  # long expired
])
async def test_renewed_within_ten_minutes_of_expiry(
        cache: TenantTokenCache, fetch: FakeTokenRequest, clock: FakeClock, elapsed: float, renewed: bool) -> None:
    first = await cache.get(key())
    clock.advance(elapsed)
    tokens = await burst(cache, fetch, key(), 20)
    assert len(fetch.calls) == (2 if renewed else 1)
    assert len(set(tokens)) == 1 and (tokens[0] != first) == renewed
    assert await cache.get(key()) == tokens[0] and len(fetch.calls) == (2 if renewed else 1)


async def test_the_margin_is_configurable(clock: FakeClock, fetch: FakeTokenRequest) -> None:
    cache = TenantTokenCache(fetch, refresh_margin_seconds=300, clock=clock, wall_clock=clock.wall)
    await cache.get(key())
    clock.advance(HOUR - 301)
    await cache.get(key())
    assert len(fetch.calls) == 1
    clock.advance(2)
    await cache.get(key())
    assert len(fetch.calls) == 2


async def test_remaining_life_is_measured_on_the_monotonic_clock(
        clock: FakeClock, fetch: FakeTokenRequest) -> None:
    wall = [EPOCH]
    cache = TenantTokenCache(fetch, clock=clock, wall_clock=lambda: wall[0])
    fetch.clock = FakeClock()
    fetch.clock.now = 0.0  # tokens expire an hour after EPOCH
    await cache.get(key())
    wall[0] = EPOCH - datetime.timedelta(days=365)  # the wall clock jumps back a year
    clock.advance(51 * 60)
    await cache.get(key())
    assert len(fetch.calls) == 2


async def test_a_short_lived_token_is_still_cached_for_half_its_life(
        clock: FakeClock, fetch: FakeTokenRequest) -> None:
    fetch.lifetime = 600  # the API server's minimum: no more than the margin
    cache = TenantTokenCache(fetch, clock=clock, wall_clock=clock.wall)
    await cache.get(key())
    clock.advance(299)
    await cache.get(key())
    assert len(fetch.calls) == 1
    clock.advance(2)
    await cache.get(key())
    assert len(fetch.calls) == 2


@pytest.mark.parametrize("other", [
    key(namespace="tenant-b"),
    key(uid="uid-2"),
    key(service_account="default"),
])
async def test_no_two_credentials_share_an_entry(
        cache: TenantTokenCache, fetch: FakeTokenRequest, other: TokenKey) -> None:
    mine = await cache.get(key())
    theirs = await cache.get(other)
    assert mine != theirs
    assert fetch.calls == [key(), other]
    assert await cache.get(key()) == mine and await cache.get(other) == theirs
    assert len(fetch.calls) == 2


async def test_concurrent_misses_on_different_keys_fetch_each_once(
        cache: TenantTokenCache, fetch: FakeTokenRequest) -> None:
    fetch.gate.clear()
    keys = [key("tenant-a"), key("tenant-b"), key("tenant-a", uid="uid-2")]
    waiters = [asyncio.create_task(cache.get(k)) for k in keys * 10]
    await asyncio.sleep(0)
    fetch.gate.set()
    tokens = await asyncio.gather(*waiters)
    assert sorted(fetch.calls, key=repr) == sorted(keys, key=repr)
    assert len(set(tokens)) == 3


async def test_a_failed_fetch_reaches_every_waiter_and_the_next_get_retries(
        cache: TenantTokenCache, fetch: FakeTokenRequest, counters: Counters) -> None:
    fetch.error = RuntimeError("TokenRequest refused")
    results = await burst(cache, fetch, key(), 10)
    assert len(fetch.calls) == 1
    assert all(r is fetch.error for r in results)
    assert len(cache) == 0
    fetch.error = None
    assert await cache.get(key()) == "tenant-a/uid-1/2"
    assert counters.fetches == ["error", "success"]


async def test_a_failed_renewal_does_not_serve_the_old_token(
        cache: TenantTokenCache, fetch: FakeTokenRequest, clock: FakeClock) -> None:
    await cache.get(key())
    clock.advance(55 * 60)
    fetch.error = RuntimeError("TokenRequest refused")
    with pytest.raises(RuntimeError):
        await cache.get(key())


async def test_a_waiter_that_gives_up_does_not_cancel_the_fill(
        cache: TenantTokenCache, fetch: FakeTokenRequest) -> None:
    fetch.gate.clear()
    impatient = asyncio.create_task(cache.get(key()))
    patient = asyncio.create_task(cache.get(key()))
    await asyncio.sleep(0)
    impatient.cancel()
    fetch.gate.set()
    assert await patient == "tenant-a/uid-1/1"
    assert impatient.cancelled() and len(fetch.calls) == 1
    assert await cache.get(key()) == "tenant-a/uid-1/1"


async def test_a_fill_survives_every_waiter_giving_up(cache: TenantTokenCache, fetch: FakeTokenRequest) -> None:
    fetch.gate.clear()
    waiter = asyncio.create_task(cache.get(key()))
    await asyncio.sleep(0)
    waiter.cancel()
    await asyncio.sleep(0)
    fetch.gate.set()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert await cache.get(key()) == "tenant-a/uid-1/1" and len(fetch.calls) == 1


async def test_evict_namespace_drops_only_that_namespace(
        cache: TenantTokenCache, fetch: FakeTokenRequest) -> None:
    a1 = await cache.get(key("tenant-a"))
    await cache.get(key("tenant-a", uid="uid-2"))
    b = await cache.get(key("tenant-b"))
    cache.evict_namespace("tenant-a")
    assert len(cache) == 1
    assert await cache.get(key("tenant-b")) == b and len(fetch.calls) == 3
    assert await cache.get(key("tenant-a")) != a1 and len(fetch.calls) == 4


async def test_a_token_fetched_across_an_eviction_is_not_kept(
        cache: TenantTokenCache, fetch: FakeTokenRequest) -> None:
    fetch.gate.clear()
    waiter = asyncio.create_task(cache.get(key()))
    await asyncio.sleep(0)
    cache.evict_namespace("tenant-a")  # suspended while the TokenRequest was in flight
    fetch.gate.set()
    assert await waiter == "tenant-a/uid-1/1"
    assert len(cache) == 0
    assert await cache.get(key()) == "tenant-a/uid-1/2"


async def test_invalidate(cache: TenantTokenCache, fetch: FakeTokenRequest) -> None:
    first = await cache.get(key())
    cache.invalidate(key())
    second = await cache.get(key())
    assert second != first and len(fetch.calls) == 2
    cache.invalidate(key(), token=first)  # a late 401 for the old token keeps the new one
    assert await cache.get(key()) == second and len(fetch.calls) == 2
    cache.invalidate(key(), token=second)
    assert await cache.get(key()) != second and len(fetch.calls) == 3
    cache.invalidate(key("tenant-zzz"))  # unknown keys are fine


async def test_clear(cache: TenantTokenCache, fetch: FakeTokenRequest) -> None:
    await cache.get(key("tenant-a"))
    await cache.get(key("tenant-b"))
    cache.clear()
    assert len(cache) == 0
    await cache.get(key("tenant-a"))
    assert len(fetch.calls) == 3


async def test_size_is_bounded(clock: FakeClock, fetch: FakeTokenRequest) -> None:
    cache = TenantTokenCache(fetch, maxsize=3, clock=clock, wall_clock=clock.wall)
    for n in range(10):
        await cache.get(key(f"tenant-{n}"))
    assert len(cache) == 3


async def test_aclose_cancels_fills_in_flight(cache: TenantTokenCache, fetch: FakeTokenRequest) -> None:
    fetch.gate.clear()
    waiter = asyncio.create_task(cache.get(key()))
    await asyncio.sleep(0)
    await cache.aclose()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert len(cache) == 0


async def test_tokens_never_appear_in_reprs(cache: TenantTokenCache) -> None:
    token = await cache.get(key())
    assert token not in repr(cache)
    assert token not in repr(cache._entries)


async def test_evicting_a_namespace_is_right_after_tokens_were_pushed_out_and_its_index_stays_bounded(
        clock: FakeClock, fetch: FakeTokenRequest) -> None:
    """Issue 41 item 5: a workspace's change finds its namespace's tokens in
    an index, not by walking every tenant's. Keys the bounded map pushed out
    linger in the index only until it has taken in twice the map's size
    (and a floor of 64: proxy.http.expiring.GroupIndex)."""
    cache = TenantTokenCache(fetch, maxsize=4, clock=clock, wall_clock=clock.wall)
    tokens = {}
    for number in range(300):  # 300 tenants through a map of 4: most pushed out
        tokens[number] = await cache.get(key(f"tenant-{number}"))
        assert cache._by_namespace._indexed <= 2 * 4 + 64 + 1  # the index's bound is what this test is about
    assert len(cache) == 4
    cache.evict_namespace("tenant-299")  # cached
    cache.evict_namespace("tenant-3")  # pushed out long ago
    assert len(cache) == 3
    calls = len(fetch.calls)
    assert await cache.get(key("tenant-298")) == tokens[298] and len(fetch.calls) == calls
    assert await cache.get(key("tenant-299")) != tokens[299] and len(fetch.calls) == calls + 1
