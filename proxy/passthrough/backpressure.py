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

from aiohttp.base_protocol import BaseProtocol

from proxy.passthrough.stream_buffers import StreamBuffers

STREAM_WRITE_HIGH = 64 * 1024
STREAM_WRITE_LOW = 16 * 1024
STREAM_READ_AHEAD = 64 * 1024
"""What a stream's upstream connection may read before its relay takes it."""


class ClientFlow:
    def __init__(self, transport: asyncio.WriteTransport, protocol: BaseProtocol, buffers: StreamBuffers) -> None:
        self._transport = transport
        self._protocol = protocol
        self._buffers = buffers
        self._previous = transport.get_write_buffer_limits()  # (low, high)
        transport.set_write_buffer_limits(high=STREAM_WRITE_HIGH, low=STREAM_WRITE_LOW)

    def held(self) -> int:
        """Bytes waiting in the client's write buffer."""
        return self._transport.get_write_buffer_size()

    def note(self, upstream_held: int = 0) -> None:
        self._buffers.note(self, self.held() + upstream_held)

    @property
    def must_wait(self) -> bool:
        """Whether reading more from the API server must wait: the client's
        buffer is over its mark, or the replica is over its ceiling and this
        stream holds bytes."""
        return self._protocol.writing_paused or (self._buffers.over and self.held() > 0)

    async def room(self, upstream_held: int = 0) -> None:
        """Return once this stream may read more from the API server
        (`upstream_held`: what it read and has not written yet). Raises
        ConnectionError if the client is gone."""
        self.note(upstream_held)
        if self._protocol.writing_paused:
            await self._protocol._drain_helper()  # what aiohttp's writer awaits: resumed at the low mark
        if self._buffers.over and self.held() > 0:
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
        self._buffers.drop(self)
        if not self._transport.is_closing():
            low, high = self._previous
            self._transport.set_write_buffer_limits(high=high, low=low)
