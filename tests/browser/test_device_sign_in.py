"""Device sign-in in a real browser: `tenant-gateway login` prints a link to
/device?user_code=...; a person opens it, signs in and approves the code,
and the command line's poll gets its session. Opening the link and signing
in approve nothing: a link someone else started and sent must not sign
their command line in as the person who opens it."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.async_api import Browser, expect

from devstack.cluster import LocalCluster
from tests.support.browser import Shots, Watched, new_page
from tests.support.gatewayclient import PASSWORD, error_of, register_and_login

pytestmark = [pytest.mark.cluster, pytest.mark.browser]


async def test_the_printed_link_signs_a_command_line_in_after_one_click(
        cluster: LocalCluster, gateway: Any, browser: Browser, watched: Watched, shots: Shots) -> None:
    # Given an account, and a command line that started device sign-in
    person = await register_and_login(gateway)
    started = await (await gateway.post("/api/v1/auth/device", json={})).json()
    assert started["verification_uri_complete"].endswith(f"/device?user_code={started['user_code']}")

    async def poll() -> Any:
        return await gateway.post("/api/v1/auth/device/token", json={"device_code": started["device_code"]})

    # When the person opens the printed link and signs in there
    page = await new_page(browser, watched)
    await page.goto(started["verification_uri_complete"])
    await page.get_by_label("Email").fill(person.email)
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Sign in", exact=True).click()

    # Then the page asks to approve that code, and nothing is approved yet
    await expect(page.get_by_role("heading", name="Sign in a command line")).to_be_visible()
    await expect(page.get_by_label("Code")).to_have_value(started["user_code"])
    await expect(page.get_by_role("region", name="Sign in a command line")).to_contain_text(person.email)
    await shots.take(page, "approve")
    assert await error_of(await poll()) == (400, "authorization_pending")

    # When they approve it
    await page.get_by_role("button", name="Approve").click()
    await expect(page.get_by_role("heading", name="Command line signed in")).to_be_visible()
    await shots.take(page, "approved")
    assert page.url.endswith("/")

    # Then the command line's next poll gets a session of that person
    answer = await poll()
    assert answer.status == 200, await answer.text()
    me = await gateway.get("/api/v1/me", headers={"Authorization": f"Bearer {(await answer.json())['token']}"})
    assert (await me.json())["email"] == person.email
    assert not watched.csp_violations()


async def test_cancel_leaves_the_code_unapproved(cluster: LocalCluster, gateway: Any, browser: Browser,
                                                 watched: Watched) -> None:
    person = await register_and_login(gateway)
    started = await (await gateway.post("/api/v1/auth/device", json={})).json()
    page = await new_page(browser, watched)
    await page.goto(started["verification_uri_complete"])
    await page.get_by_label("Email").fill(person.email)
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Sign in", exact=True).click()
    await page.get_by_role("button", name="Cancel").click()
    await expect(page.get_by_role("heading", name="My workspace")).to_be_visible()
    assert page.url.endswith("/")
    answer = await gateway.post("/api/v1/auth/device/token", json={"device_code": started["device_code"]})
    assert await error_of(answer) == (400, "authorization_pending")
