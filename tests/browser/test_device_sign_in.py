"""Device sign-in in a real browser, and the phishing it must not fall for.

`tenant-gateway login` prints a link to /device and a code; the person opens
it, signs in, types the code, is shown what asked for it, and approves; the
command line's poll gets a session that can only mint workspace credentials.

The attack (RFC 8628 section 5.4): someone starts a flow on their own machine
and sends its link, with the code in it, to a signed-in victim. The link is
the real console's, so it must do nothing by itself: the code in it is not
filled in, nothing is approved without the code typed, and before approving
the victim is shown the attacker's client name (as its own claim), address
and time. The gateway trusts the loopback proxy here, so the attacker's start
can come from another address (X-Forwarded-For) than the victim's browser.
"""

from __future__ import annotations

from typing import Any

import pytest
from playwright.async_api import Browser, Page, expect

from devstack.cluster import LocalCluster
from tests.support.browser import Shots, Watched, new_page
from tests.support.gatewayclient import PASSWORD, admin_session, error_of, register_and_login

pytestmark = [pytest.mark.cluster, pytest.mark.browser]

ATTACKER_ADDRESS = "203.0.113.66"


@pytest.fixture
async def gateway(make_gateway: Any) -> Any:
    """A gateway behind a proxy on the loopback: the address it forwards is the client's."""
    return await make_gateway(GATEWAY_TRUSTED_PROXIES="127.0.0.1")


async def start(gateway: Any, client_name: str, address: str | None = None) -> dict[str, Any]:
    headers = {"X-Forwarded-For": address} if address else {}
    answer = await gateway.post("/api/v1/auth/device", json={"client_name": client_name}, headers=headers)
    assert answer.status == 200, await answer.text()
    return dict(await answer.json())


async def poll(gateway: Any, started: dict[str, Any]) -> Any:
    return await gateway.post("/api/v1/auth/device/token", json={"device_code": started["device_code"]})


async def sign_in(page: Page, email: str) -> None:
    await page.get_by_label("Email").fill(email)
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Sign in", exact=True).click()


async def test_a_person_types_their_code_checks_what_asked_and_approves(
        cluster: LocalCluster, gateway: Any, browser: Browser, watched: Watched, shots: Shots) -> None:
    # Given an account, and their own command line that started device sign-in
    person = await register_and_login(gateway)
    started = await start(gateway, "tenant-gateway CLI on my-laptop")
    assert "verification_uri_complete" not in started

    # When they open the printed link and sign in there
    page = await new_page(browser, watched)
    await page.goto(started["verification_uri"])
    await sign_in(page, person.email)

    # Then the page asks for the code, empty
    region = page.get_by_role("region", name="Sign in a command line")
    await expect(page.get_by_role("heading", name="Sign in a command line")).to_be_visible()
    await expect(page.get_by_label("Code")).to_have_value("")
    await shots.take(page, "type-the-code")

    # When they type the code from their terminal
    await page.get_by_label("Code").fill(started["user_code"])
    await page.get_by_role("button", name="Continue").click()

    # Then they see what asked, and nothing is approved yet
    facts = page.get_by_role("definition")
    await expect(facts.nth(1)).to_have_text("tenant-gateway CLI on my-laptop")
    await expect(facts.nth(2)).to_have_text("127.0.0.1")
    await expect(region).to_contain_text("own claim")
    await expect(region).to_contain_text(person.email)
    await shots.take(page, "check-what-asked")
    assert await error_of(await poll(gateway, started)) == (400, "authorization_pending")

    # When they approve it
    await page.get_by_role("button", name="Approve").click()
    await expect(page.get_by_role("heading", name="Command line signed in")).to_be_visible()
    await shots.take(page, "approved")
    assert page.url.endswith("/")

    # Then the command line's next poll gets a session, which can only mint credentials
    answer = await poll(gateway, started)
    assert answer.status == 200, await answer.text()
    me = await gateway.get("/api/v1/me", headers={"Authorization": f"Bearer {(await answer.json())['token']}"})
    assert await error_of(me) == (403, "credentials_only")
    assert not watched.csp_violations()


async def test_a_phishing_link_fills_in_nothing_approves_nothing_and_shows_the_attacker(
        cluster: LocalCluster, gateway: Any, database_url: str, browser: Browser, watched: Watched,
        shots: Shots) -> None:
    # Given an attacker's flow, started from their own address under a reassuring name,
    # and a link to the real console with the code in it, as an older gateway printed
    victim = await admin_session(gateway, database_url)
    attack = await start(gateway, "Your IT department", ATTACKER_ADDRESS)
    link = f"{attack['verification_uri']}?user_code={attack['user_code']}"

    # When the victim, an administrator, opens the link and signs in
    page = await new_page(browser, watched)
    await page.goto(link)
    await sign_in(page, victim.email)

    # Then the code is not filled in, the address bar drops it, and nothing is approved
    await expect(page.get_by_role("heading", name="Sign in a command line")).to_be_visible()
    await expect(page.get_by_label("Code")).to_have_value("")
    assert page.url.endswith("/device")
    await shots.take(page, "link-fills-in-nothing")
    assert await error_of(await poll(gateway, attack)) == (400, "authorization_pending")

    # When the attacker talks them into typing the code
    await page.get_by_label("Code").fill(attack["user_code"])
    await page.get_by_role("button", name="Continue").click()

    # Then the page shows the attacker's request for what it is: its name as its own claim,
    # the attacker's address and the time it asked; still nothing is approved
    facts = page.get_by_role("definition")
    await expect(facts.nth(1)).to_have_text("Your IT department")
    await expect(facts.nth(2)).to_have_text(ATTACKER_ADDRESS)
    await expect(facts.nth(3)).to_contain_text("min ago")
    await shots.take(page, "the-attackers-request")
    assert await error_of(await poll(gateway, attack)) == (400, "authorization_pending")

    # And even if the victim approves, the attacker's session is no administrator's
    await page.get_by_role("button", name="Approve").click()
    await expect(page.get_by_role("heading", name="Command line signed in")).to_be_visible()
    stolen = await poll(gateway, attack)
    assert stolen.status == 200, await stolen.text()
    bearer = {"Authorization": f"Bearer {(await stolen.json())['token']}"}
    assert await error_of(await gateway.get("/api/v1/audit", headers=bearer)) == (403, "credentials_only")
    assert await error_of(await gateway.post(f"/api/v1/users/{victim.user_id}/suspend", headers=bearer)) == \
        (403, "credentials_only")
    # The audit log says what was approved, and from where it asked.
    rows = await (await victim.call("GET", f"/api/v1/audit?user_id={victim.user_id}&action=ApproveDevice")).json()
    assert rows[0]["details"]["client_address"] == ATTACKER_ADDRESS
    assert not watched.csp_violations()


async def test_cancel_leaves_the_code_unapproved(cluster: LocalCluster, gateway: Any, browser: Browser,
                                                 watched: Watched) -> None:
    person = await register_and_login(gateway)
    started = await start(gateway, "tenant-gateway CLI on my-laptop")
    page = await new_page(browser, watched)
    await page.goto(started["verification_uri"])
    await sign_in(page, person.email)
    await page.get_by_label("Code").fill(started["user_code"])
    await page.get_by_role("button", name="Continue").click()
    await expect(page.get_by_role("button", name="Approve")).to_be_visible()
    await page.get_by_role("button", name="Cancel").click()
    await expect(page.get_by_role("heading", name="My workspace")).to_be_visible()
    assert page.url.endswith("/")
    assert await error_of(await poll(gateway, started)) == (400, "authorization_pending")


async def test_a_wrong_code_is_said_in_words_and_approves_nothing(
        cluster: LocalCluster, gateway: Any, browser: Browser, watched: Watched) -> None:
    person = await register_and_login(gateway)
    started = await start(gateway, "tenant-gateway CLI on my-laptop")
    page = await new_page(browser, watched)
    await page.goto(started["verification_uri"])
    await sign_in(page, person.email)
    await page.get_by_label("Code").fill("BBBB-BBBB" if started["user_code"] != "BBBB-BBBB" else "CCCC-CCCC")
    await page.get_by_role("button", name="Continue").click()
    await expect(page.get_by_role("alert")).to_contain_text("unknown, used or expired")
    await expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    assert await error_of(await poll(gateway, started)) == (400, "authorization_pending")
