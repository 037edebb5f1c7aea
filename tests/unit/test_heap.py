"""The heap trimmer (proxy.server.heap), against this process's own glibc heap."""

from __future__ import annotations

import asyncio
import gc
import resource

from proxy.server.heap import HeapTrimmer, burst_ended, glibc_malloc_trim

PAGE = resource.getpagesize()


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE


def test_freed_pages_below_the_top_of_the_heap_go_back_to_the_kernel() -> None:
    trim = glibc_malloc_trim()
    assert trim is not None, "the CI machines and the image run glibc"
    # 2,000-byte objects come from glibc's heap (too big for pymalloc, too
    # small for mmap). The last one stays alive and pins the top of the heap,
    # so glibc's own trim on free cannot give anything back: what a burst of
    # connections leaves behind.
    burst = [bytes(2000) + bytes([i % 256]) for i in range(40_000)]
    pin = bytes(2000) + b"pin"
    del burst
    gc.collect()
    before = resident_bytes()
    assert HeapTrimmer(trim).trim()
    released = before - resident_bytes()
    assert released > 40 * 1024 * 1024, f"only {released} bytes went back"
    assert pin


def test_nothing_to_trim_without_glibc() -> None:
    assert HeapTrimmer(None).trim() is False


async def test_the_trimmer_runs_on_its_interval_until_stopped() -> None:
    trim = glibc_malloc_trim()
    assert trim is not None
    calls: list[int] = []

    def counted(pad: int) -> int:
        calls.append(pad)
        return trim(pad)

    trimmer = HeapTrimmer(counted, interval=0.01)
    await trimmer.start()
    await asyncio.sleep(0.1)
    await trimmer.stop()
    count = len(calls)
    assert count >= 2 and set(calls) == {0}
    await asyncio.sleep(0.05)
    assert len(calls) == count


def test_a_burst_has_ended_when_three_in_four_of_at_least_the_least_streams_are_gone() -> None:
    assert burst_ended(10_000, 0) and burst_ended(10_000, 2_500) and burst_ended(256, 0)
    assert not burst_ended(10_000, 2_501), "too many left: the collection's pause grows with them"
    assert not burst_ended(255, 0), "too few ended to be worth a full collection"
    assert not burst_ended(0, 0)
    assert burst_ended(8, 2, least=4) and not burst_ended(8, 3, least=4)


def test_the_trimmer_collects_once_per_burst_remembering_the_peak_between_ticks() -> None:
    figures = iter([(1_000, 1_000), (1_000, 600), (600, 200), (200, 200), (200, 0)])
    trimmer = HeapTrimmer(None, streams=lambda: next(figures))
    assert [trimmer.collect_after_burst() for _ in range(5)] == [False, False, True, False, False]
    assert trimmer.collections == 1


def test_no_collection_without_a_count_of_streams() -> None:
    assert not HeapTrimmer(None).collect_after_burst()
