"""A crowd of open watches, held by a process of its own so that its CPU and
memory never count as the gateway's (bench/workloads/watch_scale.py starts
several). Each watch is one TLS connection read by a bare asyncio protocol
on uvloop: no client library between the socket and the clock, so an
arrival is stamped when its bytes reach the process.

Talks over stdin/stdout, one JSON object per line:
  in:  {"url", "headers", "ca_file"}          the watch every member opens
  in:  {"open": N}   open watches until N are open; out: {"open": N, "refused": {status: count}}
  in:  {"report": true}  out: {"arrivals": {name: [perf_counter, ...]}, "open": n, "ended": n,
                               "cpu_s": this process's CPU seconds so far}
  in:  {"close": true}   close every watch, then exit

Arrival times are time.perf_counter() (CLOCK_MONOTONIC on Linux: the same
clock in every process), so the parent subtracts its own creation times.
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
import sys
import time
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

from bench.crowd_parsing import ChunkedEvents

_OPENING_AT_ONCE = 25
"""Watches being opened at one time by one process: several processes open
at once, and the gateway's listen backlog (128) must not overflow (a dropped
SYN waits a second)."""
_TRIES = 20
_NAME = re.compile(rb'"metadata":\{"name":"([^"]+)"')


class Watch(asyncio.Protocol):
    """One watch: its answer's head checked, then every event's name stamped on arrival."""

    def __init__(self, arrivals: dict[str, list[float]], opened: asyncio.Future[int]) -> None:
        self._arrivals = arrivals
        self._opened = opened
        self._head = bytearray()
        self._events: ChunkedEvents | None = None
        self.transport: asyncio.Transport | None = None
        self.ended = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's TLS transport is not a subclass

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        if self._events is None:
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                return
            status = int(self._head.split(b" ", 2)[1])
            rest = bytes(self._head[end + 4:])
            self._head = bytearray()
            if not self._opened.done():
                self._opened.set_result(status)
            if status != 200:
                assert self.transport is not None
                self.transport.close()
                return
            self._events = ChunkedEvents()
            data = rest
        for event in self._events.feed(data):
            match = _NAME.search(event)
            if match:
                self._arrivals.setdefault(match.group(1).decode(), []).append(now)

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended = True
        if not self._opened.done():
            self._opened.set_result(0)


class Crowd:
    def __init__(self, url: str, headers: dict[str, str], ca_file: str | None) -> None:
        parts = urlsplit(url)
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or 443
        self._context = ssl.create_default_context(cafile=ca_file) if ca_file else None
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        lines = [f"GET {target} HTTP/1.1", f"Host: {parts.netloc}", "Accept: application/json",
                 *(f"{k}: {v}" for k, v in headers.items())]
        self._request = ("\r\n".join(lines) + "\r\n\r\n").encode()
        self.arrivals: dict[str, list[float]] = {}
        self.watches: list[Watch] = []
        self.refused: Counter[int] = Counter()

    async def _open_one(self) -> None:
        loop = asyncio.get_running_loop()
        for attempt in range(_TRIES):
            opened: asyncio.Future[int] = loop.create_future()
            try:
                transport, watch = await loop.create_connection(
                    lambda: Watch(self.arrivals, opened), self._host, self._port, ssl=self._context,
                    server_hostname=self._host if self._context else None)
            except OSError:
                self.refused[-1] += 1
                await asyncio.sleep(0.5)
                continue
            transport.write(self._request)
            status = await opened
            if status == 200:
                self.watches.append(watch)
                return
            self.refused[status] += 1
            transport.close()
            await asyncio.sleep(0.5 * (attempt + 1))  # a 429 from the API server's fairness: later
        raise RuntimeError(f"a watch was refused {_TRIES} times: {dict(self.refused)}")

    async def open(self, count: int) -> None:
        gate = asyncio.Semaphore(_OPENING_AT_ONCE)

        async def one() -> None:
            async with gate:
                await self._open_one()

        await asyncio.gather(*(one() for _ in range(count - len(self.watches))))

    def report(self) -> dict[str, Any]:
        return {"arrivals": self.arrivals, "open": sum(not w.ended for w in self.watches),
                "ended": sum(w.ended for w in self.watches), "cpu_s": time.process_time()}

    def close(self) -> None:
        for watch in self.watches:
            if watch.transport is not None:
                watch.transport.abort()


async def serve() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    job = json.loads(await reader.readline())
    crowd = Crowd(job["url"], job.get("headers") or {}, job.get("ca_file"))

    def say(message: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    while line := await reader.readline():
        command = json.loads(line)
        if "open" in command:
            await crowd.open(int(command["open"]))
            say({"open": len(crowd.watches), "refused": {str(k): v for k, v in crowd.refused.items()}})
        elif command.get("report"):
            say(crowd.report())
        elif command.get("close"):
            break
    crowd.close()
    await asyncio.sleep(0.5)


def main() -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - a dependency on Linux
        pass
    asyncio.run(serve())


if __name__ == "__main__":
    main()
