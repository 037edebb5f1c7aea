"""The bounded expiring map behind the proxy's hot caches (proxy.http.expiring)."""

from __future__ import annotations

import pytest

from proxy.http.expiring import ExpiringMap, GroupIndex


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_entry_is_served_until_its_ttl_and_not_at_it() -> None:
    clock = Clock()
    cache: ExpiringMap[str, int] = ExpiringMap(10, clock, ttl=5)
    cache["a"] = 1
    clock.now = 104.999
    assert cache.get("a") == 1
    clock.now = 105.0
    assert cache.get("a") is None and "a" not in cache


def test_an_entry_of_its_own_deadline() -> None:
    clock = Clock()
    cache: ExpiringMap[str, int] = ExpiringMap(10, clock)
    cache.put("a", 1, 101.0)
    cache.put("b", 2, 99.0)  # stored already expired: never served
    assert cache.get("a") == 1 and cache.get("b") is None
    with pytest.raises(AssertionError):
        cache.put("c", 3)  # no ttl, no deadline


def test_the_oldest_goes_first_when_full_and_storing_again_makes_an_entry_newest() -> None:
    clock = Clock()
    cache: ExpiringMap[str, int] = ExpiringMap(2, clock, ttl=60)
    cache["a"], cache["b"] = 1, 2
    cache["a"] = 10
    cache["c"] = 3
    assert len(cache) == 2 and cache.get("b") is None and cache.get("a") == 10 and cache.get("c") == 3


def test_pop_clear_keys_and_items() -> None:
    clock = Clock()
    cache: ExpiringMap[str, int] = ExpiringMap(10, clock, ttl=60)
    cache["a"], cache["b"] = 1, 2
    assert cache.pop("a") == 1 and cache.pop("a") is None and cache.pop("a", 7) == 7
    assert cache.keys() == ["b"] and list(cache.items()) == [("b", 2)]
    for key in cache.keys():
        cache.pop(key)
    assert len(cache) == 0
    cache["c"] = 3
    cache.clear()
    assert cache.get("c") is None
    with pytest.raises(ValueError):
        ExpiringMap(0, clock, ttl=1)


def test_a_group_index_drops_its_group_and_nothing_else() -> None:
    cache: ExpiringMap[str, str] = ExpiringMap(100, Clock(), ttl=5)
    by_owner: GroupIndex[str, str, str] = GroupIndex(cache, lambda _, owner: owner)
    for key, owner in (("s1", "ann"), ("s2", "ann"), ("s3", "bob")):
        cache[key] = owner
        by_owner.add(key, owner)
    assert by_owner.drop_group("ann") == {"s1", "s2"}
    assert cache.keys() == ["s3"]
    assert by_owner.drop_group("ann") == set()


def test_a_group_index_stays_bounded_when_its_map_drops_keys() -> None:
    """Keys pushed out of the map linger in the index only until it has
    taken in twice the map's size: then it is rebuilt from the map."""
    cache: ExpiringMap[int, str] = ExpiringMap(10, Clock(), ttl=5)
    by_owner: GroupIndex[str, int, str] = GroupIndex(cache, lambda _, owner: owner)
    for key in range(10_000):
        owner = f"user-{key}"
        cache[key] = owner
        by_owner.add(key, owner)
    assert len(by_owner._groups) <= 2 * len(cache) + 64 + 1
    # Each still-cached key is found by its group after the rebuilds.
    assert by_owner.drop_group("user-9999") == {9999} and 9999 not in cache


def test_an_entry_gone_from_the_map_is_dropped_without_error() -> None:
    cache: ExpiringMap[str, str] = ExpiringMap(10, Clock(), ttl=5)
    by_owner: GroupIndex[str, str, str] = GroupIndex(cache, lambda _, owner: owner)
    cache["s1"] = "ann"
    by_owner.add("s1", "ann")
    cache.pop("s1")  # revoked on its own
    assert by_owner.drop_group("ann") == {"s1"}
