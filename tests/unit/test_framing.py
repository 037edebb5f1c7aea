"""Watch event boundaries: a shutdown must end a watch between two events."""

from __future__ import annotations

import pytest

from proxy.passthrough.framing import EventBoundary


def fed(content_type: str, *pieces: bytes) -> bool:
    boundary = EventBoundary(content_type)
    for piece in pieces:
        boundary.feed(piece)
    return boundary.at_boundary


@pytest.mark.parametrize("content_type", ["application/json", "application/json;stream=watch", "Application/JSON"])
def test_json_events_end_with_a_newline(content_type: str) -> None:
    assert fed(content_type)
    assert fed(content_type, b'{"type":"ADDED"}\n')
    assert not fed(content_type, b'{"type":"ADDED"}\n{"type":"MOD')
    assert fed(content_type, b'{"type":"ADDED"}\n{"type":"MOD', b'IFIED"}\n', b"")


def frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


@pytest.mark.parametrize("cut", range(0, 16))
def test_protobuf_frames_split_anywhere(cut: int) -> None:
    stream = frame(b"k8s\x00first") + frame(b"")  # an empty frame is a whole one
    kind = "application/vnd.kubernetes.protobuf;stream=watch"
    whole = len(frame(b"k8s\x00first"))
    assert fed(kind, stream[:cut], stream[cut:])
    assert fed(kind, stream[:cut]) == (cut in (0, whole))


def test_protobuf_frames_across_many_pieces() -> None:
    data = frame(b"a" * 300) + frame(b"b" * 5)
    boundary = EventBoundary("application/vnd.kubernetes.protobuf;stream=watch")
    seen = []
    for i in range(len(data)):
        boundary.feed(data[i:i + 1])
        seen.append(boundary.at_boundary)
    assert [i + 1 for i, ok in enumerate(seen) if ok] == [304, 313]


def test_unknown_framings_end_anywhere() -> None:
    assert fed("text/plain", b"half a log li")
    assert fed("", b"\x00\x01")
