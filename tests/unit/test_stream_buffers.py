"""The replica's ledger of bytes held by streams (pure bookkeeping)."""

from __future__ import annotations

from proxy.passthrough.stream_buffers import StreamBuffers


def test_the_total_is_what_each_stream_last_noted_and_ends_with_them() -> None:
    buffers = StreamBuffers(ceiling=100)
    first, second = object(), object()
    buffers.note(first, 60)
    buffers.note(second, 30)
    assert (buffers.total, buffers.over) == (90, False)
    buffers.note(first, 70)  # noted again: replaced, not added
    assert (buffers.total, buffers.over) == (100, True)
    buffers.drop(first)
    assert (buffers.total, buffers.over, len(buffers)) == (30, False, 1)
    buffers.drop(first)  # twice is harmless
    buffers.note(second, 0)
    assert buffers.total == 0
