"""The web console: one page and its scripts, shipped in `proxy/console/`.

The console is an ordinary web UI of the gateway: everything it does goes
through `/api/v1/...` and `/k8s/...` with the session cookie and the CSRF
header, exactly as a third-party UI on an allowed origin would. Its files
are read once, when this module is imported, from the package; a request
only picks one of them by name, so no request path reaches the file system.

Its pages are the only answers of the gateway that run code, so they alone
get a policy that allows scripts, and only the gateway's own: no inline
script or style, no other origin, no frames, no plugins (`CONSOLE_CSP`).
"""

from __future__ import annotations

from importlib import resources

from aiohttp import web

from provisioning.errors import NotFound

CONSOLE_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
               "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
"""What a console page may load and where its scripts may connect: the
gateway's own origin only (same-origin `wss:` included, CSP Level 3)."""

_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}
_ASSET = "{name:[a-z][a-z0-9-]*\\.(?:js|css)}"

routes = web.RouteTableDef()


def _load() -> dict[str, tuple[bytes, str]]:
    folder = resources.files("proxy") / "console"
    return {entry.name: (entry.read_bytes(), _TYPES[suffix])
            for entry in folder.iterdir()
            if (suffix := "." + entry.name.rpartition(".")[2]) in _TYPES}


_FILES = _load()


def _answer(name: str) -> web.Response:
    found = _FILES.get(name)
    if found is None:
        raise NotFound("no such console file")
    body, content_type = found
    # Revalidated on every load: a new gateway version never runs old scripts.
    return web.Response(body=body, content_type=content_type, charset="utf-8", headers={
        "Content-Security-Policy": CONSOLE_CSP, "Cache-Control": "no-cache"})


@routes.get("/")
async def index(request: web.Request) -> web.Response:
    return _answer("index.html")


@routes.get("/device")
async def device(request: web.Request) -> web.Response:
    """Where `tenant-gateway login` sends its user (the device sign-in's
    verification_uri): the console, which shows the approval there."""
    return _answer("index.html")


@routes.get(f"/console/{_ASSET}")
async def asset(request: web.Request) -> web.Response:
    return _answer(request.match_info["name"])
