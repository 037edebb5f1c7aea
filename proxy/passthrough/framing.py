"""Where a stream can be ended cleanly: between two watch events, or
between two WebSocket frames.

The API server ends a watch after a whole event; a relay that stopped in the
middle of one would hand the client a torn JSON line (or protobuf frame) and
a decoding error instead of a clean end. Upstream reads follow TCP, not event
boundaries, so the relay feeds every piece it forwards through an
`EventBoundary` and, asked to end, stops only where `at_boundary` is true.

Framings (k8s.io/apimachinery/pkg/runtime/serializer/streaming):
- JSON (the default, and `;stream=watch` variants): one event per line, each
  ending in a newline.
- Protobuf (`application/vnd.kubernetes.protobuf;stream=watch`): frames of a
  4-byte big-endian length and that many bytes.
- Anything else (a log follow's plain text, CBOR sequences): no event
  structure the gateway knows, so every point is a boundary.

A WebSocket relayed as bytes (proxy.passthrough.websockets) is ended by a
close frame the gateway writes itself; `FrameBoundary` follows the API
server's frames (RFC 6455 5.2: 2 bytes, an extended length of 2 or 8, a
mask of 4 if set, the payload) so that frame lands between two of them.
"""

from __future__ import annotations

_LENGTH_BYTES = 4


class EventBoundary:
    def __init__(self, content_type: str) -> None:
        media = content_type.split(";", 1)[0].strip().lower()
        self._kind = ("protobuf" if media == "application/vnd.kubernetes.protobuf"
                      else "json" if media.endswith("json") else "opaque")
        self._last = b"\n"
        self._header = b""  # protobuf: the length prefix read so far
        self._remaining = 0  # protobuf: bytes of the current frame still to come

    @property
    def at_boundary(self) -> bool:
        if self._kind == "json":
            return self._last == b"\n"
        if self._kind == "protobuf":
            return not self._header and self._remaining == 0
        return True

    def feed(self, chunk: bytes, *, stop_at_boundary: bool = False) -> int:
        """Follow `chunk`; return how much of it was taken: all of it, or
        with `stop_at_boundary`, only up to the end of the event in flight
        (0 if none is: nothing after it may pass)."""
        if not chunk:
            return 0
        if self._kind == "json":
            if stop_at_boundary:
                if self._last == b"\n":
                    return 0
                end = chunk.find(b"\n")
                if end >= 0:
                    self._last = b"\n"
                    return end + 1
            self._last = chunk[-1:]
            return len(chunk)
        if self._kind == "protobuf":
            return self._feed_frames(memoryview(chunk), stop_at_boundary)
        return 0 if stop_at_boundary else len(chunk)

    def _feed_frames(self, data: memoryview, stop_at_boundary: bool) -> int:
        taken = 0
        while data:
            if self._remaining:
                step = min(self._remaining, len(data))
                self._remaining -= step
                data = data[step:]
                taken += step
                continue
            if stop_at_boundary and not self._header:
                return taken
            wanted = _LENGTH_BYTES - len(self._header)
            self._header += bytes(data[:wanted])
            step = min(wanted, len(data))
            data = data[step:]
            taken += step
            if len(self._header) == _LENGTH_BYTES:
                self._remaining = int.from_bytes(self._header, "big")
                self._header = b""
        return taken


class FrameBoundary:
    """Where the WebSocket frames of one direction end. Headers only: a
    payload is counted, never read."""

    def __init__(self) -> None:
        self._header = b""  # a frame header split across pieces, so far
        self._remaining = 0  # payload bytes of the current frame still to come

    @property
    def at_boundary(self) -> bool:
        return not self._header and self._remaining == 0

    def feed(self, chunk: bytes, *, stop_at_boundary: bool = False) -> int:
        """Follow `chunk`; return how much of it was taken: all of it, or
        with `stop_at_boundary`, only up to the first boundary (0 if there
        is one before its first byte)."""
        position, end = 0, len(chunk)
        while True:
            if self._remaining:
                taken = min(self._remaining, end - position)
                self._remaining -= taken
                position += taken
                if self._remaining:
                    return position
            if (stop_at_boundary and not self._header) or position == end:
                return position
            if not self._header and end - position >= _MAX_FRAME_HEADER:
                # The common case, a whole header in this piece: read in
                # place (a port-forward's frames are 4 KiB, so this runs
                # some 16,000 times per 64 MiB).
                second = chunk[position + 1]
                length = second & 0x7F
                if length == 126:
                    length = (chunk[position + 2] << 8) | chunk[position + 3]
                    position += 4
                elif length == 127:
                    length = int.from_bytes(chunk[position + 2:position + 10], "big")
                    position += 10
                else:
                    position += 2
                if second & 0x80:
                    position += 4
                self._remaining = length
                continue
            header = self._header + chunk[position:position + _MAX_FRAME_HEADER]
            size = _frame_header_size(header)
            if size is None or len(header) < size:
                self._header = header  # all that is left of the chunk
                return end
            position += size - len(self._header)
            self._header = b""
            length = header[1] & 0x7F
            self._remaining = (int.from_bytes(header[2:4], "big") if length == 126
                               else int.from_bytes(header[2:10], "big") if length == 127 else length)


_MAX_FRAME_HEADER = 14


def _frame_header_size(header: bytes) -> int | None:
    """The size of a frame header that starts with `header`, once its
    second byte is known."""
    if len(header) < 2:
        return None
    length = header[1] & 0x7F
    return 2 + (2 if length == 126 else 8 if length == 127 else 0) + (4 if header[1] & 0x80 else 0)
