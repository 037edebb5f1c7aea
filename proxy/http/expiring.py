"""A bounded map whose entries expire: the caches a proxied request reads.

Every proxied request reads four of them (its verified session token, its
session's user, its workspace, its tenant token). cachetools' TTL caches
cost eight Python calls and a timer context per read, and a hash of the key
at each of three lookups; a read here is one call, one dict lookup and one
look at the clock.

An entry is served while its deadline is later than the clock: a fixed
`ttl` after it was stored, or a deadline of its own. When the map is full
the oldest stored entry goes first (with a fixed ttl, also the soonest to
expire); expired entries are dropped when read, replaced or pushed out.
The bound is what keeps memory in check; which entry goes first only
decides what must be looked up again.
"""

from __future__ import annotations

from typing import Callable, Generic, Iterator, TypeVar

K = TypeVar("K")
V = TypeVar("V")
G = TypeVar("G")


class ExpiringMap(Generic[K, V]):
    __slots__ = ("_data", "_maxsize", "_ttl", "_clock")

    def __init__(self, maxsize: int, clock: Callable[[], float], ttl: float | None = None) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        self._data: dict[K, tuple[V, float]] = {}
        self._maxsize = maxsize
        self._ttl = ttl
        self._clock = clock

    def get(self, key: K) -> V | None:
        """The live value for `key`, or None."""
        entry = self._data.get(key)
        if entry is None:
            return None
        if entry[1] <= self._clock():
            self._data.pop(key, None)
            return None
        return entry[0]

    def put(self, key: K, value: V, deadline: float | None = None) -> None:
        """Store `value` until `deadline` on the clock (by default, ttl from now)."""
        if deadline is None:
            assert self._ttl is not None, "a map without a ttl needs a deadline for every entry"
            deadline = self._clock() + self._ttl
        data = self._data
        data.pop(key, None)  # stored again: it is the newest now
        while len(data) >= self._maxsize:
            del data[next(iter(data))]
        data[key] = (value, deadline)

    def __setitem__(self, key: K, value: V) -> None:
        self.put(key, value)

    def pop(self, key: K, default: V | None = None) -> V | None:
        entry = self._data.pop(key, None)
        return default if entry is None else entry[0]

    def clear(self) -> None:
        self._data.clear()

    def keys(self) -> list[K]:
        """Every stored key, expired or not (a copy: safe to pop while walking it)."""
        return list(self._data)

    def items(self) -> Iterator[tuple[K, V]]:
        """Every stored entry, expired or not."""
        return ((key, entry[0]) for key, entry in self._data.items())

    def __contains__(self, key: object) -> bool:
        """Stored, expired or not."""
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)


class GroupIndex(Generic[G, K, V]):
    """The keys of an ExpiringMap by group (a workspace's namespace, a
    user), so that dropping a group's entries costs the group's size, not a
    walk over every entry: a burst of changes then costs the same however
    many tenants are cached.

    Keys the map has since dropped (pushed out, expired) may linger in their
    group; the index is rebuilt from the map once it has taken in twice the
    map's size, so a rebuild costs O(1) per key added, amortised.
    """

    __slots__ = ("_entries", "_group_of", "_groups", "_indexed")

    def __init__(self, entries: ExpiringMap[K, V], group_of: Callable[[K, V], G]) -> None:
        self._entries = entries
        self._group_of = group_of
        self._groups: dict[G, set[K]] = {}
        self._indexed = 0

    def add(self, key: K, value: V) -> None:
        """Index `key`, just stored in the map with `value`."""
        keys = self._groups.setdefault(self._group_of(key, value), set())
        if key in keys:
            return
        keys.add(key)
        self._indexed += 1
        if self._indexed > 2 * len(self._entries) + 64:
            groups: dict[G, set[K]] = {}
            for stored, stored_value in self._entries.items():
                groups.setdefault(self._group_of(stored, stored_value), set()).add(stored)
            self._groups = groups
            self._indexed = len(self._entries)

    def drop_group(self, group: G) -> set[K]:
        """Remove every entry of `group` from the map; the keys it had."""
        keys = self._groups.pop(group, set())
        self._indexed -= len(keys)
        for key in keys:
            self._entries.pop(key)
        return keys

    def clear(self) -> None:
        self._groups.clear()
        self._indexed = 0
