"""The relay's HTTP/1.1 client to the API server: kept-alive connections,
llhttp (httptools) to read the answers, and nothing else.

Why not aiohttp's client: replacing it took 28 % off the instructions the
gateway spends on a proxied GET (bench/HISTORY.md), all of it the client's
generality (a ClientRequest, a ClientResponse, timers, traces, cookie,
proxy and default-header handling for every request). The relay needs none of that: one upstream,
requests whose every part the gate has already checked, and answers passed
on as they arrive. A WebSocket upgrade (`Pool.upgrade`) gets a connection
of its own, which never returns to the pool: once the API server has
switched protocols, the connection belongs to proxy.passthrough.websockets;
if it refused, the refusal's body (its reason, a Status) is read first,
when it is small and comes within the deadline.

The rules that keep one tenant's answer from ever reaching another's
request on a shared connection:
- one request per connection at a time, never pipelined;
- a connection goes back to the pool only when its answer was read to the
  end by the parser, its request body was sent in full, neither side asked
  to close, and no byte arrived that belongs to no request;
- any parser error, unexpected byte, timeout, cancellation or early stop
  closes the connection instead.
The request head is built from parts that cannot carry a line break: the
method and target come from the tenant wall, header names and values from
aiohttp's strict parser, and every value is checked again here anyway.
Framing is always ours: Content-Length when the client's body length is
known, chunked otherwise, nothing for a request without a body.

Answers to HEAD carry no body, which httptools cannot be told; the
connection is closed after one instead of guessing where the next answer
starts. 1xx answers are skipped. A reused connection that turns out to
have been closed by the server before any byte of the answer arrived is
retried once on a new connection, for requests without a body only.
"""

from __future__ import annotations

import asyncio
import collections
import http
import re
import socket
import ssl
import time
from typing import AsyncIterable, Awaitable, Callable, Protocol, TypeVar, cast

import httptools
from multidict import CIMultiDict
from yarl import URL

from proxy.http.tls_buffers import release_read_buffer

# An upstream answer may run ahead of a slow client by this much before
# the connection stops being read (and the API server feels backpressure).
_PAUSE_ABOVE = 256 * 1024
_FRAMING = frozenset({"host", "content-length", "transfer-encoding"})
# The API server's header sections are a few hundred bytes; aiohttp's client
# stopped at 8 KiB per line.
MAX_HEAD_BYTES = 64 * 1024
# The API server's refusal of an upgrade is a Status of a few hundred bytes.
MAX_REFUSAL_BYTES = 64 * 1024
_P = TypeVar("_P", bound=asyncio.BaseProtocol)
_PLAIN_REASON = re.compile(rb"[\t\x20-\x7e]*")
"""A reason phrase relayed as sent: visible ASCII, spaces and tabs."""


class UpstreamProtocolError(Exception):
    """The API server's answer could not be read as HTTP/1.1."""


BROKEN_OFF = (OSError, TimeoutError, UpstreamProtocolError)
"""What ends an answer mid-way: the API server's answer broke off (a restart,
the short request's deadline) or the client left. Both request paths then
break their own answer off too (a clean end would pass a part as whole)."""


class UnsafeHead(ValueError):
    """A request line or header would not survive as one line: refused
    before anything is sent (the client's mistake, not the API server's)."""


class UpstreamConnectionLost(ConnectionError):
    """The connection ended before the answer did."""


class RequestBodyStalled(TimeoutError):
    """The exchange's deadline passed while the client's request body was
    still awaited: the client's delay, not the API server's."""


def request_head(method: str, target: str, host: str, headers: CIMultiDict[str],
                 content_length: int | None, has_body: bool) -> bytes:
    """The request line and header section. Pure.

    Text is encoded back exactly as aiohttp's parser decoded the client's
    bytes (UTF-8, undecodable bytes kept as surrogates), so headers cross
    unchanged; a line break anywhere is refused, whatever let it through.
    """
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    for name, value in headers.items():
        if name.lower() in _FRAMING:
            continue  # framing is ours alone
        lines.append(f"{name}: {value}")
    if has_body:
        lines.append(f"Content-Length: {content_length}" if content_length is not None
                     else "Transfer-Encoding: chunked")
    # No line break or NUL in any line, before the separators go in. (`in`
    # is a memchr; counting them in the joined head walked every character,
    # the bearer token's thousand included, twice per request.)
    fields = "".join(lines)
    if "\n" in fields or "\r" in fields or "\0" in fields:
        raise UnsafeHead("a request line or header holds a line break")
    try:
        return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate no byte decoded to
        raise UnsafeHead("a request line or header is not text") from None


def _framed_by_close(fields: list[tuple[bytes, bytes]]) -> bool:
    """An answer with neither a Content-Length nor a final chunked coding
    ends when the server closes the connection. Pure."""
    codings = []
    for name, value in fields:
        lowered = name.lower()
        if lowered == b"content-length":
            return False
        if lowered == b"transfer-encoding":
            codings.append(value)
    return not b",".join(codings).rstrip().lower().endswith(b"chunked")


def reason_phrase(status: int, sent: bytes | bytearray) -> str:
    """The reason phrase to relay: the API server's, or, when it holds a
    control or non-ASCII byte (which no client needs, and aiohttp's writer
    refuses on the full path), the standard one for the status. Pure."""
    return sent.decode("ascii") if _PLAIN_REASON.fullmatch(sent) else standard_phrase(status)


def standard_phrase(status: int) -> str:
    """RFC 9110's reason phrase for `status`; empty for a code it does not name."""
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


class Answer:
    """One answer: status and headers at once, the body as it arrives."""

    def __init__(self, connection: _Connection, method: str) -> None:
        self.status = 0
        self.reason = ""
        self.raw_headers: list[tuple[bytes, bytes]] = []
        """The header fields as they came, names and values in bytes."""
        self._headers: CIMultiDict[str] | None = None
        self._connection = connection
        self._method = method
        self._loop = connection.loop
        self._head: asyncio.Future[None] = self._loop.create_future()
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self.pause_above = _PAUSE_ABOVE
        """Bytes read and not yet taken past which the connection stops
        being read (a stream's relay sets its own, smaller)."""
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self.complete = False
        """The parser has seen the end of the answer."""
        self.received_any = False
        self._timer: asyncio.TimerHandle | None = None
        self._body_task: asyncio.Task[None] | None = None
        self.body_sent = True
        """The request's body, if any, went out whole."""
        self.awaiting_body = False
        """The body's sender waits for the client's next piece (not for the API server)."""
        self._finished = False

    @property
    def headers(self) -> CIMultiDict[str]:
        """The header fields as text (decoded as aiohttp's parser decodes
        them), made on first use: the express lane reads `raw_headers` only."""
        if self._headers is None:
            self._headers = CIMultiDict((name.decode("utf-8", "surrogateescape"), value.decode("utf-8", "surrogateescape"))
                                        for name, value in self.raw_headers)
        return self._headers

    @property
    def buffered(self) -> int:
        """Bytes read from the API server and not yet taken: the body's
        pieces, and what the TLS layer read and has not yet decrypted."""
        return self._buffered + self._connection.tls_buffered()

    def hold(self) -> None:
        """Stop reading the connection now, whatever is buffered (a stream
        past the replica's ceiling); the next `read_chunk` reads on."""
        self._connection.pause()

    async def read_chunk(self, limit: int | None = None) -> bytes:
        """The next piece of the body, at most `limit` bytes if given; b"" at
        its end. Raises if the answer broke off."""
        while not self._chunks:
            if self._error is not None:
                raise self._error
            if self.complete:
                self.release()
                return b""
            self._connection.resume()  # nothing buffered: read on, even if `hold` stopped it
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        if limit is not None and self._buffered > limit:
            return self._take(limit)  # the rest stays for the next call; still paused if it was
        # Everything that has arrived, as one piece: the API server writes
        # large answers in chunks of a few KiB, and each piece read here
        # becomes a write (and a TLS record) towards the client.
        chunk = self._chunks.popleft() if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks.clear()
        self._buffered = 0
        self._connection.resume()
        return chunk

    def _take(self, size: int) -> bytes:
        """The first `size` bytes of what has arrived."""
        parts: list[bytes] = []
        taken = 0
        while taken < size:
            part = self._chunks.popleft()
            if taken + len(part) > size:
                self._chunks.appendleft(part[size - taken:])
                part = part[:size - taken]
            parts.append(part)
            taken += len(part)
        self._buffered -= taken
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def read(self, limit: int) -> bytes:
        """The whole body, for answers the gateway reads itself."""
        parts = []
        size = 0
        while chunk := await self.read_chunk():
            size += len(chunk)
            if size > limit:
                self.close()
                raise UpstreamProtocolError("the answer is larger than expected")
            parts.append(chunk)
        return b"".join(parts)

    def release(self) -> None:
        """Done with this answer: its connection is reused if it may be, closed if not."""
        if self._finished:
            return
        self._finished = True
        self._stop_timer()
        # A body sent in part (the answer came early, then the upload broke
        # off) would leave the server reading the next request as its rest.
        reusable = self.complete and self._error is None and self.body_sent
        if not reusable and self._body_task is not None:
            # The answer came before the upload ended: nothing reads the rest now,
            # and a read left waiting on the client's body would outlive the request.
            self._body_task.cancel()
        self._connection.finish(reusable=reusable)

    def close(self) -> None:
        """Abandon the answer and its connection."""
        if self._finished:
            return
        self._finished = True
        self._stop_timer()
        if self._body_task is not None:
            self._body_task.cancel()
        self._connection.finish(reusable=False)

    # -- from the connection --------------------------------------------

    def _start_timer(self, timeout: float | None) -> None:
        if timeout is not None:
            self._timer = self._loop.call_later(timeout, self._time_up)

    def _time_up(self) -> None:
        self._fail(RequestBodyStalled("the request body did not arrive in time") if self.awaiting_body
                   else TimeoutError("the API server did not answer in time"))

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _headers_done(self) -> None:
        if not self._head.done():
            self._head.set_result(None)

    def _feed(self, data: bytes) -> None:
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered > self.pause_above:
            self._connection.pause()
        self._wake()

    def _complete(self) -> None:
        self.complete = True
        self._stop_timer()
        self._wake()

    def _fail(self, error: BaseException) -> None:
        if self.complete or self._error is not None:
            return
        self._error = error
        if not self._head.done():
            self._head.set_exception(error)
            self._head.exception()  # retrieved: nobody may be waiting any more
        self._wake()
        if not self._finished:
            self._connection.abort()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


class _TlsReads(Protocol):
    """A TLS transport's read-ahead (asyncio's and uvloop's): how much
    ciphertext it reads from the socket while its protocol is not reading."""

    def set_read_buffer_limits(self, high: int | None = None, low: int | None = None) -> None: ...

    def get_read_buffer_size(self) -> int: ...


def _tls_reads(transport: asyncio.Transport | None) -> _TlsReads | None:
    if transport is None or transport.get_extra_info("ssl_object") is None:
        return None
    return cast(_TlsReads, transport)


class _Connection(asyncio.Protocol):
    def __init__(self, loop: asyncio.AbstractEventLoop, on_reusable: Callable[[_Connection], None],
                 clock: Callable[[], float]) -> None:
        self.loop = loop
        self._on_reusable = on_reusable
        self._clock = clock
        self._transport: asyncio.Transport | None = None
        self._parser: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)
        self._answer: Answer | None = None
        self._reason = bytearray()
        self._head_bytes = 0
        """Bytes received while the header section is incomplete (one never ended)."""
        self._header_bytes = 0
        """Bytes of header names and values (one too long)."""
        self._informational = False
        self._keep_alive = True
        self._until_close = False
        """The answer has no length and ends when the server closes the connection."""
        self._paused = False
        self._drain: asyncio.Future[None] | None = None
        self.alive = True
        self.idle_since = 0.0

    # -- asyncio.Protocol ----------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        answer = self._answer
        if answer is None or answer.complete:
            self.abort()  # bytes that belong to no request: the stream is out of step
            return
        answer.received_any = True
        assert self._parser is not None  # no bytes arrive after connection_lost
        try:
            self._parser.feed_data(data)
        except Exception as error:  # HttpParserError, HttpParserUpgrade (an unasked-for 101), a callback's own
            if answer.complete:
                self.abort()  # the answer is whole, but more followed it
            else:
                answer._fail(UpstreamProtocolError(f"unreadable answer from the API server: {type(error).__name__}"))
            return
        if answer.status == 0:  # the header section is still coming
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                answer._fail(UpstreamProtocolError("the answer's header section is too large"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.alive = False
        answer = self._answer
        if answer is not None:
            if self._until_close and exc is None:
                answer._complete()  # an answer framed by the end of the connection
            else:
                answer._fail(UpstreamConnectionLost("the API server closed the connection mid-answer"))
        if self._drain is not None and not self._drain.done():
            self._drain.set_exception(UpstreamConnectionLost("the API server closed the connection"))
            self._drain.exception()
        # The parser holds this protocol's bound methods, and the transport
        # holds the protocol: reference cycles that would keep a closed
        # connection's TLS buffers (about 300 KiB) alive until the cyclic
        # garbage collector happens to run, long after a burst of watches ends.
        self._parser = None
        self._transport = None

    def pause_writing(self) -> None:
        self._drain = self.loop.create_future()

    def resume_writing(self) -> None:
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)
        self._drain = None

    # -- httptools callbacks ---------------------------------------------

    def on_message_begin(self) -> None:
        if self._answer is None or self._answer.complete:
            raise UpstreamProtocolError("bytes after the end of the answer")

    def on_status(self, status: bytes) -> None:
        self._reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value)
        if self._header_bytes > MAX_HEAD_BYTES:
            raise UpstreamProtocolError("the answer's header section is too large")
        if not self._informational and self._answer is not None:
            self._answer.raw_headers.append((name, value))

    def on_headers_complete(self) -> None:
        answer, parser = self._answer, self._parser
        assert answer is not None and parser is not None
        status = parser.get_status_code()
        if 100 <= status < 200:  # 100 Continue and friends: the real answer follows
            self._informational = True
            answer.raw_headers.clear()
            self._reason.clear()
            return
        answer.status = status
        answer.reason = reason_phrase(status, self._reason)
        self._keep_alive = parser.should_keep_alive()
        self._until_close = status not in (204, 304) and _framed_by_close(answer.raw_headers)
        answer._headers_done()
        if answer._method == "HEAD":
            # No body follows, but the parser would wait for Content-Length bytes.
            self._keep_alive = self._until_close = False
            answer._complete()

    def on_body(self, body: bytes) -> None:
        if self._answer is not None and not self._answer.complete:
            self._answer._feed(body)

    def on_message_complete(self) -> None:
        if self._informational:
            self._informational = False
            return
        if self._answer is not None:
            self._answer._complete()

    # -- used by Pool and Answer -----------------------------------------

    def start(self, method: str, head: bytes, body: AsyncIterable[bytes] | None, content_length: int | None,
              timeout: float | None, read_ahead: int | None = None) -> Answer:
        answer = Answer(self, method)
        if read_ahead is not None:
            # Before the head goes out: the API server starts sending at once,
            # and what one read takes is what the socket holds by then.
            answer.pause_above = read_ahead
            self.shrink_reads(read_ahead)
        self._answer = answer
        self._reason.clear()
        self._head_bytes = self._header_bytes = 0
        self._informational = self._until_close = False
        assert self._transport is not None
        self._transport.write(head)
        answer._start_timer(timeout)
        if body is not None:
            answer.body_sent = False
            answer._body_task = self.loop.create_task(self._send_body(answer, body, content_length))
        return answer

    async def _send_body(self, answer: Answer, body: AsyncIterable[bytes], content_length: int | None) -> None:
        """Send the body framed as the head said: chunked, or exactly
        `content_length` bytes. A body that comes out longer than its length
        is never sent past it (the server would read the rest as the next
        request, someone else's answer as ours), nor one that comes out shorter
        counted as sent."""
        chunked = content_length is None
        left = content_length or 0
        pieces = aiter(body)
        try:
            while True:
                answer.awaiting_body = True
                try:
                    chunk = await anext(pieces)
                except StopAsyncIteration:
                    break
                finally:
                    answer.awaiting_body = False
                if not chunk:
                    continue
                if not chunked:
                    left -= len(chunk)
                    if left < 0:
                        raise UpstreamProtocolError("the request body is longer than its Content-Length")
                self._write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n" if chunked else chunk)
                if self._drain is not None:
                    await self._drain
            if chunked:
                self._write(b"0\r\n\r\n")
            elif left:
                raise UpstreamProtocolError("the request body is shorter than its Content-Length")
            answer.body_sent = True
        except Exception as error:  # the client's body broke off, or the upstream went away
            answer._fail(UpstreamConnectionLost(f"the request body could not be sent: {type(error).__name__}"))

    def _write(self, data: bytes) -> None:
        if self._transport is None or self._transport.is_closing():
            raise UpstreamConnectionLost("the API server closed the connection")
        self._transport.write(data)

    def shrink_reads(self, size: int) -> None:
        """Read about `size` bytes at a time, and hold no more than that
        unread: the socket's receive buffer made as small (what one read of
        it can take), and the TLS layer's own read-ahead too (asyncio's and
        uvloop's default to 256 KiB of ciphertext, read on after the answer
        stops being read). Every buffer a read fills grows to that read and
        keeps its pages for the connection's life (uvloop's 256 KiB read
        buffer, OpenSSL's memory BIOs): with reads of 200 KiB a stalled watch
        cost about 500 KiB. The connection is not reused afterwards: its
        buffers stay small."""
        self._keep_alive = False
        transport = self._transport
        if transport is None:
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size // 2)  # Linux doubles it
        tls = _tls_reads(transport)
        if tls is not None:
            tls.set_read_buffer_limits(high=size, low=size // 2)

    def tls_buffered(self) -> int:
        """Bytes the TLS layer read from the socket and has not decrypted for us (0 for plain TCP)."""
        tls = _tls_reads(self._transport)
        return tls.get_read_buffer_size() if tls is not None else 0

    def pause(self) -> None:
        if not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self._transport is not None and not self._transport.is_closing():
            self._paused = False
            self._transport.resume_reading()

    def finish(self, *, reusable: bool) -> None:
        self._answer = None
        if reusable and self._keep_alive and self.alive and not self._paused:
            self.idle_since = self._clock()
            self._on_reusable(self)
        else:
            self.abort()

    def abort(self) -> None:
        self.alive = False
        if self._transport is not None:
            self._transport.abort()

    @property
    def is_usable(self) -> bool:
        return self.alive and self._transport is not None and not self._transport.is_closing()


class _UpgradeAnswer(asyncio.Protocol):
    """Reads the head of the answer to an upgrade; after a 101, keeps what
    follows (the new protocol's first bytes) until the connection is taken over."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        loop = asyncio.get_running_loop()
        self.head: asyncio.Future[tuple[int, CIMultiDict[str]]] = loop.create_future()
        self._parser: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)
        self._headers: CIMultiDict[str] = CIMultiDict()
        self._head_bytes = 0
        self.early = bytearray()
        self.refusal = bytearray()
        """The body of an answer that is not a 101, up to MAX_REFUSAL_BYTES."""
        self.refusal_read: asyncio.Future[bool] = loop.create_future()
        """True once the whole refusal is in `refusal`; False if it was cut short or too large."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's TLS transport is not a subclass

    def data_received(self, data: bytes) -> None:
        if self._parser is None:
            if self.head.done() and not self.head.exception():
                self.early += data
            return
        self._head_bytes += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade as upgraded:  # the 101's head is complete
            self._parser = None
            self.early += data[upgraded.args[0]:]
            return
        except httptools.HttpParserError:
            self._fail(UpstreamProtocolError("the answer to the upgrade is not HTTP/1.1"))
            return
        if self._head_bytes > MAX_HEAD_BYTES and not self.head.done():
            self._fail(UpstreamProtocolError("the answer's header section is too large"))

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(UpstreamConnectionLost("the API server closed the connection before answering"))
        self._refusal_done(False)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.add(name.decode("utf-8", "surrogateescape"), value.decode("utf-8", "surrogateescape"))

    def on_body(self, body: bytes) -> None:
        if len(self.refusal) + len(body) > MAX_REFUSAL_BYTES:
            self._refusal_done(False)
        elif not self.refusal_read.done():
            self.refusal += body

    def on_message_complete(self) -> None:
        self._refusal_done(True)

    def _refusal_done(self, whole: bool) -> None:
        if not self.refusal_read.done():
            self.refusal_read.set_result(whole)

    def on_headers_complete(self) -> None:
        assert self._parser is not None
        if not self.head.done():
            self.head.set_result((self._parser.get_status_code(), self._headers))

    def _fail(self, error: Exception) -> None:
        self._parser = None  # it holds this protocol's bound methods
        self._refusal_done(False)
        if not self.head.done():
            self.head.set_exception(error)
            self.head.exception()  # nobody may be waiting any more (a connect that failed, a timeout)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()


class Upgrade:
    """The API server's answer to an upgrade. After a 101, `take_over` hands
    the connection, and any bytes of the new protocol already read, to a
    protocol of the caller's."""

    def __init__(self, status: int, headers: CIMultiDict[str], switched: _UpgradeAnswer | None,
                 body: bytes | None = None) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        """A refusal's body, read whole (at most MAX_REFUSAL_BYTES), or None."""
        self._switched = switched

    def take_over(self, protocol: asyncio.Protocol) -> tuple[asyncio.Transport, bytes]:
        """The connection, now `protocol`'s, and the bytes that came after
        the 101: the caller hands them on before anything else."""
        assert self._switched is not None and self._switched.transport is not None
        transport = self._switched.transport
        transport.set_protocol(protocol)
        return transport, bytes(self._switched.early)

    def abort(self) -> None:
        """Give up a connection that switched protocols but is not taken over."""
        if self._switched is not None:
            self._switched.abort()


class Pool:
    """Kept-alive connections to one API server, most recently used first."""

    def __init__(self, server: str, ssl_context: ssl.SSLContext | None, *, connect_timeout: float = 5.0,
                 keepalive_seconds: float = 60.0, max_idle: int = 512,
                 clock: Callable[[], float] = time.monotonic) -> None:
        url = URL(server)
        assert url.host is not None and url.port is not None
        self._host, self._port = url.host, url.port
        self._host_header = url.raw_authority
        # An API server behind a path (Rancher's /k8s/clusters/<id>, some proxies).
        self._prefix = url.raw_path.rstrip("/")
        self._ssl = ssl_context if url.scheme == "https" else None
        self._connect_timeout = connect_timeout
        self._keepalive = keepalive_seconds
        self._max_idle = max_idle
        self._clock = clock
        self._idle: collections.deque[_Connection] = collections.deque()
        self._closed = False

    async def request(self, method: str, target: str, headers: CIMultiDict[str], *,
                      body: AsyncIterable[bytes] | None = None, content_length: int | None = None,
                      timeout: float | None, read_ahead: int | None = None) -> Answer:
        """Send a request for `target` (path and query, below the server's own
        path if it has one) and return once the answer's status and headers are in.

        `timeout` bounds the whole exchange, body included (None: a watch).
        `read_ahead` is for a stream, whose client may stop reading: its
        connection reads at most about that much ahead of the taker, in reads
        no larger (`_Connection.shrink_reads`), from before the request is
        sent, and is not reused afterwards.
        Raises OSError subclasses (connection refused, lost) or TimeoutError
        when no answer came, UpstreamProtocolError when it was not HTTP.
        """
        head = request_head(method, self._prefix + target, self._host_header, headers, content_length,
                            body is not None)
        return await self._exchange(method, head, body, content_length, timeout, read_ahead)

    def get(self, target: str, fields: bytes, *, timeout: float) -> Awaitable[Answer]:
        """A GET without a body whose header lines come ready: `fields` is
        each line with its CRLF, Host and framing left out, checked by the
        caller to hold no line break of its own (proxy.passthrough.express
        takes them off the wire as they came). Returns as `request` does."""
        head = b"".join((f"GET {self._prefix}{target} HTTP/1.1\r\nHost: {self._host_header}\r\n".encode(),
                         fields, b"\r\n"))
        return self._exchange("GET", head, None, None, timeout)

    async def _exchange(self, method: str, head: bytes, body: AsyncIterable[bytes] | None,
                        content_length: int | None, timeout: float | None, read_ahead: int | None = None) -> Answer:
        while True:
            connection, reused = await self._acquire()
            answer = connection.start(method, head, body, content_length, timeout, read_ahead)
            try:
                await answer._head
                return answer
            except UpstreamConnectionLost:
                answer.close()
                # The server closed a kept-alive connection as it was reused:
                # safe to send again only if nothing of it was answered or uploaded.
                if reused and body is None and not answer.received_any:
                    continue
                raise
            except BaseException:
                answer.close()
                raise

    async def _acquire(self) -> tuple[_Connection, bool]:
        now = self._clock()
        while self._idle:
            connection = self._idle.pop()
            if connection.is_usable and now - connection.idle_since < self._keepalive:
                return connection, True
            connection.abort()
        loop = asyncio.get_running_loop()
        return await self._open(lambda: _Connection(loop, self._put_back, self._clock)), False

    async def _open(self, protocol_factory: Callable[[], _P]) -> _P:
        """A new connection to the API server. Raises OSError or TimeoutError."""
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(self._connect_timeout):
            transport, protocol = await loop.create_connection(
                protocol_factory, self._host, self._port, ssl=self._ssl,
                server_hostname=self._host if self._ssl is not None else None)
        release_read_buffer(transport)  # its handshake's pages, or what the heap had there before (tls_buffers)
        return protocol

    async def upgrade(self, target: str, headers: CIMultiDict[str], *, timeout: float) -> Upgrade:
        """A GET asking to switch protocols (`headers` hold the handshake),
        on a connection of its own, and the answer's head. Raises like `request`."""
        head = request_head("GET", self._prefix + target, self._host_header, headers, None, False)
        answer = await self._open(_UpgradeAnswer)
        try:
            assert answer.transport is not None
            answer.transport.write(head)
            async with asyncio.timeout(timeout):
                status, answer_headers = await answer.head
        except BaseException:
            answer.abort()
            raise
        if status != 101:
            # The refusal's body is the API server's reason (a Status: "container
            # not found", a denial), given the upgrade's timeout once more to arrive.
            try:
                async with asyncio.timeout(timeout):
                    whole = await answer.refusal_read
            except TimeoutError:
                whole = False
            finally:
                answer.abort()
            return Upgrade(status, answer_headers, None, bytes(answer.refusal) if whole else None)
        return Upgrade(status, answer_headers, answer)

    def _put_back(self, connection: _Connection) -> None:
        if self._closed:
            connection.abort()
            return
        self._idle.append(connection)
        if len(self._idle) > self._max_idle:
            self._idle.popleft().abort()

    def close(self) -> None:
        self._closed = True
        while self._idle:
            self._idle.pop().abort()
