"""A TLS connection's read buffer costs only the pages its reads touch.

uvloop gives every TLS connection a read buffer of 256 KiB (its
compile-time SSL_READ_MAX_SIZE), allocated when the connection is made. A
stream's connection fills little of it: one read (32 KiB upstream,
proxy.passthrough.backpressure) or a request head (from the client). But
the buffer comes from glibc's heap, where it lands on memory that earlier
data used and freed, whose pages are still resident: in the stalled-readers
row the two buffers of a stream were 119 KiB resident where its reads had
touched 37 (bench/README.md, "Stalled readers"). glibc's heap trimmer
(proxy.server.heap) gives back free pages only, not those of a block in use.

So once a connection is made, `release_read_buffer` hands the buffer's
pages back to the kernel (madvise MADV_DONTNEED: the next touch of a page
finds it zeroed). That is safe between reads: uvloop's TLS layer is a
BufferedProtocol to its socket, and by that contract the buffer it returns
from `get_buffer` is filled by the next read and handed on (copied into
OpenSSL's memory BIO) before that read's callback returns. Nothing is kept
in it from one read to the next. Only whole pages strictly inside the
buffer are given back: glibc's own bookkeeping sits outside it.

Why not have glibc map each buffer apart (its mmap threshold): uvloop also
allocates 256 KiB for a moment on every read (SSLObject.read), which would
then be mapped afresh each time (a port-forward's tunnel, bench/tunnel_cpu.py,
spent 0.30 CPU s per 64 MiB instead of 0.19), and lowered only while a
connection is made, glibc still serves the buffer from a free block of the
heap whenever one is large enough.

Nothing to do on asyncio's own loop (the tests'; its buffer is a bytearray,
zeroed whole and resident either way) or where the C library is not glibc.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import resource
from typing import Any, Callable

MADV_DONTNEED = 4
PAGE = resource.getpagesize()
_UVLOOP_TLS = ("uvloop.loop", "SSLProtocol")


def _glibc_madvise() -> Callable[[int, int, int], int] | None:
    try:
        madvise = ctypes.CDLL("libc.so.6", use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise


_madvise = _glibc_madvise()


def uvloop_tls_layer(transport: object) -> Any | None:
    """uvloop's TLS protocol under `transport` (its app-facing TLS
    transport, which keeps it in a C field, seen by the garbage collector's
    traversal only), or None: another loop, or plain TCP."""
    for referent in gc.get_referents(transport):
        kind = type(referent)
        if (kind.__module__, kind.__name__) == _UVLOOP_TLS:
            return referent
    return None


def interior_pages(address: int, size: int) -> tuple[int, int]:
    """The whole pages strictly inside [address, address + size): their
    start and length (0 if none). Pure."""
    start = -(-address // PAGE) * PAGE
    end = (address + size) // PAGE * PAGE
    return start, max(0, end - start)


def release_read_buffer(transport: asyncio.BaseTransport | None) -> int:
    """Give back the resident pages of `transport`'s TLS read buffer; the
    bytes of it given back (0 if there is none to give: see the module).
    Never from inside one of the connection's reads."""
    if transport is None or _madvise is None or transport.is_closing():
        return 0
    layer = uvloop_tls_layer(transport)
    if layer is None:
        return 0
    with layer.get_buffer(1) as view:  # the whole buffer, as a read would get it
        first = ctypes.c_char.from_buffer(view)
        address = ctypes.addressof(first)
        del first  # an export of the view: gone before the view is released
        start, length = interior_pages(address, len(view))
    if length and _madvise(start, length, MADV_DONTNEED) == 0:
        return length
    return 0
