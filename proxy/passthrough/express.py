"""The express lane: an ordinary proxied GET, answered beneath aiohttp's server.

Why: aiohttp's server costs more per request than the whole of Go's reverse
proxy on the same machine (a Request, a StreamWriter, a task, the router,
the middleware and the response objects for every GET; bench/README.md,
"The express lane"). The commonest request of all, kubectl's or a client
library's GET with a bearer token, needs none of it once the gate's
decision is cached.

Which requests take it: a complete request head `GET /k8s/... HTTP/1.1`
whose header section is plain (each line a token name, a colon and a value
of visible characters, spaces and tabs; no more than aiohttp's parser
reads, none of its singletons twice, a Host), with exactly one
`Authorization: Bearer`, no body, and none of the headers that ask for
more than a forward (Connection, Expect, Origin); for which the gate says
yes from cached state alone (`Gate.express_ticket`: the same checks, in the
same order) and the tenant's token is cached. The express lane never
refuses a request: it lends it to aiohttp and the gate's full path (`Lend`:
its head and its Content-Length body, exactly as they came), and takes the
connection back once aiohttp has answered and keeps the connection open.
A head it cannot read as aiohttp would, a chunked body, an upgrade or a
CONNECT leave the connection to aiohttp for good (`admit` returns None).

What a request gets here is what the full path gives it: the same header
hygiene (proxy.passthrough.headers; header lines otherwise go up byte for
byte), the same upstream and tenant-token rules (a 401 drops the token and
the GET is sent once more with a fresh one), failures mapped in the same
place (proxy.passthrough.upstream.send_failed) and rendered in the same
shape (proxy.errors), the same response headers (proxy.answer_headers), the
same metrics, and the same drain (counted in flight; a request cut at the
end of the drain before its answer began answers 503 `shutting_down`).
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import re
import time
from typing import TYPE_CHECKING, Awaitable, Protocol

from provisioning.errors import GatewayError, StoppedMidRequest
from proxy import logs
from proxy.answer_headers import SET_BY_STAMP, new_request_id, stamp_lines
from proxy.draining import Drain
from proxy.errors import KUBERNETES_PREFIX, error_body, note_failure
from proxy.metrics import Metrics
from proxy.passthrough.headers import downstream_response_lines, forwards_request_header
from proxy.passthrough.http1 import Answer, UpstreamProtocolError, standard_phrase

if TYPE_CHECKING:
    from proxy.passthrough.gate import Gate
    from proxy.passthrough.ticket import Ticket

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
ROUTE_LABEL = KUBERNETES_PREFIX + "{workspace_id}/{tail}"
"""The metrics label of the gate's route, as aiohttp names it."""


class _Incomplete:
    """The request's head has not all arrived yet."""


INCOMPLETE = _Incomplete()


class Connection(Protocol):
    """What the express lane needs of the client's connection (proxy.front)."""

    transport: asyncio.Transport | None

    @property
    def writing_paused(self) -> bool: ...

    async def _drain_helper(self) -> None: ...


class Lend:
    """A request the full path answers (not a GET to /k8s/, a cold cache, no
    bearer token, a refusal to render, a body), after which the connection
    comes back to the lane. Its framing is known: a head of `size` bytes and
    `body` bytes after it (Content-Length)."""

    __slots__ = ("size", "body")

    def __init__(self, size: int, body: int) -> None:
        self.size, self.body = size, body


class Admitted:
    """A request the lane will answer: its ticket, the header lines to send
    on (less Authorization), the tenant token, and how many bytes it took."""

    __slots__ = ("ticket", "fields", "token", "size", "began")

    def __init__(self, ticket: Ticket, fields: bytes, token: str, size: int) -> None:
        self.ticket, self.fields, self.token, self.size = ticket, fields, token, size
        self.began = False
        """Some of the answer has been written: from then on, only a cut can end it early."""


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


class ExpressLane:
    """Built once per app (proxy.app); serves the connections of
    proxy.front's connection handler while they stay on the lane."""

    def __init__(self, gate: Gate, drain: Drain, metrics: Metrics) -> None:
        self._gate = gate
        self._drain = drain
        self._metrics = metrics
        self._loop: asyncio.AbstractEventLoop | None = None
        """The app's loop, once serving: asyncio's lookup of the running
        loop makes a system call (getpid) each time."""

    def admit(self, buffer: bytes | bytearray) -> Admitted | Lend | _Incomplete | None:
        """What to do with the request at the start of `buffer`: answer it
        here (Admitted); lend it to the full path (Lend); wait for the rest
        of its head (INCOMPLETE); or None: hand the connection to the full
        path for good, from this request on (a head that is not plain
        HTTP/1.1, a chunked body, an upgrade: framing the lane does not follow)."""
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
        if (not express or body or not token or authorizations != 1 or self._drain.started_at is not None
                or not self._gate.is_open):
            return Lend(size, body)
        ticket = self._gate.express_ticket(target, token)
        tenant_token = self._gate.relay.cached_token(ticket) if ticket is not None else None
        if ticket is None or tenant_token is None:
            return Lend(size, 0)
        return Admitted(ticket, b"".join(lines), tenant_token, size)

    def start(self, connection: Connection, admitted: Admitted) -> asyncio.Task[None]:
        """Answer an admitted GET in a task of its own, in flight for the drain from now."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        task = loop.create_task(self._answer(connection, admitted, loop))
        self._drain.tasks.add(task)
        return task

    async def _answer(self, connection: Connection, admitted: Admitted, loop: asyncio.AbstractEventLoop) -> None:
        """Relay one admitted GET and write its answer to `connection`."""
        task = asyncio.current_task(loop)
        assert task is not None
        drain = self._drain
        started = time.perf_counter()
        request_id = new_request_id()
        logs.request_id.set(request_id)  # this task's own context
        try:
            try:
                answer = await self._send(admitted)
            except GatewayError as error:
                self._write_error(connection, error, request_id, started)
                return
            try:
                await self._relay(connection, admitted, answer, request_id, started)
            finally:
                answer.close()
        except asyncio.CancelledError:
            transport = connection.transport
            if admitted.began:  # only a cut can end it now (a clean end would pass a part as whole)
                if transport is not None:
                    transport.close()
                raise
            # Cut at the end of the drain before the answer began: the 503 it
            # owes (as proxy.draining.Drain.cancelled answers on the full path).
            if transport is None or not drain.overdue(task):
                raise
            task.uncancel()
            self._write_error(connection, StoppedMidRequest(), request_id, started)
        finally:
            drain.tasks.discard(task)
            if drain.watched:
                drain.settle(task)

    async def _send(self, admitted: Admitted) -> Answer:
        """The GET as the tenant (Relay.exchange: a refused token replaced,
        failures mapped, the read counted)."""
        relay = self._gate.relay
        target, fields, pool, timeout = admitted.ticket.decision.target, admitted.fields, relay.pool, relay.timeout

        def send(token: str) -> Awaitable[Answer]:
            return pool.get(target, b"".join((fields, b"Authorization: Bearer ", token.encode("ascii"), b"\r\n")),
                            timeout=timeout)

        return await relay.exchange(admitted.ticket, admitted.token, send, replayable=True)

    async def _relay(self, connection: Connection, admitted: Admitted, answer: Answer, request_id: str,
                     started: float) -> None:
        """Write the answer's head with its first piece of body (one write,
        one TLS record, as ShortResponse does), then the rest as it comes."""
        status = answer.status
        lines, present = downstream_response_lines(answer.raw_headers, SET_BY_STAMP)
        lines.extend(stamp_lines(present, request_id))
        chunked = False
        if status in _EMPTY_BODY_STATUSES:  # as aiohttp writes them: no length, no body
            if b"content-length" in present:
                lines = [line for line in lines if not line.lower().startswith(b"content-length:")]
        else:
            if b"content-length" not in present:
                chunked = True
                lines.append(b"Transfer-Encoding: chunked")
            if b"content-type" not in present and not _empty(answer.raw_headers):
                lines.append(b"Content-Type: application/octet-stream")
        head: bytes | None = _response_head(status, answer.reason.encode("ascii"), lines, present)
        transport = connection.transport
        try:
            while chunk := await answer.read_chunk():
                if chunked:
                    chunk = b"%x\r\n%s\r\n" % (len(chunk), chunk)
                if transport is None or transport.is_closing():
                    return
                if head is not None:
                    chunk, head = head + chunk, None
                    self._begin(admitted, status, started)
                transport.write(chunk)
                if connection.writing_paused:
                    await connection._drain_helper()
        except (OSError, TimeoutError, UpstreamProtocolError):
            # Broken off mid-answer: so is ours (a clean end would pass a
            # truncated answer as whole); before it began, the client is
            # left no answer rather than a wrong one, as on the full path.
            if transport is not None:
                transport.close()
            return
        if transport is not None and not transport.is_closing():
            if head is not None:
                self._begin(admitted, status, started)
            transport.write((head or b"") + (b"0\r\n\r\n" if chunked else b""))

    def _begin(self, admitted: Admitted, status: int, started: float) -> None:
        """The answer's head goes out now: counted once, as the full path counts at its `prepare`."""
        admitted.began = True
        self._metrics.observe_request(ROUTE_LABEL, status, time.perf_counter() - started)
        self._metrics.express_answer()

    def _write_error(self, connection: Connection, error: GatewayError, request_id: str, started: float) -> None:
        """The contract's error as the full path renders it on /k8s/ (proxy.errors)."""
        note_failure(error)
        transport = connection.transport
        body = json.dumps(error_body(error.status, error.code, error.message, kubernetes=True,
                                     retry_after=error.retry_after)).encode()
        lines = [b"Content-Type: application/json; charset=utf-8", b"Content-Length: %d" % len(body)]
        if error.retry_after is not None:
            lines.append(b"Retry-After: %d" % error.retry_after)
        if error.closes_connection:
            lines.append(b"Connection: close")
        lines.extend(stamp_lines(set(), request_id))
        self._metrics.observe_request(ROUTE_LABEL, error.status, time.perf_counter() - started)
        if transport is not None and not transport.is_closing():
            transport.write(_response_head(error.status, standard_phrase(error.status).encode(), lines, set()) + body)
            if error.closes_connection:
                transport.close()


_EMPTY_BODY_STATUSES = frozenset({204, 304, *range(100, 200)})


def _empty(fields: list[tuple[bytes, bytes]]) -> bool:
    """The answer says its body is empty (a Content-Length of 0, as aiohttp reads it)."""
    return any(name.lower() == b"content-length" and value.strip().isdigit() and int(value) == 0
               for name, value in fields)


def _response_head(status: int, reason: bytes, lines: list[bytes], present: set[bytes]) -> bytes:
    """The status line and header section, with the Date aiohttp writes on
    every answer unless `present` (the lower-case names in `lines`) has one."""
    if b"date" not in present:
        lines.append(b"Date: " + email.utils.formatdate(usegmt=True).encode())
    return b"HTTP/1.1 %d %s\r\n%s\r\n\r\n" % (status, reason, b"\r\n".join(lines))

