"""Give freed heap pages back to the kernel after a burst of connections.

Each TLS connection costs a 256 KiB read buffer (uvloop's SSL protocol) and
OpenSSL's record buffers, most of it on glibc's main heap. glibc returns
freed memory to the kernel only from the top of that heap. When a burst of
watches ends, the pages stay resident. The next burst then lands partly on
pages the last one never touched. So resident memory ratchets up, burst
after burst, towards the heap's high-water mark.

Measured on the bench stack with 1,000 watches opened and closed three
times, against a heap of 575 MiB: without trimming, resident memory after
each burst was 164, 219 and then 262 MiB, and it would in time pass the
deployment's 512 MiB limit. With it, resident memory was 160, 152 and 155 MiB
while the watches were open and about 90 MiB after each burst (idle: 72).
`malloc_trim(0)` releases every free page, not only the top. It costs
about 3 ms after a burst of 1,000 connections, and 0.2 ms when there is
nothing to give back.

Trimming gives back free pages only. The part of a TLS read buffer that a
connection never read into, in use and yet resident where freed data lay
before it, is given back by proxy.http.tls_buffers.

A trim cannot give back what Python's own allocator keeps. pymalloc
returns a 1 MiB arena only once every object in it is gone, and CPython's
free lists (up to 2,000 tuples of each size, lists, dicts, contexts, ...)
hold the last objects a burst freed, scattered over its arenas. Measured
with bench/watch_close_probe.py (the relay alone, 5,000 watches opened and
closed, RSS 62 MiB before): 155 MiB after the close and a trim, 94 after a
full collection (which empties the free lists) and a trim. So once the
streams of a burst have mostly ended (`burst_ended`), the trimmer runs a
full collection first. It is not run while streams stay open: a full
collection's pause grows with the objects alive, and after a burst's end
few are left.

What stays then is pymalloc's arenas that a few objects pin (31-55 MiB
over the start in the same probe). bench/watch_pins.py found which: the
free lists of C extensions, which keep the last objects of a type freed
(uvloop's handles and write contexts, aiohttp's parsed requests,
asyncio's future iterators; 250 each) and which no collection empties. With PYTHONMALLOC=malloc
small objects come from glibc's heap instead, whose free pages a trim
gives back however they are scattered (7 MiB over the start), but every
request's allocations then cost more: 7.4 % more instructions per proxied
GET (bench/README.md, "10,000 watches"). Not done.

There is nothing to do where the C library is not glibc (musl, macOS).
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
import time
from typing import Callable

from provisioning.background import cancel_and_wait

log = logging.getLogger(__name__)

TRIM_INTERVAL_SECONDS = 30.0
BURST_STREAMS = 256
"""Fewer streams than this ending is no burst: Python's own collections see to it."""


def burst_ended(peak: int, now: int, *, least: int = BURST_STREAMS) -> bool:
    """Whether enough streams ended since `peak` (the most open since the
    last collection) for a full collection to give memory back: at least
    `least` of them, and three in four, so that what is left to traverse is
    small. Pure."""
    return peak - now >= least and now * 4 <= peak


def glibc_malloc_trim() -> Callable[[int], int] | None:
    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


class HeapTrimmer:
    def __init__(self, trim: Callable[[int], int] | None, *, interval: float = TRIM_INTERVAL_SECONDS,
                 streams: Callable[[], tuple[int, int]] | None = None, least: int = BURST_STREAMS) -> None:
        """`streams`: the most streams open since it was last asked, and
        how many are open now (StreamRegistry.take_high_water)."""
        self._trim = trim
        self._interval = interval
        self._streams = streams
        self._least = least
        self._peak = 0
        self._task: asyncio.Task[None] | None = None
        self.collections = 0
        """Full collections run after a burst of streams ended."""

    async def start(self) -> None:
        if self._trim is not None:
            self._task = asyncio.create_task(self._run(), name="tenant-gateway-heap-trim")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)

    def trim(self) -> bool:
        """True if pages went back to the kernel. Inline: while it runs, glibc
        holds the heap's lock, so a thread would only move the wait."""
        if self._trim is None:
            return False
        started = time.perf_counter()
        released = bool(self._trim(0))
        if released:
            log.debug("heap pages returned to the kernel", extra={"seconds": round(time.perf_counter() - started, 4)})
        return released

    def collect_after_burst(self) -> bool:
        """A full collection if a burst of streams has ended since the
        last one (True if it ran)."""
        if self._streams is None:
            return False
        high_water, now = self._streams()
        self._peak = max(self._peak, high_water)
        if not burst_ended(self._peak, now, least=self._least):
            return False
        started = time.perf_counter()
        gc.collect()  # the oldest generation: the free lists are emptied too
        self._peak = now
        self.collections += 1
        log.debug("full collection after a burst of streams ended",
                  extra={"seconds": round(time.perf_counter() - started, 4)})
        return True

    def tick(self) -> None:
        self.collect_after_burst()
        self.trim()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            self.tick()
