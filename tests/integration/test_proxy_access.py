"""Who the API server sees and who may reach it: always the tenant's
ServiceAccount, the tenant wall before the API server, CSRF for cookie
writes, nobody else's workspace."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.support.gatewayclient import metric, metrics_text, register_and_login, tenant
from tests.support.replicas import tls_session

pytestmark = pytest.mark.cluster


async def test_identity_is_the_tenant_service_account_whatever_the_client_sends(gateway: Any) -> None:
    user, workspace = await tenant(gateway)
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    hostile = {
        "Impersonate-User": "system:admin", "Impersonate-Group": "system:masters",
        "Impersonate-Uid": "0", "Impersonate-Extra-Scopes": "all",
        "X-Remote-User": "system:admin", "X-Remote-Group": "system:masters",
        "Connection": "X-Remote-Extra-Foo", "X-Remote-Extra-Foo": "bar",
        "Cookie": "gw_session=stolen",
    }
    answer = await user.call("POST", f"/k8s/{workspace['id']}/apis/authentication.k8s.io/v1/selfsubjectreviews",
                             json=review, headers=hostile)
    assert answer.status == 201, await answer.text()
    info = (await answer.json())["status"]["userInfo"]
    assert info["username"] == f"system:serviceaccount:{workspace['namespace']}:sa-tenant-admin"
    assert "system:masters" not in info["groups"]


@pytest.mark.parametrize("method, path", [
    ("GET", "/api/v1/namespaces/kube-system/secrets"),
    ("GET", "/api/v1/namespaces/OTHER/configmaps"),
    ("POST", "/api/v1/namespaces/OTHER/configmaps"),
    ("GET", "/api/v1/nodes"),
    ("GET", "/api/v1/pods"),
    ("DELETE", "/api/v1/namespaces/OWN"),
    ("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"),
    ("GET", "/api/v1/namespaces/OWN/../kube-system/secrets"),
    ("GET", "/api/v1/namespaces/OWN%2F..%2Fkube-system/secrets"),
    ("GET", "/api/v1/namespaces/OWN/configmaps/%2e%2e/%2e%2e/kube-system"),
    ("GET", "//api/v1/namespaces/kube-system/secrets"),
    ("GET", "/api/v1/watch/namespaces/kube-system/secrets"),
    ("GET", "/logs/"),
    ("GET", "/debug/pprof/"),
])
async def test_tenant_wall_refuses_before_the_api_server(gateway: Any, method: str, path: str) -> None:
    user, workspace = await tenant(gateway)
    other = f"tenant-{uuid.uuid4()}"
    path = path.replace("OWN", workspace["namespace"]).replace("OTHER", other)
    url = gateway.make_url(f"/k8s/{workspace['id']}").with_path(f"/k8s/{workspace['id']}{path}", encoded=True)
    answer = await gateway.session.request(method, url, headers=user.bearer, json={} if method == "POST" else None)
    assert answer.status in (403, 404), await answer.text()
    assert "error" in await answer.json()
    # Nothing was sent upstream: no tenant token was ever needed.
    assert metric(await metrics_text(gateway), "tenant_gateway_token_requests_total") == 0


async def test_cookie_sessions_need_csrf_for_proxied_writes(gateway: Any) -> None:
    user, workspace = await tenant(gateway)
    path = f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps"
    cookies = {"Cookie": f"gw_session={user.token}; gw_csrf={user.csrf}"}
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    assert (await gateway.get(path, headers=cookies)).status == 200
    assert (await gateway.post(path, json=body, headers=cookies)).status == 403
    ok = await gateway.post(path, json=body, headers={**cookies, "X-CSRF-Token": user.csrf})
    assert ok.status == 201, await ok.text()


async def test_someone_elses_workspace_is_not_found(gateway: Any) -> None:
    _, workspace = await tenant(gateway)
    intruder = await register_and_login(gateway)
    answer = await intruder.call("GET", f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps")
    assert answer.status == 404
    async with tls_session(gateway) as fresh:  # no cookies from earlier logins
        anonymous = await fresh.get(gateway.make_url(f"/k8s/{workspace['id']}/version"))
        assert anonymous.status == 401
