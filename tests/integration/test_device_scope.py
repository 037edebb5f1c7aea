"""What a device sign-in's session may do, against the real cluster: mint
credentials for its user's own workspaces (a real TokenRequest), and nothing
else: not another tenant's workspace even when an administrator approved it,
and not the /k8s/ proxy on either of its paths (the express lane and the
full path decide in the same place, Gate.decide)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.gatewayclient import Session, admin_session, error_of, tenant

pytestmark = pytest.mark.cluster


async def device_session(gateway: Any, approver: Session) -> dict[str, str]:
    started = await (await gateway.post("/api/v1/auth/device", json={"client_name": "test CLI"})).json()
    approved = await approver.call("POST", "/api/v1/auth/device/approve", json={"user_code": started["user_code"]})
    assert approved.status == 204, await approved.text()
    answer = await gateway.post("/api/v1/auth/device/token", json={"device_code": started["device_code"]})
    assert answer.status == 200, await answer.text()
    return {"Authorization": f"Bearer {(await answer.json())['token']}"}


async def test_a_device_session_mints_its_users_credentials_and_nothing_else(gateway: Any) -> None:
    user, workspace = await tenant(gateway)
    _, other = await tenant(gateway)
    bearer = await device_session(gateway, user)

    token = await gateway.get("/api/v1/workspaces/credentials/token", headers=bearer)
    assert token.status == 200, await token.text()
    assert (await token.json())["namespace"] == workspace["namespace"]
    for query in ("", "?format=exec", f"?workspace_id={workspace['id']}"):
        kubeconfig = await gateway.get(f"/api/v1/workspaces/credentials/kubeconfig{query}", headers=bearer)
        assert kubeconfig.status == 200, await kubeconfig.text()
    elsewhere = await gateway.get(f"/api/v1/workspaces/credentials/token?workspace_id={other['id']}", headers=bearer)
    assert await error_of(elsewhere) == (404, "not_found")

    # The proxy, twice: the second GET finds everything cached, as the express lane needs.
    pods = f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/pods"
    for _ in range(2):
        refused = await gateway.get(pods, headers=bearer)
        assert (refused.status, (await refused.json())["error"]["code"]) == (403, "credentials_only")
    assert (await user.call("GET", pods)).status == 200  # the user's own browser session may


async def test_an_admins_device_session_cannot_use_another_tenants_workspace(gateway: Any, database_url: str) -> None:
    _, workspace = await tenant(gateway)
    root = await admin_session(gateway, database_url)
    query = f"/api/v1/workspaces/credentials/token?workspace_id={workspace['id']}"
    assert (await root.call("GET", query)).status == 200  # the admin's own session may, as documented
    bearer = await device_session(gateway, root)
    assert await error_of(await gateway.get(query, headers=bearer)) == (404, "not_found")
