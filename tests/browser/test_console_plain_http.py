"""`make run` serves the console on plain http://127.0.0.1:8080: Chromium
counts loopback as a secure context, so the gateway's Secure cookies are
kept and sent there, and the console works as it does over TLS."""

from __future__ import annotations

from typing import AsyncIterator

import pytest
from aiohttp.test_utils import TestServer
from playwright.async_api import Browser, expect

from devstack.cluster import LocalCluster
from proxy.app import create_app
from proxy.settings import load_settings
from tests.support.browser import Shots, Watched, new_page, sign_in
from tests.support.gatewayclient import PASSWORD, unique_email

pytestmark = [pytest.mark.cluster, pytest.mark.browser]


@pytest.fixture
async def plain_gateway(gateway_env: dict[str, str]) -> AsyncIterator[TestServer]:
    """The gateway as `make run` serves it: no TLS, on 127.0.0.1."""
    app = create_app(load_settings(gateway_env), database_dsn=gateway_env["GATEWAY_DATABASE_URL"])
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield server
    await server.close()


async def test_the_console_works_on_plain_http_loopback(cluster: LocalCluster, plain_gateway: TestServer,
                                                        browser: Browser, watched: Watched, shots: Shots) -> None:
    # Given an account, and the console at http://127.0.0.1:<port>/
    base = str(plain_gateway.make_url("/"))
    email = unique_email()
    page = await new_page(browser, watched)
    await page.goto(base)

    # When a person creates an account and signs in with the console's form
    await page.get_by_label("Email").fill(email)
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Create account").click()

    # Then the session cookie holds: a reload stays signed in, and a write with CSRF works
    await expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    await page.reload()
    await expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    await page.get_by_role("button", name="Create workspace").click()
    await expect(page.get_by_role("button", name="Download kubeconfig")).to_be_visible(timeout=60_000)
    await shots.take(page, "plain-http")
    await page.get_by_role("button", name="Sign out").click()
    await expect(page.get_by_role("button", name="Sign in", exact=True)).to_be_visible()
    await sign_in(page, base, email)
    assert not watched.csp_violations()
