"""Where the memory of closed watches stays: the gateway's stream relay
alone, without a cluster (`python -m bench.watch_close_probe`; no lock
needed). Issue 41's watch row saw RSS at 69 MiB before 9,953 watches and
314 MiB after they had all closed (results/watches-10k.json), with glibc's
`[heap]` back at its baseline and anonymous mappings holding the rest.

Three processes: a FAKE API server (it cannot be the real one here: no
cluster; it answers every watch with one small event over TLS and keeps
the stream open until its client goes), the relay (aiohttp over TLS on
uvloop, the real http1.Pool, relaying._relay_stream and the gateway's heap
trimmer, as stalled_probe.py), and watch crowds (bench/watch_crowd.py, as
the row's) that open N watches, then close them all. At each step the
relay reports its RSS by kind of mapping, glibc's mallinfo2, pymalloc's
arenas (sys._debugmallocstats) and the garbage collector's counts; after
the close, once a trim has passed, and then again after a full collection
that the probe asks for (`/collect`), so what a collection gives back is
told apart from what the allocators keep.

Not a row: the relay is not the whole gateway (no gate, no audit, no
slots). Results are printed, not recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import types
import urllib.request
from pathlib import Path
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from bench.workloads.watch_scale import CrowdProcess, _shares, resident_by_kind
from devstack import pki
from proxy.passthrough.backpressure import STREAM_READ_AHEAD
from proxy.passthrough.http1 import Pool
from proxy.passthrough.relaying import _relay_stream
from proxy.passthrough.stream_buffers import StreamBuffers
from proxy.server.connection import GatewayRunner
from proxy.server.heap import HeapTrimmer, glibc_malloc_trim

_EVENT = b'{"type":"ADDED","object":{"kind":"ConfigMap","metadata":{"name":"probe"}}}\n'
_CROWDS = 2
_SETTLE_SECONDS = 3.0


_MALLINFO2 = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2]


def mallinfo2() -> dict[str, float]:
    """glibc's figures over all its arenas, in MiB (counts as they are)."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    info = libc.mallinfo2()
    counts = ("ordblks", "smblks", "hblks")
    return {name: (int(getattr(info, name)) if name in counts else int(getattr(info, name)) / 2**20)
            for name in _MALLINFO2}


def pymalloc_arenas() -> dict[str, int]:
    """pymalloc's arena counts, from sys._debugmallocstats (it writes to fd 2)."""
    with tempfile.TemporaryFile() as capture:
        saved = os.dup(2)
        os.dup2(capture.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        capture.seek(0)
        text = capture.read().decode(errors="replace")
    figures = {}
    for label, key in (("arenas allocated current", "arenas_current"), ("arenas highwater mark", "arenas_highwater"),
                       ("bytes in allocated blocks", "bytes_in_blocks"), ("bytes in available blocks", "bytes_free")):
        match = re.search(rf"# {label}\s+=\s+([\d,]+)", text)
        if match:
            figures[key] = int(match.group(1).replace(",", ""))
    return figures


def _anonymous_ranges() -> set[tuple[int, int]]:
    """The process's anonymous mappings (pymalloc's arenas among them)."""
    ranges = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) == 5:
                start, end = (int(x, 16) for x in fields[0].split("-"))
                ranges.add((start, end))
    return ranges


def _pinning(ranges: set[tuple[int, int]]) -> dict[str, Any]:
    """The objects that lie in `ranges` (mappings made since the relay
    started): what keeps a pymalloc arena from going back. Objects the
    collector tracks, and what they refer to directly."""
    import bisect

    ordered = sorted(ranges)
    starts = [start for start, _ in ordered]

    def inside(address: int) -> bool:
        i = bisect.bisect_right(starts, address) - 1
        return i >= 0 and address < ordered[i][1]

    seen: set[int] = set()
    kinds: dict[str, int] = {}
    examples: dict[str, list[str]] = {}
    for holder in gc.get_objects():
        for thing in (holder, *gc.get_referents(holder)):
            address = id(thing)
            if address in seen or not inside(address):
                continue
            seen.add(address)
            kind = type(thing).__name__
            kinds[kind] = kinds.get(kind, 0) + 1
            if len(examples.setdefault(kind, [])) < 5:
                examples[kind].append(repr(thing)[:120])
    top = sorted(kinds.items(), key=lambda item: -item[1])[:25]
    return {"mappings": len(ranges), "objects": len(seen), "by_type": dict(top),
            "examples": {kind: examples[kind] for kind, _ in top[:12]}}


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


async def _api_server(port: int, folder: Path) -> None:
    """Each SIGUSR1 sends one more event to every open watch (a fan-out)."""
    open_writers: set[asyncio.StreamWriter] = set()
    chunk = b"%x\r\n" % len(_EVENT) + _EVENT + b"\r\n"

    def fan_out() -> None:
        for writer in open_writers:
            writer.write(chunk)

    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, fan_out)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
            writer.write(chunk)
            await writer.drain()
            open_writers.add(writer)
            await reader.read()  # until the relay closes the stream
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            open_writers.discard(writer)
            writer.close()

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(folder / "server.crt", folder / "server.key")
    server = await asyncio.start_server(serve, "127.0.0.1", port, ssl=context, backlog=1024)
    async with server:
        await server.serve_forever()


async def _relay(port: int, upstream_port: int, folder: Path, trim_seconds: float) -> None:
    pool = Pool(f"https://127.0.0.1:{upstream_port}", ssl.create_default_context(cafile=str(folder / "ca.crt")))
    relay: Any = types.SimpleNamespace(streams=types.SimpleNamespace(buffers=StreamBuffers()))
    ended: Any = types.SimpleNamespace(take_end=lambda: None)
    trimmer = HeapTrimmer(glibc_malloc_trim(), interval=trim_seconds)
    await trimmer.start()

    async def watch(request: web.Request) -> web.StreamResponse:
        answer = await pool.request("GET", "/watch", CIMultiDict(), timeout=None, read_ahead=STREAM_READ_AHEAD)
        try:
            return await _relay_stream(request, answer, ended, relay)
        finally:
            answer.close()  # as relaying._relay_http

    async def report(request: web.Request) -> web.Response:
        with open("/proc/self/smaps") as smaps:
            kinds = resident_by_kind(smaps.read())
        return web.json_response({**kinds, "mallinfo2": mallinfo2(), "pymalloc": pymalloc_arenas(),
                                  "gc_count": gc.get_count(), "objects": len(gc.get_objects()),
                                  "tasks": len(asyncio.all_tasks()), "threads": threads(),
                                  "cpu_s": time.process_time()})

    async def collect(request: web.Request) -> web.Response:
        started = time.perf_counter()
        unreachable = gc.collect()
        collected = time.perf_counter()
        trimmer.trim()
        return web.json_response({"unreachable": unreachable, "collect_ms": (collected - started) * 1000,
                                  "trim_ms": (time.perf_counter() - collected) * 1000})

    async def trim(request: web.Request) -> web.Response:
        """How long a trim holds the loop (the trimmer runs one every interval, streams open or not)."""
        started = time.perf_counter()
        trimmer.trim()
        return web.json_response({"trim_ms": (time.perf_counter() - started) * 1000})

    marked = _anonymous_ranges()

    async def pins(request: web.Request) -> web.Response:
        return web.json_response(_pinning(_anonymous_ranges() - marked))

    app = web.Application()
    app.router.add_get("/pins", pins)
    app.router.add_get("/watch", watch)
    app.router.add_get("/report", report)
    app.router.add_post("/collect", collect)
    app.router.add_post("/trim", trim)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(folder / "server.crt", folder / "server.key")
    # As proxy.server.serving runs the app: the gateway's connections, a
    # client's going cancels its stream's handler.
    runner = GatewayRunner(app, handler_cancellation=True, access_log=None, auto_decompress=False)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=context, backlog=1024).start()
    await asyncio.sleep(10**6)


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def _ask(port: int, context: ssl.SSLContext, path: str, method: str = "GET") -> dict[str, Any]:
    request = urllib.request.Request(f"https://127.0.0.1:{port}{path}", method=method)
    with urllib.request.urlopen(request, context=context) as answer:
        return dict(json.load(answer))


async def _sample(label: str, relay_pid: int, port: int, context: ssl.SSLContext) -> dict[str, Any]:
    rss = _rss_mib(relay_pid)  # before the report: it allocates too
    report = await asyncio.to_thread(_ask, port, context, "/report")
    sample = {"step": label, "rss_mib": rss, **report}
    print(json.dumps(sample), file=sys.stderr, flush=True)
    return sample


async def _fan_out(api_pid: int, relay_pid: int, port: int, context: ssl.SSLContext, watches: int,
                   events: int) -> dict[str, Any]:
    """The relay's CPU seconds per event relayed, over `events` fan-outs to every watch."""
    before = (await asyncio.to_thread(_ask, port, context, "/report"))["cpu_s"]
    for _ in range(events):
        os.kill(api_pid, signal.SIGUSR1)
        await asyncio.sleep(1.0)
    await asyncio.sleep(_SETTLE_SECONDS)
    spent = (await asyncio.to_thread(_ask, port, context, "/report"))["cpu_s"] - before
    figures = {"fan_out_events": events, "watches": watches, "cpu_s": spent,
               "cpu_us_per_event_relayed": spent / (events * watches) * 1e6}
    print(json.dumps(figures), file=sys.stderr, flush=True)
    return figures


async def _drive(api_pid: int, relay_pid: int, port: int, folder: Path, steps: list[int], rounds: int,
                 trim_seconds: float, pins: bool, fan_out: int) -> list[dict[str, Any]]:
    context = ssl.create_default_context(cafile=str(folder / "ca.crt"))
    url = f"https://127.0.0.1:{port}/watch"
    async with asyncio.timeout(60):  # the relay's start
        while True:
            try:
                samples = [await _sample("start", relay_pid, port, context)]
                break
            except OSError:
                await asyncio.sleep(0.5)
    for round_ in range(rounds):
        crowds = [await CrowdProcess.start(url, {}, str(folder / "ca.crt")) for _ in range(_CROWDS)]
        try:
            for step in steps:
                answers = await asyncio.gather(*(c.ask({"open": n}) for c, n in zip(crowds, _shares(step, _CROWDS))))
                assert sum(a["open"] for a in answers) == step, answers
                await asyncio.sleep(_SETTLE_SECONDS)
                samples.append(await _sample(f"round {round_}: {step} open", relay_pid, port, context))
            trimmed = await asyncio.to_thread(_ask, port, context, "/trim", "POST")
            print(json.dumps({"open": steps[-1], **trimmed}), file=sys.stderr, flush=True)
            if fan_out:
                samples.append(await _fan_out(api_pid, relay_pid, port, context, steps[-1], fan_out))
        finally:
            await asyncio.gather(*(c.close() for c in crowds))
        await asyncio.sleep(trim_seconds + _SETTLE_SECONDS)
        samples.append(await _sample(f"round {round_}: closed, trimmed", relay_pid, port, context))
    collected = await asyncio.to_thread(_ask, port, context, "/collect", "POST")
    samples.append({**await _sample("collected, trimmed", relay_pid, port, context), **collected})
    if pins:
        print(json.dumps(await asyncio.to_thread(_ask, port, context, "/pins"), indent=1), file=sys.stderr)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--role", choices=("api", "relay"), help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--ports", type=int, nargs=2, default=(18643, 18644), help="the API server's, the relay's")
    parser.add_argument("--steps", type=int, nargs="+", default=[2000], help="watches open at each step")
    parser.add_argument("--rounds", type=int, default=1, help="bursts: open the steps, close all, trim")
    parser.add_argument("--trim-seconds", type=float, default=10.0, help="the heap trimmer's interval")
    parser.add_argument("--pins", action="store_true", help="at the end, what lies in arenas made since the start")
    parser.add_argument("--relay-env", nargs="*", default=[], help="NAME=VALUE for the relay (PYTHONMALLOC=malloc)")
    parser.add_argument("--fan-out", type=int, default=0,
                        help="with every watch open, this many events to each, a second apart: the relay's CPU per event")
    options = parser.parse_args()
    api_port, relay_port = options.ports
    if options.role is not None:
        import uvloop

        serve = (_api_server(api_port, options.folder) if options.role == "api"
                 else _relay(relay_port, api_port, options.folder, options.trim_seconds))
        uvloop.run(serve)
        return
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        ca, ca_key = pki.make_ca("watch-close-probe-ca")
        ca.write(folder, "ca")
        pki.issue(ca, ca_key, common_name="probe", server_hosts=("127.0.0.1",)).write(folder, "server")
        command = [sys.executable, "-m", "bench.watch_close_probe", "--folder", str(folder),
                   "--ports", *map(str, options.ports), "--trim-seconds", str(options.trim_seconds)]
        relay_env = {**os.environ, **dict(pair.split("=", 1) for pair in options.relay_env)}
        processes = [subprocess.Popen([*command, "--role", "api"]), subprocess.Popen([*command, "--role", "relay"], env=relay_env)]
        try:
            time.sleep(2)
            samples = asyncio.run(_drive(processes[0].pid, processes[1].pid, relay_port, folder, options.steps,
                                         options.rounds, options.trim_seconds, options.pins, options.fan_out))
        finally:
            for process in processes:
                process.terminate()
                process.wait()
    print(json.dumps(samples, indent=1))


if __name__ == "__main__":
    main()
