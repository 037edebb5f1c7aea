"""People of a team signing in through the organisations' Keycloak realms,
and what the gateway and the API server then let them do."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from devstack.cluster import LocalCluster
from tests.support.gatewayclient import Session
from tests.support.kubeclients import kubectl
from tests.support.signin_browser import new_browser


async def bearer_session(gateway: Any, keycloak: Any, realm: str, username: str) -> Session:
    """`username` of `realm` signed in with a fresh ID token as bearer (the
    gateway admits it, and evaluates invitations and groups, at its first use)."""
    token = (await asyncio.to_thread(keycloak.password_grant, realm, username))["id_token"]
    return await _session(gateway, token)


async def browser_session(gateway: Any, keycloak: Any, realm: str, username: str) -> Session:
    """`username` of `realm` signed in through Keycloak's login form and the
    gateway's callback; the session cookie's token used as a bearer."""
    browser = new_browser(gateway, keycloak)
    try:
        landed = await browser.sign_in(realm, username)
        assert landed.status == 302, await landed.text()
        token = browser.cookie("gw_session")
        assert token
    finally:
        await browser.close()
    return await _session(gateway, token)


async def _session(gateway: Any, token: str) -> Session:
    answer = await gateway.get("/api/v1/me", headers={"Authorization": f"Bearer {token}"})
    assert answer.status == 200, await answer.text()
    me = await answer.json()
    return Session(gateway, me["id"], me["email"], token, "")


async def roles_of(session: Session) -> dict[str, str]:
    """Workspace id -> the caller's role, as GET /api/v1/workspaces lists them."""
    answer = await session.call("GET", "/api/v1/workspaces")
    assert answer.status == 200, await answer.text()
    return {w["id"]: w["role"] for w in await answer.json()}


async def kubeconfig_file(session: Session, workspace_id: str, path: Path) -> Path:
    path.write_text(await session.kubeconfig(workspace_id))
    return path


async def refused_within(cluster: LocalCluster, config: Path, namespace: str, seconds: float) -> float:
    """How long until the API server refuses the kubeconfig (401 or 403);
    fails the test after `seconds`."""
    started = time.monotonic()
    while True:
        listed = await asyncio.to_thread(kubectl, cluster, config, "-n", namespace, "get", "configmaps")
        if listed.returncode != 0:
            text = listed.stderr.lower()
            assert "unauthorized" in text or "forbidden" in text, listed.stderr
            return time.monotonic() - started
        assert time.monotonic() - started < seconds, "the API server still takes the kubeconfig"
        await asyncio.sleep(0.2)
