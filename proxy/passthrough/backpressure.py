"""A stream's client connection, flow-controlled: the relay reads from the
API server only while the client takes what it was sent.

asyncio pauses a protocol's writing once its transport buffers more than
the high-water mark; aiohttp's writer waits on that pause only every 64 KiB
it writes, and a TLS transport's default mark is 512 KiB. A stream's
client connection gets small explicit marks instead (`STREAM_WRITE_HIGH`),
and the relay asks `room` before every read from the API server: it waits
while the client's buffer is over its mark and, past the replica's ceiling
(proxy.passthrough.stream_buffers), until the client has taken everything
(its upstream connection is not read meanwhile, so the API server feels
the back-pressure too). The marks are restored when the stream ends, as the
connection may serve further requests.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Iterator

from aiohttp.base_protocol import BaseProtocol

from proxy.passthrough.stream_buffers import StreamBuffers

STREAM_WRITE_HIGH = 64 * 1024
STREAM_WRITE_LOW = 16 * 1024
STREAM_READ_AHEAD = 32 * 1024
"""About what a stream's upstream connection reads ahead of its relay, and
in one read (http1.Pool.request, `read_ahead`): the piece a stream that holds
nothing may still read past the replica's ceiling. 32 KiB a round trip is
ample for a watch or a log follow."""
STREAM_PIECE = 16 * 1024
"""The most one write to a stream's client carries: the TLS layer encrypts a
write whole into a buffer (OpenSSL's memory BIO) that keeps its largest size
for the connection's life, so a stalled stream that once wrote 100 KiB kept
about 130 KiB for it. One TLS record's worth."""
ONE_PIECE = 4 * STREAM_READ_AHEAD
"""The most a stream that holds nothing may still take past the replica's
ceiling: what its connection read ahead and one read, and over TLS as much
again that the TLS layer read and has not decrypted (its read limit and one
read; http1._Connection.shrink_reads)."""


class ClientFlow:
    def __init__(self, transport: asyncio.WriteTransport, protocol: BaseProtocol, buffers: StreamBuffers) -> None:
        self._transport = transport
        self._protocol = protocol
        self._buffers = buffers
        self._closed = False
        """Ended: a wait that finishes after `close` must not note the stream
        again, or the replica's total would keep its bytes for good."""
        self._previous = transport.get_write_buffer_limits()  # (low, high)
        transport.set_write_buffer_limits(high=STREAM_WRITE_HIGH, low=STREAM_WRITE_LOW)

    def held(self) -> int:
        """Bytes waiting in the client's write buffer."""
        return self._transport.get_write_buffer_size()

    def note(self, upstream_held: int = 0) -> None:
        if not self._closed:
            self._buffers.note(self, self.held() + upstream_held)

    def fills_up(self, incoming: int) -> bool:
        """Whether writing `incoming` more bytes will have the client's
        buffer over its mark (or the replica past its ceiling)."""
        return self.held() + incoming > STREAM_WRITE_HIGH or self._buffers.over

    @property
    def must_wait(self) -> bool:
        """Whether reading more from the API server must wait: the client's
        buffer is over its mark, or the replica is over its ceiling and this
        stream holds bytes."""
        return self._protocol.writing_paused or (self._buffers.over and self.held() > 0)

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """Counted as a stream waiting for its client while inside (a write
        that waits for room: the count is seen only while it waits)."""
        self._buffers.waiting += 1
        try:
            yield
        finally:
            self._buffers.waiting -= 1

    async def room(self, upstream_held: int = 0) -> None:
        """Return once this stream may read more from the API server
        (`upstream_held`: what it read and has not written yet). Raises
        ConnectionError if the client is gone."""
        self.note(upstream_held)
        with self.waiting():
            if self._protocol.writing_paused:
                await self._protocol._drain_helper()  # what aiohttp's writer awaits: resumed at the low mark
            if self._buffers.over and self.held() > 0:
                self._buffers.ceiling_waits += 1
                await self._until_empty()
        self.note(upstream_held)

    async def _until_empty(self) -> None:
        # A high mark of 0 pauses the protocol now and resumes it once the
        # buffer is empty: an event, not a poll.
        transport = self._transport
        transport.set_write_buffer_limits(high=0, low=0)
        try:
            await self._protocol._drain_helper()
        finally:
            if not transport.is_closing():
                transport.set_write_buffer_limits(high=STREAM_WRITE_HIGH, low=STREAM_WRITE_LOW)

    def close(self) -> None:
        """The stream has ended: it holds nothing, and the connection gets its marks back."""
        self._closed = True
        self._buffers.drop(self)
        if not self._transport.is_closing():
            low, high = self._previous
            self._transport.set_write_buffer_limits(high=high, low=low)
