"""The express lane's answers: an admitted GET relayed as the tenant and
written to the client's connection, with the full path's headers, errors,
metrics and drain."""

from __future__ import annotations

import asyncio
import email.utils
import time
from typing import TYPE_CHECKING, Awaitable, Protocol

from provisioning.errors import GatewayError, StoppedMidRequest
from proxy.http import logs
from proxy.http.answer_headers import SET_BY_STAMP, new_request_id, stamp_lines
from proxy.http.draining import Drain
from proxy.http.error_answers import answer_to, note_failure
from proxy.http.metrics import Metrics
from proxy.passthrough.express.heads import Lend, _Incomplete, frame
from proxy.passthrough.headers import downstream_response_lines
from proxy.passthrough.http1 import BROKEN_OFF, Answer, standard_phrase

if TYPE_CHECKING:
    from proxy.passthrough.gate import Gate
    from proxy.passthrough.ticket import Ticket

class Admitted:
    """A request the lane will answer: its ticket, the header lines to send
    on (less Authorization), the tenant token, and how many bytes it took."""

    __slots__ = ("ticket", "fields", "token", "size", "began")

    def __init__(self, ticket: Ticket, fields: bytes, token: str, size: int) -> None:
        self.ticket, self.fields, self.token, self.size = ticket, fields, token, size
        self.began = False
        """Some of the answer has been written: from then on, only a cut can end it early."""


class Connection(Protocol):
    """What the express lane needs of the client's connection (proxy.server.front)."""

    transport: asyncio.Transport | None

    @property
    def writing_paused(self) -> bool: ...

    async def _drain_helper(self) -> None: ...


class ExpressLane:
    """Built once per app (proxy.app); serves the connections of
    proxy.server.front's connection handler while they stay on the lane."""

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
        path for good, from this request on (framing the lane does not
        follow: proxy.passthrough.express.heads.frame)."""
        framed = frame(buffer)
        if framed is None or isinstance(framed, _Incomplete):
            return framed
        target, size, body, token, fields = framed
        if token is None or self._drain.started_at is not None or not self._gate.is_open:
            return Lend(size, body)
        ticket = self._gate.express_ticket(target, token)
        tenant_token = self._gate.relay.cached_token(ticket) if ticket is not None else None
        if ticket is None or tenant_token is None:
            return Lend(size, 0)
        return Admitted(ticket, fields, tenant_token, size)

    def start(self, connection: Connection, admitted: Admitted) -> asyncio.Task[None]:
        """Answer an admitted GET in a task of its own, in flight for the drain from now."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        task = loop.create_task(self._answer(connection, admitted, loop))
        self._drain.enter(task)
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
            if transport is None or not drain.owes_refusal(task, began=admitted.began):
                if admitted.began and transport is not None:
                    transport.close()  # only a cut can end it now (a clean end would pass a part as whole)
                raise
            self._write_error(connection, StoppedMidRequest(), request_id, started)
        finally:
            drain.leave(task)

    async def _send(self, admitted: Admitted) -> Answer:
        """The GET as the tenant (Relay.exchange: a refused token replaced,
        failures mapped, the read counted)."""
        relay = self._gate.relay
        upstream = relay.upstream(admitted.ticket)
        target, fields, pool, timeout = admitted.ticket.decision.target, admitted.fields, upstream.pool, upstream.timeout

        def send(token: str, _audit_id: str | None) -> Awaitable[Answer]:  # a read: the API server names its event
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
        except BROKEN_OFF:
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
        self._metrics.observe_request(self._gate.route_label, status, time.perf_counter() - started)
        self._metrics.express_answer()

    def _write_error(self, connection: Connection, error: GatewayError, request_id: str, started: float) -> None:
        """The contract's error as the full path renders it on /k8s/ (proxy.http.error_answers)."""
        note_failure(error)
        answer = answer_to(error, kubernetes=True)
        self._metrics.observe_request(self._gate.route_label, answer.status, time.perf_counter() - started)
        transport = connection.transport
        if transport is not None and not transport.is_closing():
            lines = [b"%s: %s" % (name.encode(), value.encode()) for name, value in answer.headers]
            lines.append(b"Content-Length: %d" % len(answer.body))
            lines.extend(stamp_lines(set(), request_id))
            transport.write(_response_head(answer.status, standard_phrase(answer.status).encode(), lines, set())
                            + answer.body)
            if answer.closes_connection:
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

