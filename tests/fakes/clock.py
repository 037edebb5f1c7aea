"""A FAKE monotonic clock for create_app's `clock` seam."""

from __future__ import annotations


class Clock:
    """A FAKE clock: it stands still until the test moves `now`, so a test
    can step past a cache's expiry instead of waiting for it."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
