"""What every answer of the gateway carries, whichever way it was made
(aiohttp's response hook in proxy.server.front, the express lane, the answers to
what aiohttp cannot parse): its request id and the security headers."""

from __future__ import annotations

import itertools
import secrets

from aiohttp import hdrs
from multidict import CIMultiDict, istr

# istr names: multidict need not fold their case on every response.
SECURITY_HEADERS = (
    (hdrs.X_CONTENT_TYPE_OPTIONS, "nosniff"),
    (hdrs.X_FRAME_OPTIONS, "DENY"),
    (istr("Referrer-Policy"), "no-referrer"),
)
REQUEST_ID = istr("X-Request-Id")
API_CSP = "default-src 'none'; frame-ancestors 'none'"
"""Every answer is data, never a page: even a pod log opened by navigation
runs nothing. The console's own pages bring theirs (proxy.routes.console)."""
# Request ids only need to be unique, not secret: a per-process random prefix
# and a counter cost a fraction of a uuid4 (which reads the OS RNG).
_ID_PREFIX = secrets.token_hex(4) + "-"
_REQUEST_NUMBERS = itertools.count(1)


def new_request_id() -> str:
    return f"{_ID_PREFIX}{next(_REQUEST_NUMBERS):x}"


_DEFAULT_LINES = tuple((name.lower().encode(), f"{name}: {value}".encode())
                      for name, value in (*SECURITY_HEADERS, (hdrs.CONTENT_SECURITY_POLICY, API_CSP)))
SET_BY_STAMP = frozenset({b"x-request-id", b"server"})
"""The names `stamp` sets whatever the answer had: left out of lines given to `stamp_lines`."""


def stamp_lines(present: set[bytes], request_id: str) -> list[bytes]:
    """`stamp` for an answer whose header lines are bytes: the lines to
    add, given the lower-case names it has (without SET_BY_STAMP's)."""
    lines = [b"X-Request-Id: " + request_id.encode(), b"Server: tenant-gateway"]
    lines.extend(line for name, line in _DEFAULT_LINES if name not in present)
    return lines


def stamp(headers: CIMultiDict[str], request_id: str | None) -> None:
    """Add what every answer carries; a security header or policy the
    answer already has (a console page's own) stays."""
    if request_id is not None:
        headers[REQUEST_ID] = request_id
    for name, value in SECURITY_HEADERS:
        headers.setdefault(name, value)
    # aiohttp writes "Python/3.x aiohttp/3.x" here: versions help only an attacker.
    headers[hdrs.SERVER] = "tenant-gateway"
    headers.setdefault(hdrs.CONTENT_SECURITY_POLICY, API_CSP)
