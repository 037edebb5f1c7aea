"""Relay one HTTP request to the API server and stream the answer back.

Bodies are never buffered whole: the request body is handed upstream as a
stream, and the answer is written piece by piece as it arrives, so a watch
event reaches the browser when the API server flushes it. A 401 from
upstream means the cached token went bad (a replaced ServiceAccount, an
early expiry): the token is dropped and a body-less request is retried once
with a fresh one (Relay.exchange). Requests with bodies are not replayed: their body has
already been streamed.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Awaitable

from aiohttp import web

from provisioning.errors import UpstreamError
from proxy.passthrough.backpressure import STREAM_PIECE, STREAM_READ_AHEAD, ClientFlow
from proxy.passthrough.framing import EventBoundary
from proxy.passthrough.headers import AUDIT_ID, downstream_response_headers, upstream_request_headers
from proxy.passthrough.http1 import BROKEN_OFF, Answer
from proxy.passthrough.relay import Relay
from proxy.passthrough.streams import Stream
from proxy.passthrough.ticket import Ticket
from proxy.passthrough.upstream import SEND_FAILURES

_CHUNK = 64 * 1024
# A Namespace object, read and rewrapped by the gateway itself.
_NAMESPACE_LIMIT = 1024 * 1024


class ShortResponse(web.StreamResponse):
    """A relayed answer to an ordinary request: its headers leave with the
    first piece of the body, as one TLS record and one write, instead of on
    their own (half the segments, and half the wake-ups of the client, for a
    small object). A watch or log stream keeps aiohttp's default, headers at
    once, so the client learns the stream is open before the first event."""

    _send_headers_immediately = False


def _request(relay: Relay, ticket: Ticket, request: web.Request, token: str, *, target: str | None = None,
             headers: dict[str, str] | None = None, audit_id: str | None = None) -> Awaitable[Answer]:
    """The request upstream, as the tenant: to the path and query the tenant
    wall judged, byte for byte, unless the gateway names its own `target`;
    its event in the cluster's audit log named `audit_id` if given.
    Returned to be awaited where failures are handed to `send_failed`
    (Relay.exchange, or `_send`)."""
    decision = ticket.decision
    if target is None:
        target = decision.target
    outgoing = upstream_request_headers(request.headers, token)
    if headers:
        outgoing.update(headers)
    if audit_id is not None:
        outgoing[AUDIT_ID] = audit_id
    has_body = request.method not in ("GET", "HEAD") and request.body_exists
    upstream = relay.upstream(ticket)
    return upstream.pool.request(
        request.method, target, outgoing,
        body=request.content.iter_chunked(_CHUNK) if has_body else None,
        content_length=request.content_length if has_body else None,
        timeout=None if decision.long_running else upstream.timeout,
        read_ahead=STREAM_READ_AHEAD if decision.long_running else None,
    )


async def _send(relay: Relay, ticket: Ticket, request: web.Request, token: str, *, target: str | None = None,
                headers: dict[str, str] | None = None) -> Answer:
    """`_request`, awaited, its failures translated. (The hot path awaits
    `_request` itself: one coroutine less.)"""
    try:
        return await _request(relay, ticket, request, token, target=target, headers=headers)
    except SEND_FAILURES as error:
        relay.failed(ticket, error)


def relay_http(request: web.Request, ticket: Ticket, relay: Relay) -> Awaitable[web.StreamResponse]:
    """A short request's relay itself, a long-running one's inside its
    stream's slot (not a coroutine: a short request goes without one)."""
    if not ticket.decision.long_running:
        return _relay_http(request, ticket, relay, None)
    return _relay_tracked(request, ticket, relay)


async def _relay_tracked(request: web.Request, ticket: Ticket, relay: Relay) -> web.StreamResponse:
    async with relay.streams.track(ticket.owner, request) as stream:  # a slot before anything opens upstream
        return await _relay_http(request, ticket, relay, stream)


async def _relay_http(request: web.Request, ticket: Ticket, relay: Relay,
                      stream: Stream | None) -> web.StreamResponse:
    """Relay one request and its answer. The body is relayed here too (one
    coroutine for the whole exchange). A long-running answer (`stream`)
    reads from the API server only while its client keeps up (`_relay_stream`)."""
    token = relay.cached_token(ticket) or await relay.token(ticket)
    # Recorded as soon as the API server has answered (or failed to): a
    # client that hangs up at once, or while the body streams, must not
    # leave a write that took effect unaudited.
    upstream = await relay.exchange(ticket, token,
                                    lambda token, audit_id: _request(relay, ticket, request, token, audit_id=audit_id),
                                    replayable=not request.body_exists)
    try:
        if stream is not None:
            return await _relay_stream(request, upstream, stream, relay)
        response = ShortResponse(status=upstream.status, reason=upstream.reason,
                                 headers=downstream_response_headers(upstream.headers))
        await response.prepare(request)
        try:
            while chunk := await upstream.read_chunk():
                await response.write(chunk)
        except BROKEN_OFF:
            _break_off(request)
            return response
        await response.write_eof()
    finally:
        upstream.close()  # nothing left to do once the body was read to its end
    return response


async def _relay_stream(request: web.Request, upstream: Answer, stream: Stream, relay: Relay) -> web.StreamResponse:
    """A watch's or log follow's answer, its headers at once. Nothing more
    is read from the API server while the client's buffer is over its mark
    (or past the replica's ceiling, while it holds anything: ClientFlow).
    Asked to end (`Stream.end`: a right that ended, a stop), it ends after
    the event in flight, with its body's last chunk; asked before the
    answer began, `track` answers instead."""
    response = web.StreamResponse(status=upstream.status, reason=upstream.reason,
                                  headers=downstream_response_headers(upstream.headers))
    await response.prepare(request)
    assert request.transport is not None and request.protocol is not None  # prepared: the client is there
    flow = ClientFlow(request.transport, request.protocol, relay.streams.buffers)
    boundary = EventBoundary(upstream.headers.get("Content-Type", ""))
    try:
        while chunk := await upstream.read_chunk(STREAM_PIECE):
            boundary.feed(chunk)  # before the write: write() queues all of it before it can be interrupted
            if flow.fills_up(len(chunk)):
                # aiohttp's write waits for the client once its buffer is over
                # the mark: the API server's connection is not read meanwhile.
                upstream.hold()
            flow.note(len(chunk) + upstream.buffered)  # as it will be once written
            with flow.waiting():
                await response.write(chunk)
            if flow.must_wait:
                upstream.hold()
                await flow.room(upstream.buffered)
            flow.note(upstream.buffered)
        await response.write_eof()
    except asyncio.CancelledError:
        if stream.take_end() is None:
            raise
        await _end_after_event(request, response, upstream, boundary)
    except BROKEN_OFF:
        _break_off(request)
    finally:
        flow.close()
    return response


async def _end_after_event(request: web.Request, response: web.StreamResponse, upstream: Answer,
                           boundary: EventBoundary) -> None:
    """Finish the event in flight (it is already arriving), and nothing after
    it, then end the body as the API server ends a watch: the chunked
    encoding's last chunk. Bounded by the stream's deadline (Stream.end)."""
    try:
        while not boundary.at_boundary and (chunk := await upstream.read_chunk()):
            await response.write(chunk[:boundary.feed(chunk, stop_at_boundary=True)])
        await response.write_eof()
    except BROKEN_OFF:
        _break_off(request)


def _break_off(request: web.Request) -> None:
    """Break our answer off as well: a clean end would hand the client a
    truncated LIST as if it were complete."""
    if request.transport is not None:
        request.transport.close()


def own_namespace_list(namespace_object: dict[str, Any]) -> dict[str, Any]:
    """`GET /api/v1/namespaces` for a tenant: a list holding only its own."""
    return {
        "kind": "NamespaceList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": namespace_object.get("metadata", {}).get("resourceVersion", "")},
        "items": [namespace_object],
    }


async def relay_namespace_list(request: web.Request, ticket: Ticket, relay: Relay) -> web.Response:
    # Read and parsed here, so asked for as plain JSON.
    token = await relay.token(ticket)
    upstream = await _send(relay, ticket, request, token, target=f"/api/v1/namespaces/{ticket.workspace.namespace}",
                           headers={"Accept": "application/json", "Accept-Encoding": "identity"})
    if upstream.status == 401:  # as for any relayed request: the next one gets a fresh token
        relay.drop_token(ticket, token)
    try:
        body = await upstream.read(_NAMESPACE_LIMIT)
    except SEND_FAILURES as error:
        relay.failed(ticket, error)
    finally:
        upstream.close()
    if upstream.status != 200:
        return web.Response(status=upstream.status, body=body, headers=downstream_response_headers(upstream.headers))
    try:
        namespace_object = json.loads(body)
    except ValueError:
        namespace_object = None
    if not isinstance(namespace_object, dict):
        raise UpstreamError()  # a 200 that is no object: nothing to build the list from
    return web.json_response(own_namespace_list(namespace_object))
