"""A team workspace's members in the console, in a real browser against the
real gateway, cluster and PostgreSQL: its admin invites, changes a role and
removes a member; a member of several workspaces picks one in the switcher,
reads the members without being able to change them, and downloads the
kubeconfig of the workspace picked.

Invitations become memberships only at a single sign-on, so the second
member (an account with a password) is made one by inserting the
membership with provisioning.db.members.add_member, as test setup.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from playwright.async_api import Browser, Dialog, expect

from devstack.cluster import LocalCluster
from provisioning import roles
from provisioning.db import members as member_rows
from provisioning.db.pool import Database
from provisioning.models import AuditEvent
from tests.support.browser import Shots, Watched, new_page, sign_in
from tests.support.gatewayclient import Session, register_and_login, unique_email

pytestmark = [pytest.mark.cluster, pytest.mark.browser]


async def roster(owner: Session, workspace_id: str) -> dict[str, Any]:
    response = await owner.call("GET", f"/api/v1/workspaces/{workspace_id}/members")
    assert response.status == 200, await response.text()
    return dict(await response.json())


def by_email(found: dict[str, Any], email: str) -> dict[str, Any] | None:
    return next((m for m in found["members"] if m["email"] == email), None)


async def test_an_admin_manages_members_and_a_member_reads_them(
        cluster: LocalCluster, gateway: Any, database_url: str, browser: Browser, shots: Shots, watched: Watched,
        tmp_path: Path) -> None:
    # Given an owner's workspace, and a second person with a workspace of their own
    owner = await register_and_login(gateway)
    shared = await owner.init()
    member = await register_and_login(gateway)
    own = await member.init()
    # ... who is an edit member of the owner's workspace (test setup: invitations need SSO)
    db = await Database.connect(database_url, min_size=1, max_size=1)
    try:
        async with db.transaction() as connection:
            added = await member_rows.add_member(
                connection, uuid.UUID(shared["id"]), uuid.UUID(member.user_id), "edit",
                roles.member_account(member.user_id, owner=False), uuid.UUID(owner.user_id),
                AuditEvent("AddMember", uuid.UUID(owner.user_id), uuid.UUID(shared["id"]), None,
                           {"member": member.user_id, "role": "edit", "via": "test setup"}))
        assert added is not None
        base = str(gateway.make_url("/"))

        # When the member signs in, they pick the shared workspace in the switcher
        member_page = await new_page(browser, watched)
        await sign_in(member_page, base, member.email)
        picker = member_page.get_by_label("Workspace", exact=True)
        await expect(picker).to_have_value(own["id"])
        await picker.select_option(shared["id"])
        await expect(member_page.locator("dl.facts")).to_contain_text(shared["namespace"])
        await expect(member_page.locator("dl.facts")).to_contain_text("edit: Creates and changes workloads")

        # Then the kubeconfig downloaded is the shared workspace's, with the member's own account
        async with member_page.expect_download() as downloading:
            await member_page.get_by_role("button", name="Download kubeconfig").click()
        saved = tmp_path / "kubeconfig.yaml"
        await (await downloading.value).save_as(saved)
        config = yaml.safe_load(saved.read_text())
        assert config["contexts"][0]["context"]["namespace"] == shared["namespace"]
        assert config["users"][0]["name"] == f"member-{member.user_id}"

        # And the members read-only: every role in words, no forms, no buttons but Leave
        await member_page.get_by_role("button", name="Members", exact=True).click()
        table = member_page.get_by_role("table", name="Members")
        await expect(table).to_contain_text(owner.email)
        await expect(table).to_contain_text(f"{member.email} (you)")
        await expect(member_page.get_by_label("Roles")).to_contain_text("Reads the namespace's objects")
        await expect(table.get_by_role("combobox")).to_have_count(0)
        await expect(table.get_by_role("button")).to_have_text(["Leave"])
        await expect(member_page.get_by_role("button", name="Invite")).to_have_count(0)
        await shots.take(member_page, "member-reads")

        # When the owner, an admin, opens the members and invites an email as view
        owner_page = await new_page(browser, watched)
        await sign_in(owner_page, base, owner.email)
        await expect(owner_page.get_by_label("Workspace", exact=True)).to_be_hidden()
        await owner_page.get_by_role("button", name="Members", exact=True).click()
        invited = unique_email()
        await owner_page.get_by_role("textbox", name="Email").fill(invited)
        await owner_page.get_by_role("combobox", name="Role", exact=True).select_option("view")
        await owner_page.get_by_role("button", name="Invite").click()
        await expect(owner_page.get_by_role("alert")).to_have_text(f"{invited} is invited as view.")
        rows = owner_page.get_by_role("table", name="Members").get_by_role("row")
        await expect(rows.filter(has_text=invited)).to_contain_text("invited")
        # Then the API lists the invitation
        assert {"role": "view", "status": "invited"}.items() <= (by_email(await roster(owner, shared["id"]), invited)
                                                                 or {}).items()
        await shots.take(owner_page, "invited")

        # When the owner changes the member's role to view
        await owner_page.get_by_label(f"Role of {member.email}").select_option("view")
        await expect(owner_page.get_by_role("alert")).to_contain_text(f"{member.email} is now view: Reads")
        # Then the API and the database have the new role
        assert (by_email(await roster(owner, shared["id"]), member.email) or {})["role"] == "view"
        row = await member_rows.membership(db, uuid.UUID(shared["id"]), uuid.UUID(member.user_id))
        assert row is not None and row.role == "view"
        await shots.take(owner_page, "role-changed")

        # When the owner cancels the invitation, and removes the member, confirming it
        owner_page.once("dialog", lambda dialog: dialog.accept())
        await rows.filter(has_text=invited).get_by_role("button", name="Cancel invitation").click()
        await expect(rows.filter(has_text=invited)).to_have_count(0)
        questions: list[str] = []

        async def confirm(dialog: Dialog) -> None:
            questions.append(dialog.message)
            await dialog.accept()

        owner_page.once("dialog", confirm)
        await rows.filter(has_text=member.email).get_by_role("button", name="Remove").click()
        await expect(owner_page.get_by_role("alert")).to_have_text(f"{member.email} is no longer a member.")
        await expect(rows.filter(has_text=member.email)).to_have_count(0)
        assert "credentials" in questions[0]
        # Then neither the API nor the database knows them as members any more
        found = await roster(owner, shared["id"])
        assert by_email(found, member.email) is None and by_email(found, invited) is None
        assert await member_rows.membership(db, uuid.UUID(shared["id"]), uuid.UUID(member.user_id)) is None
        await shots.take(owner_page, "removed")

        # And the member's console, reloaded, has only their own workspace: no switcher
        await member_page.reload()
        await expect(member_page.get_by_role("button", name="Sign out")).to_be_visible()
        await expect(member_page.locator("dl.facts")).to_contain_text(own["namespace"])
        await expect(member_page.get_by_label("Workspace", exact=True)).to_be_hidden()
        assert not watched.csp_violations()
    finally:
        await db.close()


async def test_member_paths_and_who_manages(cluster: LocalCluster, gateway: Any, browser: Browser,
                                            watched: Watched) -> None:
    # The pure rules of the members view, in the browser that runs it: a group named like a path
    # and an email with a plus reach the gateway as one path segment each
    page = await new_page(browser, watched)
    await page.goto(str(gateway.make_url("/")))
    found = await page.evaluate("""async () => {
        const { memberPath, mayManage, roleSentence } = await import("/console/members.js");
        return [
            memberPath("w"), memberPath("w", { userId: "u" }), memberPath("w", { email: "a+b@x.test" }),
            memberPath("w", { provider: "corp", group: "/devs/team a" }),
            mayManage({ role: "admin" }, { is_admin: false }), mayManage({ role: "edit" }, { is_admin: false }),
            mayManage({ role: "view" }, { is_admin: true }),
            roleSentence("view", [{ role: "view", description: "Reads." }]), roleSentence("odd", []),
        ];
    }""")
    assert found == [
        "/api/v1/workspaces/w/members", "/api/v1/workspaces/w/members/u",
        "/api/v1/workspaces/w/invitations/a%2Bb%40x.test", "/api/v1/workspaces/w/groups/corp/%2Fdevs%2Fteam%20a",
        True, False, True, "view: Reads.", "odd",
    ]
