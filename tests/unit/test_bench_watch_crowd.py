"""The watch crowd's body reading (bench/crowd_parsing.py): chunked coding
off, events handed out whole however the bytes were split."""

from bench.crowd_parsing import ChunkedEvents


def _chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


EVENTS = [b'{"type":"ADDED","object":{"metadata":{"name":"a"}}}', b'{"type":"ADDED","object":{"metadata":{"name":"b"}}}']


def test_one_event_a_chunk() -> None:
    reader = ChunkedEvents()
    assert reader.feed(_chunked(*(e + b"\n" for e in EVENTS))) == EVENTS
    assert reader.finished


def test_split_at_every_byte() -> None:
    """A read may end anywhere: inside a size line, a chunk, or its CRLF."""
    wire = _chunked(EVENTS[0][:10], EVENTS[0][10:] + b"\n" + EVENTS[1][:3], EVENTS[1][3:] + b"\n")
    reader = ChunkedEvents()
    seen = [event for i in range(len(wire)) for event in reader.feed(wire[i:i + 1])]
    assert seen == EVENTS
    assert reader.finished


def test_an_event_without_its_newline_waits() -> None:
    reader = ChunkedEvents()
    assert reader.feed(b"5\r\nabcde\r\n") == []
    assert reader.feed(b"1\r\n\n\r\n") == [b"abcde"]
    assert not reader.finished


def test_chunk_extensions_are_ignored() -> None:
    assert ChunkedEvents().feed(b"2;x=y\r\nab\r\n1\r\n\n\r\n") == [b"ab"]
