"""The floor: what aiohttp alone costs as a relay on this machine.

The gateway's own relay mechanics (its Upstream client settings, its header
hygiene, chunk-by-chunk streaming, uvloop, TLS on both legs) with everything
that makes it a gateway taken out: no authentication, no workspace lookup, no
tenant wall, no token cache, no audit, no metrics, no middlewares. One fixed
ServiceAccount token is attached to every request. The benchmark runs it as a
fourth target so the gateway's cost can be split into "aiohttp and TLS" and
"the gateway's own work". Never shipped, never exposed beyond loopback.

Configuration (environment): FLOOR_PORT, FLOOR_UPSTREAM, FLOOR_UPSTREAM_CA,
FLOOR_TOKEN, FLOOR_TLS_CERT, FLOOR_TLS_KEY.
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path
from typing import AsyncIterator

import uvloop
from aiohttp import web

from proxy.passthrough.headers import downstream_response_headers, upstream_request_headers
from proxy.passthrough.relaying import ShortResponse
from proxy.passthrough.upstream import Upstream

UPSTREAM = web.AppKey("upstream", Upstream)


async def relay(request: web.Request) -> web.StreamResponse:
    upstream = request.app[UPSTREAM]
    raw_path = request.raw_path
    headers = upstream_request_headers(request.headers, os.environ["FLOOR_TOKEN"])
    answer = await upstream.pool.request(request.method, raw_path, headers, timeout=None)  # watches too
    try:
        # As the gateway does: a short answer's headers leave with its body,
        # a watch's at once.
        kind = web.StreamResponse if request.query.get("watch") else ShortResponse
        response = kind(status=answer.status, reason=answer.reason,
                        headers=downstream_response_headers(answer.headers))
        await response.prepare(request)
        while chunk := await answer.read_chunk():
            await response.write(chunk)
        await response.write_eof()
        return response
    finally:
        answer.close()


def main() -> None:
    async def upstream(app: web.Application) -> AsyncIterator[None]:
        app[UPSTREAM] = Upstream(os.environ["FLOOR_UPSTREAM"], Path(os.environ["FLOOR_UPSTREAM_CA"]).read_bytes())
        yield
        app[UPSTREAM].close()

    app = web.Application()
    app.cleanup_ctx.append(upstream)
    app.router.add_route("*", "/{tail:.*}", relay)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(os.environ["FLOOR_TLS_CERT"], os.environ["FLOOR_TLS_KEY"])
    uvloop.install()
    web.run_app(app, host="127.0.0.1", port=int(os.environ["FLOOR_PORT"]), ssl_context=tls, print=None,
                access_log=None)


if __name__ == "__main__":
    main()
