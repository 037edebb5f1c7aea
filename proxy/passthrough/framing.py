"""Where one watch event ends, so a shutdown ends a watch between two events.

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

    def feed(self, chunk: bytes) -> None:
        if not chunk:
            return
        if self._kind == "json":
            self._last = chunk[-1:]
        elif self._kind == "protobuf":
            self._feed_frames(memoryview(chunk))

    def _feed_frames(self, data: memoryview) -> None:
        while data:
            if self._remaining:
                taken = min(self._remaining, len(data))
                self._remaining -= taken
                data = data[taken:]
                continue
            wanted = _LENGTH_BYTES - len(self._header)
            self._header += bytes(data[:wanted])
            data = data[wanted:]
            if len(self._header) == _LENGTH_BYTES:
                self._remaining = int.from_bytes(self._header, "big")
                self._header = b""
