"""Given a full session of use, when everything the gateway logged is read,
then no password, session token, cookie, CSRF token or Kubernetes token
appears in it, at any level, in any field."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import yaml

from proxy.http.logs import JsonFormatter
from tests.support.gatewayclient import PASSWORD, admin_session, register_and_login

pytestmark = pytest.mark.cluster


async def test_nothing_secret_is_logged(make_gateway: Any, database_url: str,
                                        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    # Started here, so its own lines from start-up on are read too.
    gateway = await make_gateway()
    user = await register_and_login(gateway)
    workspace = await user.init()
    kube_token = yaml.safe_load(await user.kubeconfig())["users"][0]["user"]["token"]
    cookies = {"Cookie": f"gw_session={user.token}; gw_csrf={user.csrf}"}
    await gateway.get(f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps", headers=cookies)
    await gateway.post("/api/v1/auth/login", json={"email": user.email, "password": "wrong " + PASSWORD})
    await gateway.get("/api/v1/me", headers={"Authorization": "Bearer " + user.token[:-3] + "xyz"})
    root = await admin_session(gateway, database_url)
    await root.call("POST", f"/api/v1/workspaces/{workspace['id']}/suspend")
    await user.call("GET", f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps")

    formatter = JsonFormatter()
    logged = "\n".join(formatter.format(record) for record in caplog.records)
    assert caplog.records, "expected some log lines to inspect"
    for secret in (PASSWORD, user.token, user.csrf, root.token, kube_token, kube_token.split(".")[2]):
        if secret in logged:
            at = logged.index(secret)
            raise AssertionError("secret logged: " + logged[max(0, at - 400):at][:400])
