"""The small value types settings hold, and the bounds every reader keeps."""

from __future__ import annotations

from dataclasses import dataclass

MAX_TOKEN_TTL_SECONDS = 7200
# The API server refuses TokenRequests shorter than this (422).
MIN_TOKEN_TTL_SECONDS = 600
YEAR_SECONDS = 365 * 86400
"""The longest window or lifetime the gateway takes: a longer one is a
typo, and past what date arithmetic and the database's intervals hold."""
MAX_COUNT = 1_000_000_000
"""The largest count any setting takes (a rate limit's, streams,
connections): within the `integer` the database counts hits in
(2**31 - 1), and beyond any real need."""


@dataclass(frozen=True)
class RateLimit:
    """`limit` events per `window_seconds`, per key."""

    limit: int
    window_seconds: int


@dataclass(frozen=True)
class HostPort:
    """Where a listener binds. One value, so one variable sets one field."""

    host: str
    port: int
    """0: any free port."""

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"
