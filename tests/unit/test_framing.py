"""Watch event boundaries: a shutdown must end a watch between two events."""

from __future__ import annotations

import pytest

from proxy.passthrough.framing import EventBoundary, FrameBoundary


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


def taken_until_the_event_ends(content_type: str, before: bytes, *pieces: bytes) -> bytes:
    """What a clean end passes of `pieces` after `before` went out whole."""
    boundary = EventBoundary(content_type)
    boundary.feed(before)
    passed = b""
    for piece in pieces:
        passed += piece[:boundary.feed(piece, stop_at_boundary=True)]
        if boundary.at_boundary:
            break
    return passed


def test_a_clean_end_passes_the_rest_of_the_event_in_flight_and_nothing_after() -> None:
    json = "application/json"
    assert taken_until_the_event_ends(json, b'{"type":"ADDED"}\n', b'{"type":"MODIFIED"}\n') == b""
    assert taken_until_the_event_ends(json, b'{"type":"MOD', b'IFIED"}\n{"type":"DELETED"}\n') == b'IFIED"}\n'
    assert taken_until_the_event_ends(json, b'{"type":"MOD', b"IFI", b'ED"}\n{"t') == b'IFIED"}\n'
    proto = "application/vnd.kubernetes.protobuf;stream=watch"
    first, second = frame(b"k8s\x00first"), frame(b"k8s\x00second")
    for cut in range(0, len(first)):
        assert taken_until_the_event_ends(proto, first[:cut], first[cut:] + second) == (first[cut:] if cut else b"")
    assert taken_until_the_event_ends("text/plain", b"half a log li", b"ne\n") == b""


def test_unknown_framings_end_anywhere() -> None:
    assert fed("text/plain", b"half a log li")
    assert fed("", b"\x00\x01")


def ws_frame(payload: bytes, *, masked: bool = False, opcode: int = 0x2) -> bytes:
    """A WebSocket frame as RFC 6455 5.2 lays it out (the mask key is not
    applied: only the layout matters here)."""
    size = len(payload)
    length = (bytes([size]) if size < 126 else bytes([126]) + size.to_bytes(2, "big") if size < 65536
              else bytes([127]) + size.to_bytes(8, "big"))
    return bytes([0x80 | opcode, (0x80 if masked else 0) | length[0]]) + length[1:] + (b"\0\1\2\3" if masked else b"") + payload


FRAMES = [ws_frame(b""), ws_frame(b"\x01hi"), ws_frame(b"x" * 200, masked=True), ws_frame(b"y" * 70000),
          ws_frame(b"\x03" + b"z" * 125)]


def test_websocket_frames_of_every_length_form_split_at_every_byte() -> None:
    stream = b"".join(FRAMES)
    ends = {0}
    for one in FRAMES:
        ends.add(max(ends) + len(one))
    for cut in [*range(0, 300), *range(70000, 70300), len(stream) - 3, len(stream)]:
        boundary = FrameBoundary()
        assert boundary.feed(stream[:cut]) == cut
        assert boundary.at_boundary == (cut in ends), cut
        assert boundary.feed(stream[cut:]) == len(stream) - cut
        assert boundary.at_boundary


@pytest.mark.parametrize("cut", [1, 2, 5, 9, 240, 70010])
def test_a_stop_at_the_boundary_takes_the_rest_of_the_current_frame_only(cut: int) -> None:
    stream = b"".join(FRAMES)
    boundary = FrameBoundary()
    boundary.feed(stream[:cut])
    ends = [sum(len(one) for one in FRAMES[:index + 1]) for index in range(len(FRAMES))]
    next_end = min(end for end in ends if end >= cut)
    taken = boundary.feed(stream[cut:], stop_at_boundary=True)
    assert cut + taken == next_end and boundary.at_boundary
    assert boundary.feed(stream[next_end:], stop_at_boundary=True) == 0  # already at one: nothing more


def test_a_header_split_across_three_pieces() -> None:
    data = ws_frame(b"q" * 70000, masked=True)
    boundary = FrameBoundary()
    for piece in (data[:1], data[1:3], data[3:12], data[12:]):
        assert boundary.feed(piece) == len(piece)
    assert boundary.at_boundary


def test_a_port_forwards_frames_many_to_a_read_with_the_last_one_cut() -> None:
    """The API server's port-forward frames (4 KiB, one to a record) arrive
    dozens to a read, the last often cut short: every header is followed,
    whichever way it arrives."""
    frames = [ws_frame(bytes([index % 256]) * 4092, masked=index % 3 == 0) for index in range(40)]
    stream = b"".join(frames)
    ends = {sum(len(one) for one in frames[:index + 1]) for index in range(len(frames))}
    for read in (4096, 65536, 100_000, 262_144):
        boundary, fed = FrameBoundary(), 0
        while fed < len(stream):
            piece = stream[fed:fed + read]
            assert boundary.feed(piece) == len(piece)
            fed += len(piece)
            assert boundary.at_boundary == (fed in ends), (read, fed)
