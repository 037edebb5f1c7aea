"""The console in a real browser, against the real gateway, cluster, node
and PostgreSQL: what a tenant and an administrator do with it."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from playwright.async_api import Browser, expect

from devstack.cluster import LocalCluster
from tests.support.browser import Shots, Watched, new_page, sign_in
from tests.support.gatewayclient import admin_session, register_and_login
from tests.support.pods import pod_manifest

pytestmark = [pytest.mark.cluster, pytest.mark.browser]


async def test_tenant_journey(cluster: LocalCluster, gateway: Any, browser: Browser, shots: Shots,
                              watched: Watched, tmp_path: Path) -> None:
    # Given an account, and the console opened at the gateway's root
    tenant = await register_and_login(gateway)
    base = str(gateway.make_url("/"))
    page = await new_page(browser, watched)
    await page.goto(base)
    await expect(page.get_by_role("button", name="Sign in", exact=True)).to_be_visible()
    await shots.take(page, "sign-in")

    # When the tenant signs in and creates the workspace
    await sign_in(page, base, tenant.email)
    await shots.take(page, "no-workspace")
    await page.get_by_role("button", name="Create workspace").click()
    await expect(page.get_by_role("button", name="Download kubeconfig")).to_be_visible(timeout=60_000)
    await expect(page.get_by_role("table", name="Quota use")).to_contain_text("requests.cpu")
    await shots.take(page, "workspace")

    # Then the kubeconfig downloads, with the tenant's namespace and a token
    async with page.expect_download() as downloading:
        await page.get_by_role("button", name="Download kubeconfig").click()
    saved = tmp_path / "kubeconfig.yaml"
    await (await downloading.value).save_as(saved)
    config = yaml.safe_load(saved.read_text())
    namespace = config["contexts"][0]["context"]["namespace"]
    assert namespace.startswith("tenant-") and config["users"][0]["user"]["token"]

    # When a pod is created from a manifest, it appears in the live list and runs
    await page.get_by_role("button", name="Pods", exact=True).click()
    pods = page.get_by_role("list", name="Pods")
    await expect(pods).to_contain_text("No pods yet")
    name = f"web-{uuid.uuid4().hex[:6]}"
    manifest = pod_manifest(name, "i=0; while true; do echo tick-$i; i=$((i+1)); sleep 1; done")
    await page.get_by_label("Manifest (JSON)").fill(json.dumps(manifest))
    await page.get_by_role("button", name="Create", exact=True).click()
    row = pods.get_by_role("listitem").filter(has_text=name)
    await expect(row).to_be_visible()
    await expect(row).to_contain_text("Running", timeout=90_000)
    await shots.take(page, "pod-running")

    # Then its log is followed: lines written after it was opened arrive
    await row.get_by_role("button", name="Logs").click()
    log = page.get_by_label(f"Logs of {name}")
    await expect(log).to_contain_text("tick-2", timeout=30_000)
    seen = await log.inner_text()
    later = f"tick-{max(int(t) for t in seen.replace('tick-', ' ').split() if t.isdigit()) + 2}"
    await expect(log).to_contain_text(later, timeout=30_000)
    await shots.take(page, "logs")

    # And a command typed into its terminal answers; the terminal's size reached the TTY
    await row.get_by_role("button", name="Terminal").click()
    await expect(page.get_by_role("status")).to_contain_text("Connected", timeout=30_000)
    command = page.get_by_label("Command")
    await command.fill("echo answer-$((6*7))")
    await command.press("Enter")
    output = page.get_by_label(f"Terminal output of {name}")
    await expect(output).to_contain_text("answer-42", timeout=30_000)
    await command.fill("echo size=$(stty size)")
    await command.press("Enter")
    await expect(output).to_contain_text(re.compile(r"size=\d+ \d+"), timeout=30_000)
    await shots.take(page, "terminal")

    # When the tenant signs out, the console is back at sign-in, also after a reload
    await page.get_by_role("button", name="Sign out").click()
    await expect(page.get_by_role("button", name="Sign in", exact=True)).to_be_visible()
    await page.reload()
    await expect(page.get_by_role("button", name="Sign in", exact=True)).to_be_visible()
    await shots.take(page, "signed-out")
    assert not watched.csp_violations()


async def test_admin_suspends_a_tenant_whose_page_is_open(cluster: LocalCluster, gateway: Any, database_url: str,
                                                          browser: Browser, shots: Shots, watched: Watched) -> None:
    # Given a tenant watching their pods in the console
    tenant = await register_and_login(gateway)
    workspace = await tenant.init()
    admin = await admin_session(gateway, database_url)
    base = str(gateway.make_url("/"))
    tenant_page = await new_page(browser, watched)
    await sign_in(tenant_page, base, tenant.email)
    await tenant_page.get_by_role("button", name="Pods", exact=True).click()
    await expect(tenant_page.get_by_role("list", name="Pods")).to_contain_text("No pods yet")

    # When an administrator suspends the workspace from the console, confirming it
    admin_page = await new_page(browser, watched)
    await sign_in(admin_page, base, admin.email)
    await admin_page.get_by_role("button", name="Workspaces", exact=True).click()
    row = admin_page.get_by_role("row").filter(has_text=workspace["namespace"])
    await expect(row).to_contain_text("provisioned")
    await shots.take(admin_page, "admin-workspaces")
    questions: list[str] = []
    admin_page.once("dialog", lambda dialog: (questions.append(dialog.message), dialog.accept())[1])  # type: ignore[call-overload, func-returns-value]
    await row.get_by_role("button", name="Suspend", exact=True).click()
    await expect(row).to_contain_text("suspended", timeout=60_000)
    assert "loses access" in questions[0]
    await shots.take(admin_page, "admin-suspended")

    # Then the tenant's open page loses access within 5 s, and says why
    await expect(tenant_page.get_by_role("alert")).to_contain_text("suspended by an administrator", timeout=5_000)
    await shots.take(tenant_page, "tenant-suspended")

    # And the audit log, filtered, shows the suspension; the tenant is among the users
    await admin_page.get_by_role("button", name="Audit", exact=True).click()
    await admin_page.get_by_label("Action").select_option("SuspendWorkspace")
    await admin_page.get_by_role("button", name="Filter").click()
    audit = admin_page.get_by_role("table", name="Audit log, newest first")
    await expect(audit).to_contain_text(workspace["namespace"])  # workspaces are named by namespace
    await expect(audit).to_contain_text(admin.email)  # people by email
    await expect(audit).not_to_contain_text("InitWorkspace")
    await shots.take(admin_page, "admin-audit")
    await admin_page.get_by_role("button", name="Users", exact=True).click()
    await expect(admin_page.get_by_role("table", name="Registered users")).to_contain_text(tenant.email)

    # When the administrator resumes the workspace, the tenant's open page has its pods back
    await admin_page.get_by_role("button", name="Workspaces", exact=True).click()
    admin_page.once("dialog", lambda dialog: dialog.accept())
    await row.get_by_role("button", name="Resume", exact=True).click()
    await expect(row).to_contain_text("provisioned", timeout=90_000)
    await expect(tenant_page.get_by_role("list", name="Pods")).to_contain_text("No pods yet", timeout=30_000)
    await expect(tenant_page.get_by_role("alert")).to_be_hidden()
    await admin_page.get_by_role("button", name="Sign out").click()
    await expect(admin_page.get_by_role("button", name="Sign in", exact=True)).to_be_visible()
    assert not watched.csp_violations()
