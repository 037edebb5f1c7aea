"""The gateway's connections: aiohttp's connection handler and server,
subclassed, and the runner that serves the app with them.

This is the one module that reaches into aiohttp's server internals (an
import contract keeps aiohttp.web_protocol here), and pyproject.toml pins
aiohttp to the minor release that has them: they are not aiohttp's API
(as late as 3.14.3, the buffer's pause had other names). What the gateway
relies on of the classes subclassed here, each checked by
tests/unit/test_aiohttp_internals.py (with its signature, for a method) so
that an upgrade fails there, by name, and not in production:
- RequestHandler's `data_received`, `_handle_request`, `_process_keepalive`,
  `connection_made`, `connection_lost` and `handle_error`, overridden, and its constructor's
  manager and keywords (proxy.app.handler_args);
- its state `_buffer_paused`, `_force_close`, `_close`, `_loop`,
  `_keepalive_timeout`, `_next_keepalive_close_time` and `transport`;
- its flow control: `_pause_reading_for_buffer` and
  `_resume_reading_for_buffer`, here; `writing_paused` and `_drain_helper`,
  which the express lane and every stream's back-pressure wait on
  (proxy.passthrough.backpressure);
- its `force_close` and `log_exception`, here, and `set_parser` and
  `keep_alive`, which the WebSocket tunnel calls (proxy.passthrough.websockets);
- a request's `writer` and that writer's `output_size` (an answer has begun);
- web.Server's `_kwargs` and `_loop`, and its `__call__`, overridden (a
  Server must also be able to change its class to _Server: no __slots__);
- AppRunner's `_make_server`, overridden.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from proxy import keys
from proxy.http import errors
from proxy.http.answer_headers import new_request_id, stamp
from proxy.http.error_answers import error_answer
from proxy.http.tls_buffers import release_read_buffer
from proxy.passthrough.express import INCOMPLETE, MAX_HEAD_BYTES, Admitted, ExpressLane, Lend

log = logging.getLogger(__name__)


class _RequestHandler(RequestHandler):
    """aiohttp's connection handler, with two changes.

    The express lane (proxy.passthrough.express) reads each request's head
    first. What it admits it answers; those bytes never reach aiohttp's
    parser. What it lends (express.Lend) goes to aiohttp, that request's
    bytes alone, its body as it arrives; the lane takes the connection back
    once aiohttp has answered and keeps the connection open. What it cannot
    read as aiohttp would (None) goes to aiohttp with every byte not yet
    answered, for the rest of the connection's life. One request at a
    time: what arrives meanwhile waits (reading pauses past
    MAX_HEAD_BYTES), and aiohttp's idle timer does not close a connection
    whose express answer is under way.

    And what aiohttp answers itself: a request it cannot parse (a header
    line over the limit, a control byte in a header, a broken chunk size),
    answered before any route, middleware or response hook runs. aiohttp's
    own answer is a text/plain page quoting the offending bytes, with its
    version in Server and none of the security headers, and it logs an
    ERROR with a traceback: client input would fill the error log. Here the
    answer is the contract's error with the headers every answer carries,
    logged as one INFO line naming the kind of fault, never its bytes (a
    header line may hold a token). A failure past the front middleware (a
    bug) is still logged with its traceback summary (proxy.http.logs)."""

    def __init__(self, manager: web.Server, *, express: ExpressLane | None, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._express = express
        """The lane while the connection is on it; None once handed to aiohttp for good."""
        self._express_waiting = bytearray()
        """What arrived and is not answered yet (nor handed to aiohttp)."""
        self._express_answer: asyncio.Task[None] | None = None
        self._express_lent = False
        """aiohttp is answering a request the lane lent it (express.Lend)."""
        self._express_lent_body = 0
        """Bytes of the lent request's body still to come: aiohttp's as they arrive."""

    def data_received(self, data: bytes) -> None:
        if self._express is None:
            super().data_received(data)
            return
        if self._express_lent_body:
            part = data[:self._express_lent_body]
            self._express_lent_body -= len(part)
            super().data_received(part)
            data = data[len(part):]
            if not data:
                return
        waiting = self._express_waiting
        waiting += data
        if self._express_answer is None and not self._express_lent:
            self._express_next()
        elif len(waiting) > MAX_HEAD_BYTES and not self._buffer_paused:
            self._pause_reading_for_buffer()  # a client far ahead of its answers waits

    def _express_next(self) -> None:
        """Take the next waiting request, if it has all arrived."""
        express, waiting, transport = self._express, self._express_waiting, self.transport
        assert express is not None
        if not waiting or self._force_close or self._close or transport is None or transport.is_closing():
            return
        admitted = express.admit(waiting)
        if admitted is INCOMPLETE:
            return
        if isinstance(admitted, Admitted):
            del waiting[:admitted.size]
            task = express.start(self, admitted)
            self._express_answer = task
            task.add_done_callback(self._express_answered)
        elif isinstance(admitted, Lend):  # that request alone; the lane takes the next
            self._express_lent = True
            size = admitted.size + admitted.body
            data = bytes(waiting[:size])
            del waiting[:size]
            self._express_lent_body = size - len(data)
            super().data_received(data)
        else:  # aiohttp's for good, from the first byte not answered
            self._express = None
            data = bytes(waiting)
            waiting.clear()
            super().data_received(data)
        if self._buffer_paused and len(waiting) <= MAX_HEAD_BYTES:
            self._resume_reading_for_buffer()

    def _express_answered(self, task: asyncio.Task[None]) -> None:
        self._express_answer = None
        if not task.cancelled() and (error := task.exception()) is not None:  # a bug: no answer will come
            log.error("express answer failed", exc_info=error)
            self.force_close()
            return
        self._next_keepalive_close_time = self._loop.time() + self._keepalive_timeout
        if self._express is not None:
            self._express_next()

    async def _handle_request(self, request: web.BaseRequest, start_time: float | None,
                              request_handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]],
                              ) -> tuple[web.StreamResponse, bool]:
        answered = await super()._handle_request(request, start_time, request_handler)
        if self._express_lent:
            response, reset = answered
            if reset or not response.keep_alive or self._close or self._force_close:
                self._express = None  # aiohttp closes the connection: nothing more is taken
            else:
                # Once aiohttp is done with the answer (this runs first): the lane takes the next.
                self._loop.call_soon(self._express_returned)
        return answered

    def _express_returned(self) -> None:
        self._express_lent = False
        if self._express is not None:
            self._express_next()

    def _process_keepalive(self) -> None:
        if self._express_answer is not None:  # busy, though aiohttp's side is idle
            self._next_keepalive_close_time = self._loop.time() + self._keepalive_timeout
        super()._process_keepalive()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        # Called from within the TLS handshake's last read: the read buffer's
        # pages are given back once that read is over (proxy.http.tls_buffers).
        self._loop.call_soon(release_read_buffer, transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._express_answer is not None:
            self._express_answer.cancel()  # as aiohttp cancels its handler (handler_cancellation)
        super().connection_lost(exc)

    def handle_error(self, request: web.BaseRequest, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if request.writer.output_size > 0:  # an answer is under way: aiohttp breaks the connection
            return super().handle_error(request, status, exc, message)
        request_id = new_request_id()
        if status >= 500:
            if exc is not None:  # a bug
                self.log_exception("unhandled error", exc_info=exc, extra={"request_id": request_id})
            else:  # aiohttp's own (a handler past its time): no traceback to give
                log.warning("request not answered", extra={"request_id": request_id, "status": status})
            code, text = "internal_error", "the gateway failed to handle the request"
        else:
            log.info("request not understood", extra={
                "request_id": request_id, "status": status, "fault": type(exc).__name__ if exc else None})
            code, text = "bad_request", "the request is not well-formed HTTP/1.1"
        response = errors.response(error_answer(status, code, text, kubernetes=False))
        stamp(response.headers, request_id)
        response.force_close()
        return response


class _Server(web.Server):
    express: ExpressLane | None = None

    def __call__(self) -> RequestHandler:
        return _RequestHandler(self, express=self.express, loop=self._loop, **self._kwargs)


class GatewayRunner(web.AppRunner):
    """aiohttp's AppRunner, whose connections answer what aiohttp cannot
    parse in the contract's shape (_RequestHandler). `serve` and the tests
    run the app with it."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        # The same object, one method more: the app built it with every
        # argument it needs. The express lane is the app's (proxy.app).
        server.__class__ = _Server
        assert isinstance(server, _Server)
        server.express = self.app.get(keys.EXPRESS)
        return server
