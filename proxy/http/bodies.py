"""Reading a whole body of bounded size from aiohttp's StreamReader.

`StreamReader.read(n)` hands back at most n bytes of what is buffered now,
not n bytes: a body that arrives in pieces (TCP segments, TLS records,
chunks) would be cut short after the first. Both the gateway's JSON routes
and its identity-provider client read bodies whole, through this.
"""

from __future__ import annotations

from aiohttp import StreamReader


async def read_at_most(stream: StreamReader, limit: int) -> bytes:
    """The whole body if it has at most `limit` bytes; otherwise its first
    `limit + 1` (reading stops there), which callers refuse."""
    raw = bytearray()
    while len(raw) <= limit and (chunk := await stream.read(limit + 1 - len(raw))):
        raw += chunk
    return bytes(raw)
