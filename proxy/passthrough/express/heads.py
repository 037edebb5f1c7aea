"""The request heads the express lane reads itself, and what it makes of
them. Pure: bytes in, a head (or the verdict to wait, or to leave the
connection to aiohttp) out.

A head is read only when it is plain HTTP/1.1 that aiohttp's strict parser
would read the same way: each field on one line, token names, values of
visible characters, spaces and tabs. Anything else is aiohttp's to read,
and to refuse.
"""

from __future__ import annotations

import re

from proxy.http.error_answers import KUBERNETES_PREFIX
from proxy.passthrough.headers import forwards_request_header

# The request line and header section, each field on one line (no obs-fold),
# names tokens (RFC 9110), values without control characters but HTAB.
_HEAD = re.compile(rb"([A-Z]{1,16}) ([!-~]+) HTTP/1\.1\r\n((?:[!#$%&'*+.^_`|~0-9A-Za-z-]+:[\t\x20-\x7e\x80-\xff]*\r\n)*)\r\n")
_HEAD_START = re.compile(rb"[A-Z]{0,16}(?: |\Z)")
_BARE_LINE_BREAK = re.compile(rb"(?<!\r)\n|\r(?!\n|\Z)")
_LENGTH = re.compile(rb"[0-9]{1,15}")
# Methods whose requests end where their Content-Length says (CONNECT's body
# is another protocol's, to aiohttp's parser).
_LENDABLE_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# Framing the lane does not follow to the request's end (a chunked body, a
# protocol switch, hixie-76's eight-byte WebSocket key): aiohttp's for good.
_NOT_LENDABLE = frozenset({b"upgrade", b"transfer-encoding", b"sec-websocket-key1"})
# Headers aiohttp's parser refuses to see twice (RFC 9110 singletons), and
# how many fields it reads at most: a head it would refuse is left to it.
_SINGLETONS = frozenset({b"content-length", b"content-location", b"content-range", b"content-type", b"etag",
                         b"host", b"max-forwards", b"server", b"transfer-encoding", b"user-agent"})
_MAX_FIELDS = 128
# Headers that ask for more than a forward: lent to the full path. (A
# Cookie beside a bearer token is not one: the token authenticates, and
# neither goes upstream.)
_NOT_EXPRESS = frozenset({b"connection", b"expect", b"origin", b"proxy-connection"})
MAX_HEAD_BYTES = 16 * 1024
"""A head longer than this goes to aiohttp, whose limits answer it; so no
line of a head the lane reads exceeds aiohttp's (proxy.app.handler_args)."""



class _Incomplete:
    """The request's head has not all arrived yet."""


INCOMPLETE = _Incomplete()


class Lend:
    """A request the full path answers (not a GET to /k8s/, a cold cache, no
    bearer token, a refusal to render, a body), after which the connection
    comes back to the lane. Its framing is known: a head of `size` bytes and
    `body` bytes after it (Content-Length)."""

    __slots__ = ("size", "body")

    def __init__(self, size: int, body: int) -> None:
        self.size, self.body = size, body


Head = tuple[str, str, list[tuple[bytes, bytes]], int]
"""Method, target, header fields (name, value trimmed), the head's length in bytes."""


def read_head(buffer: bytes | bytearray) -> Head | _Incomplete | None:
    """The head of the request at the start of `buffer`; INCOMPLETE if it
    has not all arrived; None if it is not plain HTTP/1.1 (aiohttp's strict
    parser is left to read it, and to refuse it). Pure."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        # Waited for only while it can still become a plain head: aiohttp
        # answers a wrong start (TLS sent to a plain port, a bare line feed)
        # at once, and a client that sent one may wait for that answer.
        if len(buffer) > MAX_HEAD_BYTES or not _HEAD_START.match(buffer) or _BARE_LINE_BREAK.search(buffer):
            return None
        return INCOMPLETE
    if end + 4 > MAX_HEAD_BYTES:
        return None
    match = _HEAD.match(buffer, 0, end + 4)
    if match is None or match.end() != end + 4:
        return None
    fields = []
    for line in match.group(3).split(b"\r\n")[:-1]:
        name, _, value = line.partition(b":")
        fields.append((name, value.strip(b" \t")))
    return match.group(1).decode("ascii"), match.group(2).decode("ascii"), fields, end + 4


Framed = tuple[str, int, int, "str | None", bytes]
"""A plain request head whose framing the lane follows: its target, its size
and its body's length. For a GET the lane could answer itself (to /k8s/, one
bearer token, no body, nothing asking for more than a forward) also the token
and the header lines to send on; otherwise None and no lines. A tuple: the
lane reads one per request, and a class would cost a call."""


def frame(buffer: bytes | bytearray) -> Framed | _Incomplete | None:
    """The request at the start of `buffer` as the lane frames it; INCOMPLETE
    while its head has not all arrived; None when the lane cannot follow its
    framing (a head aiohttp would read otherwise or refuse, a chunked body, an
    upgrade, CONNECT), so the connection is aiohttp's from here on. Pure."""
    head = read_head(buffer)
    if head is None or isinstance(head, _Incomplete):
        return head
    method, target, fields, size = head
    if method not in _LENDABLE_METHODS or len(fields) > _MAX_FIELDS:
        return None
    token = None
    authorizations = body = 0
    singletons: set[bytes] = set()
    express = method == "GET" and target.startswith(KUBERNETES_PREFIX)
    lines: list[bytes] = []
    for name, value in fields:
        lowered = name.lower()
        if lowered in _SINGLETONS:
            if lowered in singletons:
                return None
            singletons.add(lowered)
        if lowered == b"authorization":
            authorizations += 1
            scheme, _, credential = value.partition(b" ")
            if scheme.lower() == b"bearer" and credential.isascii():
                token = credential.strip(b" \t").decode("ascii")
        elif lowered == b"content-length":
            if not _LENGTH.fullmatch(value):
                return None
            body = int(value)
        elif lowered in _NOT_LENDABLE:
            return None
        elif lowered in _NOT_EXPRESS:
            express = False
        elif express and forwards_request_header(lowered):
            lines += (name, b": ", value, b"\r\n")  # joined once below: cheaper than formatting each
    if b"host" not in singletons:
        return None  # HTTP/1.1 without Host: aiohttp's 400
    if not express or body or not token or authorizations != 1:
        return target, size, body, None, b""
    return target, size, body, token, b"".join(lines)
