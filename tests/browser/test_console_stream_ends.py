"""A watch the gateway ends, when its session ends, ends cleanly in the
browser: Chromium reports no broken chunked body
(net::ERR_INCOMPLETE_CHUNKED_ENCODING), only, at most, the console's own
abort of its requests as it signs out."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from playwright.async_api import Browser, Request, expect

from devstack.cluster import LocalCluster
from tests.support.browser import Shots, Watched, new_page, sign_in
from tests.support.gatewayclient import register_and_login

pytestmark = [pytest.mark.cluster, pytest.mark.browser]

ABORTED = "net::ERR_ABORTED"  # the console's own AbortController, as it leaves a view


async def test_signing_out_with_a_watch_open_leaves_no_network_error(
        cluster: LocalCluster, gateway: Any, browser: Browser, watched: Watched, shots: Shots) -> None:
    # Given a tenant whose console watches their pods
    tenant = await register_and_login(gateway)
    await tenant.init()
    base = str(gateway.make_url("/"))
    page = await new_page(browser, watched)
    failed: list[tuple[str, str]] = []
    ended: list[Request] = []

    def on_failure(request: Request) -> None:
        failed.append((request.url, request.failure or ""))
        ended.append(request)
    page.on("requestfailed", on_failure)
    page.on("requestfinished", lambda request: ended.append(request))
    await sign_in(page, base, tenant.email)
    async with page.expect_response(lambda response: "watch=1" in response.url) as watching:
        await page.get_by_role("button", name="Pods", exact=True).click()
    assert (await watching.value).status == 200
    await expect(page.get_by_role("list", name="Pods")).to_contain_text("No pods yet")

    # When they sign out, which ends the session and so the watch (on every replica)
    await page.get_by_role("button", name="Sign out").click()
    await expect(page.get_by_role("button", name="Sign in", exact=True)).to_be_visible()
    await shots.take(page, "signed-out")

    # Then no request broke off: the watch ended (or the console let it go)
    watch = (await watching.value).request
    async with asyncio.timeout(30):
        while watch not in ended:
            await asyncio.sleep(0.1)
    assert [(url, why) for url, why in failed if why != ABORTED] == []
    assert not [text for text in watched.errors if "ERR_INCOMPLETE_CHUNKED_ENCODING" in text]
