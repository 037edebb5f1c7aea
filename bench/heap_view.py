"""Where a process's memory is, seen from inside it: loaded into the
gateway by bench/heap_hook (`python -m bench.stalled_inside`), which asks
for a view by writing a label to `<directory>/request` and reads
`<directory>/view-<label>.json`.

A view holds glibc's `mallinfo2` (bytes in use and free, in the heap and
mapped apart), the resident KiB per kind of mapping (/proc/self/smaps: the
heap, anonymous mappings, where pymalloc's arenas are, files), the live
objects by type, and, for every uvloop TLS connection, how much of its
256 KiB read buffer is resident (/proc/self/pagemap), by leg: upstream
(proxy.passthrough.http1's connections) or client (the server's). Taken on
a thread of its own, while the loop runs: a view reads, it changes nothing
but the thread's own allocations.
"""

from __future__ import annotations

import collections
import ctypes
import gc
import json
import os
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

from proxy.http.tls_buffers import PAGE, uvloop_tls_layer


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def mallinfo2() -> dict[str, int]:
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    info = libc.mallinfo2()
    return {"heap_in_use": int(info.uordblks), "heap_free": int(info.fordblks), "mapped_apart": int(info.hblkhd)}


def resident_by_mapping() -> dict[str, int]:
    """Resident KiB by kind of mapping: [heap], [anon] (pymalloc's arenas,
    blocks glibc mapped apart, thread arenas), file, and the rest by name."""
    kib: collections.Counter[str] = collections.Counter()
    kind = ""
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if not fields[0].endswith(":"):  # a mapping's first line: range, perms, offset, dev, inode[, name]
                name = fields[5] if len(fields) >= 6 else "[anon]"
                kind = "file" if name.startswith("/") else name
            elif fields[0] == "Rss:":
                kib[kind] += int(fields[1])
    return dict(kib)


def resident_bytes(address: int, size: int) -> int:
    """Bytes of [address, address + size) resident in this process (/proc/self/pagemap)."""
    first, last = address // PAGE, (address + size - 1) // PAGE
    with open("/proc/self/pagemap", "rb") as pagemap:
        pagemap.seek(first * 8)
        entries = pagemap.read((last - first + 1) * 8)
    return PAGE * sum(int.from_bytes(entries[i:i + 8], "little") >> 63 for i in range(0, len(entries), 8))


def tls_read_buffers() -> dict[str, dict[str, int]]:
    """Per leg, the uvloop TLS connections and their read buffers' resident KiB."""
    legs: dict[str, dict[str, int]] = collections.defaultdict(lambda: {"connections": 0, "resident_kib": 0})
    for transport in [o for o in gc.get_objects() if type(o).__name__ == "_SSLProtocolTransport"]:
        layer = uvloop_tls_layer(transport)
        if layer is None:
            continue
        protocol = type(transport.get_protocol()).__name__
        leg = "upstream" if protocol in ("_Connection", "_UpgradeAnswer") else \
            "client" if "RequestHandler" in protocol else "other"
        with layer.get_buffer(1) as view:
            first = ctypes.c_char.from_buffer(view)
            address = ctypes.addressof(first)
            del first
            resident = resident_bytes(address, len(view))
        legs[leg]["connections"] += 1
        legs[leg]["resident_kib"] += resident // 1024
    return dict(legs)


_marked: list[tracemalloc.Snapshot] = []
"""The snapshot a view labelled `mark` took, where BENCH_TRACE_FRAMES is
set: tracing starts then (tracing the gateway's start-up would make it 25
times slower), and later views say what was allocated since and is still
alive."""


def survivors_since(mark: tracemalloc.Snapshot, now: tracemalloc.Snapshot, top: int = 40) -> list[dict[str, Any]]:
    """Allocations alive now that were not at the mark, by traceback, the
    largest first (the view thread's own left out)."""
    grown = [d for d in now.compare_to(mark, "traceback") if d.size_diff > 0 or d.count_diff > 0]
    grown = [d for d in grown if not any(f.filename.endswith(("heap_view.py", "tracemalloc.py")) for f in d.traceback)]
    return [{"kib": round(d.size_diff / 1024, 1), "blocks": d.count_diff,
             "where": [f"{f.filename.rsplit('site-packages/', 1)[-1]}:{f.lineno}" for f in d.traceback]}
            for d in grown[:top]]


def traced(label: str) -> dict[str, Any]:
    if label == "mark" and os.environ.get("BENCH_TRACE_FRAMES"):
        tracemalloc.start(int(os.environ["BENCH_TRACE_FRAMES"]))
    if not tracemalloc.is_tracing():
        return {}
    snapshot = tracemalloc.take_snapshot()
    if label == "mark":
        _marked[:] = [snapshot]
        return {"traced_kib": round(tracemalloc.get_traced_memory()[0] / 1024)}
    survivors = survivors_since(_marked[0], snapshot) if _marked else []
    return {"traced_kib": round(tracemalloc.get_traced_memory()[0] / 1024), "survivors_since_mark": survivors}


def view(label: str = "") -> dict[str, Any]:
    objects = gc.get_objects()
    types = collections.Counter(type(o).__name__ for o in objects)
    del objects
    return {"time": time.time(), **mallinfo2(), "resident_kib_by_mapping": resident_by_mapping(),
            "tls_read_buffers": tls_read_buffers(), "objects": sum(types.values()),
            "objects_by_type": dict(types.most_common(60)), **traced(label)}


def _answer(directory: Path) -> None:
    request = directory / "request"
    while True:
        time.sleep(0.2)
        try:
            label = request.read_text().strip()
        except FileNotFoundError:
            continue
        request.unlink()
        try:
            result: dict[str, Any] = view(label)
        except Exception as error:  # the view is a measurement: say why it failed, keep serving
            result = {"error": repr(error)}
        (directory / f"view-{label}.json").write_text(json.dumps(result))


def start(directory: str) -> None:
    path = Path(directory)
    (path / "pid").write_text(str(os.getpid()))
    threading.Thread(target=_answer, args=(path,), daemon=True, name="bench-heap-view").start()
