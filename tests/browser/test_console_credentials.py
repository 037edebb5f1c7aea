"""Issued credentials and the activity timeline in the console, in a real
browser against the real gateway, cluster and PostgreSQL: a person downloads
two kubeconfigs, sees both live, revokes one (confirming it) and the list
and the API say it is revoked while the other stays live; the workspace's
activity lists each issuance under the person's email, ten rows a page,
and Older reaches the oldest row. An administrator's audit view names people
by email, filters by email, namespace and action, and pages with Older."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import yaml
from playwright.async_api import Browser, Dialog, expect

from devstack.cluster import LocalCluster
from tests.support.browser import Shots, Watched, new_page, sign_in
from tests.support.gatewayclient import Session, admin_session, register_and_login

pytestmark = [pytest.mark.cluster, pytest.mark.browser]


async def credentials_of(person: Session) -> list[dict[str, Any]]:
    response = await person.call("GET", "/api/v1/credentials")
    assert response.status == 200, await response.text()
    return list(await response.json())


async def test_two_kubeconfigs_one_revoked_in_the_console_and_the_activity_paged(
        cluster: LocalCluster, gateway: Any, browser: Browser, shots: Shots, watched: Watched, tmp_path: Path) -> None:
    # Given a person with a workspace, signed in to the console
    person = await register_and_login(gateway)
    workspace = await person.init()
    page = await new_page(browser, watched)
    await sign_in(page, str(gateway.make_url("/")), person.email)

    # When they download two kubeconfigs
    for number in range(2):
        async with page.expect_download() as downloading:
            await page.get_by_role("button", name="Download kubeconfig").click()
        saved = tmp_path / f"kubeconfig-{number}.yaml"
        await (await downloading.value).save_as(saved)
        assert yaml.safe_load(saved.read_text())["contexts"][0]["context"]["namespace"] == workspace["namespace"]
        await expect(page.get_by_role("alert")).to_contain_text("kubeconfig.yaml downloaded")
    issued = await credentials_of(person)
    assert [c["kind"] for c in issued] == ["kubeconfig", "kubeconfig"]
    kept, revoked = issued  # newest first: the older one is revoked

    # Then the Credentials view lists both as live, each with its address and user agent
    await page.get_by_role("button", name="Credentials", exact=True).click()
    mine = page.get_by_role("table", name="Your credentials", exact=True)
    rows = mine.locator("tbody tr")
    await expect(rows).to_have_count(2)
    for credential in issued:
        row = mine.locator(f'tr[data-credential="{credential["id"]}"]')
        await expect(row).to_contain_text("live")
        await expect(row).to_contain_text(workspace["namespace"])
        await expect(row).to_contain_text(credential["ip_address"])
        await expect(row).to_contain_text("Chrome")  # the browser's user agent, as the gateway recorded it
    # And, as the workspace's admin, everyone's in it, held by the person's email
    everyone = page.get_by_role("table", name=f"Everyone's credentials in {workspace['namespace']}")
    await expect(everyone.locator("tbody tr")).to_have_count(2)
    await expect(everyone).to_contain_text(f"{person.email} (you)")
    await shots.take(page, "two-live")

    # When they revoke the older one, confirming it
    questions: list[str] = []

    async def confirm(dialog: Dialog) -> None:
        questions.append(dialog.message)
        await dialog.accept()

    page.once("dialog", confirm)
    await mine.locator(f'tr[data-credential="{revoked["id"]}"]').get_by_role("button", name="Revoke").click()
    await expect(page.get_by_role("alert")).to_contain_text(f"The kubeconfig {revoked['id'][:8]} is revoked")
    assert "API server refuses it" in questions[0] and revoked["id"][:8] in questions[0]

    # Then the list shows it revoked, without a Revoke button, after the live one
    gone = mine.locator(f'tr[data-credential="{revoked["id"]}"]')
    await expect(gone).to_contain_text("revoked")
    await expect(gone.get_by_role("button")).to_have_count(0)
    await expect(mine.locator(f'tr[data-credential="{kept["id"]}"]')).to_contain_text("live")
    await expect(rows.first).to_have_attribute("data-credential", kept["id"])
    await expect(everyone.locator(f'tr[data-credential="{revoked["id"]}"]')).to_contain_text("revoked")
    await shots.take(page, "one-revoked")
    # And the API says so
    after = {c["id"]: c for c in await credentials_of(person)}
    assert after[revoked["id"]]["revoked_at"] is not None
    assert after[kept["id"]]["revoked_at"] is None

    # Given eight more issuances, through the API: more of the person's rows than a page of ten
    for _ in range(8):
        answer = await person.call("GET", f"/api/v1/workspaces/credentials/kubeconfig?workspace_id={workspace['id']}")
        assert answer.status == 200, await answer.text()

    # When they open the workspace's activity, their own, ten a page
    await page.get_by_role("button", name="Activity", exact=True).click()
    await page.get_by_label("Person").select_option(person.user_id)
    await page.get_by_label("Per page").select_option("10")
    timeline = page.get_by_role("table", name="Activity, newest first")
    lines = timeline.locator("tbody tr")
    await expect(lines).to_have_count(10)
    older = page.get_by_role("button", name="Older")
    await expect(older).to_be_visible()
    # Then the newest rows are the issuances, under the person's email
    await expect(lines.first).to_contain_text("IssueKubeconfig")
    await expect(lines.first).to_contain_text(f"{person.email} (you)")
    await shots.take(page, "activity-first-page")

    # When they press Older until there is nothing older
    for _ in range(10):
        if not await older.is_visible():
            break
        shown = await lines.count()
        await older.click()
        await expect(lines).not_to_have_count(shown)
    await expect(older).to_be_hidden()
    await expect(page.get_by_role("status").filter(has_text="No older rows.")).to_be_visible()
    # Then every issuance and the revocation are listed once, the workspace's creation last,
    # exactly the gateway rows the API gives for the person in the workspace
    await expect(lines.filter(has_text="IssueKubeconfig")).to_have_count(10)
    await expect(lines.filter(has_text="RevokeCredential")).to_have_count(1)
    await expect(lines.last).to_contain_text("InitWorkspace")
    query = urlencode({"workspace_id": workspace["id"], "user_id": person.user_id, "limit": "500"})
    everything = await (await person.call("GET", f"/api/v1/activity?{query}")).json()
    gateway_rows = [item for item in everything["items"] if item["source"] == "gateway"]
    await expect(lines.filter(has=page.locator("td:nth-child(2)", has_text="gateway"))).to_have_count(len(gateway_rows))
    await shots.take(page, "activity-all-pages")
    assert not watched.csp_violations()


async def test_the_audit_view_names_people_filters_by_email_and_pages(
        cluster: LocalCluster, gateway: Any, database_url: str, browser: Browser, shots: Shots,
        watched: Watched) -> None:
    # Given a person with a workspace and ten kubeconfigs: thirteen audit rows of theirs
    person = await register_and_login(gateway)
    workspace = await person.init()
    for _ in range(10):
        answer = await person.call("GET", f"/api/v1/workspaces/credentials/kubeconfig?workspace_id={workspace['id']}")
        assert answer.status == 200, await answer.text()
    admin = await admin_session(gateway, database_url)
    page = await new_page(browser, watched)
    await sign_in(page, str(gateway.make_url("/")), admin.email)

    # When an administrator filters the audit log by the person's email, ten a page
    await page.get_by_role("button", name="Audit", exact=True).click()
    await page.get_by_role("textbox", name="Email").fill(person.email.upper())
    await page.get_by_label("Per page").select_option("10")
    await page.get_by_role("button", name="Filter").click()
    log = page.get_by_role("table", name="Audit log, newest first")
    lines = log.locator("tbody tr")
    await expect(lines).to_have_count(10)
    # Then the rows name the person by email and the workspace by namespace
    await expect(lines.first).to_contain_text(person.email)
    await expect(lines.first).to_contain_text(workspace["namespace"])
    # And Older reaches the rest, the registration last, and no more
    await page.get_by_role("button", name="Older").click()
    await expect(lines).to_have_count(13)
    await expect(lines.last).to_contain_text("Register")
    await expect(page.get_by_role("button", name="Older")).to_be_hidden()
    await expect(page.get_by_role("status").filter(has_text="No older rows.")).to_be_visible()
    await shots.take(page, "audit-paged")

    # When they filter by namespace and action as well: exactly a page, nothing older
    await page.get_by_label("Namespace").select_option(workspace["id"])
    await page.get_by_label("Action").select_option("IssueKubeconfig")
    await page.get_by_role("button", name="Filter").click()
    await expect(lines).to_have_count(10)
    await expect(lines.filter(has_text="IssueKubeconfig")).to_have_count(10)
    await expect(page.get_by_role("button", name="Older")).to_be_hidden()
    assert not watched.csp_violations()
