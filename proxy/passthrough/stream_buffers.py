"""The bytes open streams hold in the gateway's memory, across the replica.

A stream whose client stops reading would otherwise have the gateway read
on from the API server and buffer what the client does not take. Each
stream notes here what it holds (the client's write buffer and what it has
read from the API server and not yet written, `note`). Past the ceiling
(GATEWAY_STREAM_BUFFER_BYTES), a stream that holds anything reads no more
from the API server until its client has taken all of it
(proxy.passthrough.backpressure): its client is slowed by TCP back-pressure,
not buffered for. A stream that holds nothing may still read one piece, so
the readers that keep up are never stopped by the ones that do not; the
total is therefore bounded by the ceiling plus one piece per stream.

Pure bookkeeping: no I/O, one event loop.
"""

from __future__ import annotations

DEFAULT_CEILING = 64 * 1024 * 1024


class StreamBuffers:
    def __init__(self, ceiling: int = DEFAULT_CEILING) -> None:
        self.ceiling = ceiling
        self.total = 0
        """The sum of what the streams last noted."""
        self._held: dict[object, int] = {}
        self.waiting = 0
        """Streams waiting for their clients to take what they hold (slow or stalled readers)."""
        self.ceiling_waits = 0
        """Times a stream stopped reading because the replica was past its
        ceiling (not for its own client's mark): the ceiling at work."""

    @property
    def over(self) -> bool:
        """At or past the ceiling: streams that hold bytes stop reading upstream."""
        return self.total >= self.ceiling

    def note(self, holder: object, size: int) -> None:
        """`holder` holds `size` bytes now (noted when it writes, and after it
        waits: what it last noted only shrinks in between, so the total
        never counts short)."""
        self.total += size - self._held.get(holder, 0)
        self._held[holder] = size

    def drop(self, holder: object) -> None:
        """`holder` has ended: it holds nothing any more."""
        self.total -= self._held.pop(holder, 0)

    def __len__(self) -> int:
        return len(self._held)
