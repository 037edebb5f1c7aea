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


def test_a_stream_that_ended_is_never_noted_again() -> None:
    """A wait for the client that finishes after the stream ended (a
    WebSocket's drain waiter, completed by the connection's loss) must not
    put the stream's bytes back into the replica's total for good."""
    import asyncio

    from proxy.passthrough.backpressure import ClientFlow

    class Transport(asyncio.WriteTransport):  # a FAKE: a client holding 4 KiB it has not read
        def __init__(self) -> None:
            super().__init__()
            self.limits = (16, 64)

        def get_write_buffer_limits(self) -> tuple[int, int]:
            return self.limits

        def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
            self.limits = (low or 0, high or 0)

        def get_write_buffer_size(self) -> int:
            return 4096

        def is_closing(self) -> bool:
            return False

    buffers = StreamBuffers(ceiling=1 << 20)
    flow = ClientFlow(Transport(), asyncio.Protocol(), buffers)
    flow.note(1000)
    assert buffers.total == 5096
    flow.close()
    flow.note(1000)  # what a late wait's end does
    assert (buffers.total, len(buffers)) == (0, 0)
