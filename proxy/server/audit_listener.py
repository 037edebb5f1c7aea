"""The API server's audit webhook, received (GATEWAY_AUDIT_LISTEN).

The API server's webhook backend POSTs `audit.k8s.io/v1` EventLists to
`/audit` on a listener of its own, never the public one: the events name
every tenant's requests, and only the API server may write them. So the
listener serves TLS and requires a client certificate signed by
GATEWAY_AUDIT_CLIENT_CA; without one the TLS handshake fails before any
HTTP is read. Nothing else is served there (404).

Each batch is stored before it is answered (provisioning.cluster_audit):
204 once stored, 503 when the database cannot take it (the API server
retries), 400 for a body that is not an EventList, 413 past MAX_BATCH_BYTES.
Like the metrics listener, it is a `cleanup_ctx` of the main application.
"""

from __future__ import annotations

import logging
import ssl
from typing import AsyncIterator, Awaitable, Callable

from aiohttp import web

from provisioning.cluster_audit import RetentionSweeper, ingest
from proxy import keys
from proxy.http.errors import failure_answer
from proxy.server.serving import bind
from proxy.settings import Settings, StartupError

log = logging.getLogger(__name__)

MAX_BATCH_BYTES = 6 * 1024 * 1024
"""At metadata level a batch of the API server's default 400 events is
about 1 MB; a 5 MB batch (larger events, a raised batch size) is taken,
anything past this is 413."""

routes = web.RouteTableDef()


@web.middleware
async def _answers(request: web.Request,
                   handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    """Failures in the contract's JSON error shape, as on the public listener."""
    try:
        return await handler(request)
    except Exception as error:  # noqa: BLE001 - failure_answer re-raises what is not ours to answer
        return failure_answer(request, error)


@routes.post("/audit")
async def receive(request: web.Request) -> web.Response:
    body = await request.read()
    received, kept = await ingest(request.app[keys.DATABASE], body)
    log.debug("cluster audit batch stored", extra={"events": received, "kept": kept})
    return web.Response(status=204)


def server_context(settings: Settings) -> ssl.SSLContext:
    """TLS with a client certificate from the audit client CA, required."""
    assert settings.audit_tls_cert_file and settings.audit_tls_key_file and settings.audit_client_ca
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(settings.audit_tls_cert_file, settings.audit_tls_key_file)
    except OSError as error:  # ssl.SSLError is one
        raise StartupError(f"GATEWAY_AUDIT_TLS_CERT_FILE and GATEWAY_AUDIT_TLS_KEY_FILE cannot be loaded: "
                           f"{error.strerror or type(error).__name__}") from None
    try:
        context.load_verify_locations(cafile=str(settings.audit_client_ca))
    except OSError as error:
        raise StartupError(f"GATEWAY_AUDIT_CLIENT_CA cannot be loaded as PEM certificates: "
                           f"{error.strerror or type(error).__name__}") from None
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def audit_listener(settings: Settings) -> Callable[[web.Application], AsyncIterator[None]]:
    """A cleanup context serving `POST /audit` on GATEWAY_AUDIT_LISTEN and
    sweeping cluster events past GATEWAY_AUDIT_RETENTION_DAYS; nothing when
    the listener is off. The bound address is `app[keys.AUDIT_ADDRESS]`."""

    async def listen(app: web.Application) -> AsyncIterator[None]:
        if settings.audit_listen is None:
            yield
            return
        context = server_context(settings)
        listener = web.Application(client_max_size=MAX_BATCH_BYTES, middlewares=[_answers])
        listener[keys.DATABASE] = app[keys.DATABASE]
        listener.router.add_routes(routes)
        sweeper = RetentionSweeper(app[keys.DATABASE], settings.audit_retention_days)
        runner = web.AppRunner(listener, access_log=None, handle_signals=False)
        await runner.setup()
        try:
            site = web.TCPSite(runner, settings.audit_listen.host, settings.audit_listen.port,
                               ssl_context=context)
            await bind(site, "audit_listen", settings, " (a port of 0 takes any free one)")
            host, port = runner.addresses[0][:2]
            app[keys.AUDIT_ADDRESS] = (str(host), int(port))
            await sweeper.start()
            yield
        finally:
            await sweeper.stop(timeout=1.0)
            await runner.cleanup()

    return listen
