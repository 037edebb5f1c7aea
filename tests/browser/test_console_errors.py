"""Refusals in the console are said in words a person can act on."""

from __future__ import annotations

import re
from typing import Any, Awaitable, Callable

import pytest
from playwright.async_api import Browser, expect

from devstack.cluster import LocalCluster
from tests.support.browser import Shots, Watched, new_page, sign_in
from tests.support.gatewayclient import PASSWORD, admin_session, register_and_login, unique_email

pytestmark = [pytest.mark.cluster, pytest.mark.browser]


async def test_a_429_at_sign_in_says_when_to_retry(cluster: LocalCluster, make_gateway: Callable[..., Awaitable[Any]],
                                                   browser: Browser, watched: Watched, shots: Shots) -> None:
    # Given a gateway that allows one login a minute, and a person who signed in and out
    gateway = await make_gateway(GATEWAY_RATE_LOGIN="1/60")
    email = unique_email()
    assert (await gateway.post("/api/v1/auth/register", json={"email": email, "password": PASSWORD})).status == 201
    base = str(gateway.make_url("/"))
    page = await new_page(browser, watched)
    await sign_in(page, base, email)
    await page.get_by_role("button", name="Sign out").click()
    await expect(page.get_by_role("button", name="Sign in", exact=True)).to_be_visible()

    # When they sign in again at once
    await sign_in(page, base, email, expect_success=False)

    # Then the console says when to retry, in words, not JSON
    alert = page.get_by_role("alert")
    await expect(alert).to_have_text(re.compile(r"^Too many requests\. Try again in \d+ seconds?\.$"))
    await expect(page.get_by_role("button", name="Sign in", exact=True)).to_be_visible()
    await shots.take(page, "rate-limited")


async def test_an_ended_session_leads_back_to_sign_in(cluster: LocalCluster, gateway: Any, database_url: str,
                                                      browser: Browser, watched: Watched, shots: Shots) -> None:
    # Given a tenant signed in to the console
    tenant = await register_and_login(gateway)
    await tenant.init()
    base = str(gateway.make_url("/"))
    page = await new_page(browser, watched)
    await sign_in(page, base, tenant.email)

    # When an administrator suspends the user in the console, which ends every session of theirs
    admin = await admin_session(gateway, database_url)
    admin_page = await new_page(browser, watched)
    await sign_in(admin_page, base, admin.email)
    await admin_page.get_by_role("button", name="Users", exact=True).click()
    row = admin_page.get_by_role("row").filter(has_text=tenant.email)
    admin_page.once("dialog", lambda dialog: dialog.accept())
    await row.get_by_role("button", name="Suspend user").click()
    await expect(admin_page.get_by_role("alert")).to_have_text(f"{tenant.email} is suspended.")
    await shots.take(admin_page, "user-suspended")

    # Then the page's next request goes back to sign-in and says why
    await page.get_by_role("button", name="My workspace", exact=True).click()
    await expect(page.get_by_role("button", name="Sign in", exact=True)).to_be_visible()
    await expect(page.get_by_role("alert")).to_have_text("Your session has ended. Sign in again.")
    await shots.take(page, "session-ended")
