"""The relay's reliance on aiohttp internals, checked so an upgrade that
drops them fails here instead of silently costing a write per answer."""

from __future__ import annotations

from aiohttp import web

from proxy.passthrough.relaying import ShortResponse


def test_short_answers_hold_their_headers_for_the_first_piece_of_body() -> None:
    assert web.StreamResponse._send_headers_immediately is True  # the knob aiohttp's own Response turns
    assert ShortResponse._send_headers_immediately is False
