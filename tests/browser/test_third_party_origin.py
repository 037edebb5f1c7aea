"""A third-party web UI in a real browser: a page served by another server
(another origin) that calls the gateway with `credentials: 'include'`.

What Chromium does, as these tests find it:
* https://127.0.0.1:<other port> is another origin but the same site
  (a site is scheme + host; ports do not count), so the gateway's
  SameSite=Strict cookies are set and sent: cookie + CSRF work as for the
  console, once the origin is in GATEWAY_CORS_ORIGINS (the JSON POST needs
  a preflight, which the gateway answers).
* https://localhost:<port> is another site: even when allowed by CORS, the
  browser neither stores nor sends SameSite=Strict cookies for it, so a
  cross-site UI authenticates with the bearer token from the login body.
* An origin not in GATEWAY_CORS_ORIGINS gets nothing: its preflight is
  refused, so the browser never sends the request, and no answer is readable.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web
from playwright.async_api import Browser, Page

from tests.support.browser import Shots, Watched, new_page
from tests.support.gatewayclient import PASSWORD, admin_session, unique_email

pytestmark = [pytest.mark.cluster, pytest.mark.browser]

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>A third-party UI</title>
<script type="module" src="/ui.js"></script></head>
<body><h1>A third-party UI</h1><pre id="log"></pre></body></html>
"""

SCRIPT = """
const gateway = new URLSearchParams(location.search).get("gateway");
const log = document.getElementById("log");
const say = (line) => { log.textContent += line + "\\n"; };
say(`this page: ${location.origin}; the gateway: ${gateway}`);

// One call to the gateway, with the browser's cookies for it; what the page could read.
async function attempt(method, path, { body, csrf, token } = {}) {
  const headers = {};
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (csrf) headers["X-CSRF-Token"] = csrf;
  if (token) headers["Authorization"] = `Bearer ${token}`;
  try {
    const response = await fetch(gateway + path, {
      method, headers, credentials: "include", body: body === undefined ? undefined : JSON.stringify(body) });
    let data = null;
    try { data = await response.json(); } catch { data = null; }
    say(`${method} ${path} -> ${response.status}` + (response.headers.get("Retry-After") ? ` (Retry-After: ${response.headers.get("Retry-After")})` : ""));
    return { status: response.status, retryAfter: response.headers.get("Retry-After"), data };
  } catch (error) {
    say(`${method} ${path} -> refused by the browser: ${error.message}`);
    return { status: 0, refused: true };
  }
}
window.ui = { attempt };
"""


@pytest.fixture
async def serve_page(gateway_tls: tuple[ssl.SSLContext, Path]) -> AsyncIterator[Callable[[], Awaitable[int]]]:
    """Start a page server on 127.0.0.1 (TLS, the test CA's certificate for
    127.0.0.1 and localhost); returns its port."""
    runners: list[web.AppRunner] = []

    async def start() -> int:
        async def page(request: web.Request) -> web.Response:
            return web.Response(text=PAGE, content_type="text/html")

        async def script(request: web.Request) -> web.Response:
            return web.Response(text=SCRIPT, content_type="text/javascript")

        app = web.Application()
        app.router.add_get("/", page)
        app.router.add_get("/ui.js", script)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=gateway_tls[0])
        await site.start()
        runners.append(runner)
        return int(runner.addresses[0][1])

    yield start
    for runner in runners:
        await runner.cleanup()


async def open_page(browser: Browser, watched: Watched, origin: str, gateway: Any) -> Page:
    page = await new_page(browser, watched)
    await page.goto(f"{origin}/?gateway={str(gateway.make_url('')).rstrip('/')}")
    await page.wait_for_function("() => window.ui !== undefined")
    return page


async def call(page: Page, method: str, path: str, **options: Any) -> dict[str, Any]:
    result: dict[str, Any] = await page.evaluate("([m, p, o]) => window.ui.attempt(m, p, o)", [method, path, options])
    return result


async def registered(gateway: Any) -> str:
    """An account, made without logging in (logins are what the rate limit counts)."""
    email = unique_email()
    response = await gateway.post("/api/v1/auth/register", json={"email": email, "password": PASSWORD})
    assert response.status == 201
    return email


async def test_a_same_site_page_on_an_allowed_origin_uses_cookies_and_csrf(
        make_gateway: Callable[..., Awaitable[Any]], serve_page: Callable[[], Awaitable[int]],
        browser: Browser, watched: Watched, shots: Shots) -> None:
    # Given a page on https://127.0.0.1:<another port>, an allowed origin, and a login limit of 1 a minute
    origin = f"https://127.0.0.1:{await serve_page()}"
    gateway = await make_gateway(GATEWAY_CORS_ORIGINS=origin, GATEWAY_RATE_LOGIN="1/60")
    email = await registered(gateway)
    page = await open_page(browser, watched, origin, gateway)

    # When it logs in with a JSON body (a preflighted request) and credentials
    login = await call(page, "POST", "/api/v1/auth/login", body={"email": email, "password": PASSWORD})
    assert login["status"] == 200
    csrf = login["data"]["csrf_token"]

    # Then the browser keeps the gateway's cookies and sends them from this origin
    me = await call(page, "GET", "/api/v1/me")
    assert (me["status"], me["data"]["email"]) == (200, email)
    # And a cookie write without the CSRF token is refused, with it accepted
    refused = await call(page, "POST", "/api/v1/workspaces/init", body={"tier": "basic"})
    assert refused["status"] == 403, refused
    made = await call(page, "POST", "/api/v1/workspaces/init", body={"tier": "basic"}, csrf=csrf)
    assert made["status"] == 201, made

    # And a 429 tells the page when to retry: Retry-After is readable across origins
    again = await call(page, "POST", "/api/v1/auth/login", body={"email": email, "password": PASSWORD})
    assert again["status"] == 429
    assert again["retryAfter"] is not None and 0 < int(again["retryAfter"]) <= 60
    await shots.take(page, "allowed-same-site")
    assert not watched.csp_violations()


async def test_a_cross_site_allowed_page_gets_no_cookie_and_uses_the_bearer_token(
        make_gateway: Callable[..., Awaitable[Any]], serve_page: Callable[[], Awaitable[int]],
        browser: Browser, watched: Watched, shots: Shots) -> None:
    # Given a page on https://localhost:<port>: allowed by CORS, but another site than 127.0.0.1
    origin = f"https://localhost:{await serve_page()}"
    gateway = await make_gateway(GATEWAY_CORS_ORIGINS=origin)
    email = await registered(gateway)
    page = await open_page(browser, watched, origin, gateway)

    # When it logs in, it can read the answer
    login = await call(page, "POST", "/api/v1/auth/login", body={"email": email, "password": PASSWORD})
    assert login["status"] == 200

    # Then the SameSite=Strict session cookie is not sent from another site
    assert (await call(page, "GET", "/api/v1/me"))["status"] == 401
    # But the token from the login body works as a bearer credential
    me = await call(page, "GET", "/api/v1/me", token=login["data"]["token"])
    assert (me["status"], me["data"]["email"]) == (200, email)
    await shots.take(page, "allowed-cross-site")


async def test_a_page_on_an_origin_not_allowed_is_refused(
        make_gateway: Callable[..., Awaitable[Any]], serve_page: Callable[[], Awaitable[int]], database_url: str,
        browser: Browser, watched: Watched, shots: Shots) -> None:
    # Given two same-site pages, only the first of which is an allowed origin
    allowed = f"https://127.0.0.1:{await serve_page()}"
    other = f"https://127.0.0.1:{await serve_page()}"
    gateway = await make_gateway(GATEWAY_CORS_ORIGINS=allowed)
    email = await registered(gateway)
    page = await open_page(browser, watched, other, gateway)

    # When the page not allowed tries to log in and to read the caller's account
    login = await call(page, "POST", "/api/v1/auth/login", body={"email": email, "password": PASSWORD})
    me = await call(page, "GET", "/api/v1/me")

    # Then the browser refuses both: the preflight is refused, and no answer is readable
    assert login == {"status": 0, "refused": True}
    assert me == {"status": 0, "refused": True}
    # And the login never reached the gateway: it recorded no attempt
    admin = await admin_session(gateway, database_url)
    user_id = (await (await admin.call("GET", "/api/v1/audit?action=Register")).json())[0]["user_id"]
    logins = await (await admin.call("GET", f"/api/v1/audit?action=Login&user_id={user_id}")).json()
    assert logins == []
    await shots.take(page, "refused-origin")
