"""A watch's answer body, as the crowd's bare protocol reads it: HTTP/1.1
chunked transfer coding taken off, and the API server's events (one JSON
object a line) handed out whole, however the bytes were split across reads.
Pure, so it is unit-tested directly."""

from __future__ import annotations


class ChunkedEvents:
    def __init__(self) -> None:
        self._raw = bytearray()
        """Bytes not yet taken off the chunked coding."""
        self._left = 0
        """Bytes of the current chunk still to come (then its CRLF)."""
        self._body = bytearray()
        """Decoded bytes not yet ending in a newline."""
        self.finished = False

    def feed(self, data: bytes) -> list[bytes]:
        """The whole events that `data` completes, in order."""
        self._raw += data
        while not self.finished:
            if self._left > 0:
                taken = self._raw[:self._left]
                del self._raw[:len(taken)]
                self._body += taken
                self._left -= len(taken)
                if self._left > 0:
                    break
                self._left = -2  # the chunk's own CRLF
            if self._left < 0:
                if len(self._raw) < 2:
                    break
                del self._raw[:2]
                self._left = 0
            end = self._raw.find(b"\r\n")
            if end < 0:
                break
            size = int(bytes(self._raw[:end]).split(b";", 1)[0], 16)
            del self._raw[:end + 2]
            if size == 0:
                self.finished = True
            self._left = size
        *events, rest = self._body.split(b"\n")
        self._body = bytearray(rest)
        return [bytes(e) for e in events if e]
