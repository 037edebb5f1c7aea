"""The WebSocket relay's own handshake checks (proxy.passthrough.websockets). Pure."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict

from provisioning.errors import UpstreamError
from proxy.passthrough.websockets import accept_key, chosen_subprotocol, close_frame, is_websocket_key

KEY = "dGhlIHNhbXBsZSBub25jZQ=="  # RFC 6455 1.3's example


def test_the_accept_key_is_rfc_6455s() -> None:
    assert accept_key(KEY) == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


@pytest.mark.parametrize("key, valid", [
    (KEY, True),
    (None, False), ("", False),
    ("dGhlIHNhbXBsZQ==", False),  # 11 bytes, not 16
    ("dGhlIHNhbXBsZSBub25jZQ", False),  # padding missing
    ("dGhlIHNhbXBsZSBub25jZQ=!", False),
    ("\u00e9", False), ("d\u00e9hlIHNhbXBsZSBub25jZQ==", False),  # non-ASCII: aiohttp's own check raised
])
def test_a_websocket_key_is_16_bytes_of_base64(key: str | None, valid: bool) -> None:
    assert is_websocket_key(key) is valid


def answer(**headers: str) -> CIMultiDict[str]:
    base = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Accept": accept_key(KEY)}
    base.update({name.replace("_", "-"): value for name, value in headers.items()})
    return CIMultiDict({name: value for name, value in base.items() if value})


def test_the_api_servers_choice_among_the_offered_subprotocols_is_taken() -> None:
    offered = ["v5.channel.k8s.io", "v4.channel.k8s.io"]
    assert chosen_subprotocol(answer(**{"Sec-WebSocket-Protocol": "v4.channel.k8s.io"}), KEY, offered) == \
        "v4.channel.k8s.io"
    assert chosen_subprotocol(answer(), KEY, offered) is None


@pytest.mark.parametrize("bad", [
    {"Sec-WebSocket-Accept": accept_key("c29tZSBvdGhlciBrZXk=")},  # for another handshake
    {"Sec-WebSocket-Accept": ""},
    {"Upgrade": "h2c"},
    {"Sec-WebSocket-Extensions": "permessage-deflate"},  # never offered
    {"Sec-WebSocket-Protocol": "base64url.bearer.authorization.k8s.io.dG9rZW4"},  # never offered
])
def test_a_101_that_is_not_this_handshake_is_refused(bad: dict[str, str]) -> None:
    with pytest.raises(UpstreamError):
        chosen_subprotocol(answer(**bad), KEY, ["v5.channel.k8s.io"])


def test_a_close_frame_is_unmasked_and_fits_a_control_frame() -> None:
    frame = close_frame(1001, b"going away")
    assert frame == b"\x88\x0c\x03\xe9going away"
    assert len(close_frame(1001, b"x" * 500)) == 2 + 125
