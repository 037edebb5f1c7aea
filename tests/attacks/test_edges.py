"""Given a client that abuses the gateway's own routes (a cross-site form, an
overlong field, a flood of credentials or streams, a forged forwarding
header, a tenant's pod reading the gateway's metrics), then the answer is
the contract's 4xx, never a 500, and nobody else's requests are harmed."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import pytest
from multidict import CIMultiDict

from proxy import keys

from tests.gatewayclient import PASSWORD, admin_session, register_and_login, unique_email
from tests.integration.test_accounts_and_inputs import error_of
from tests.integration.test_proxy import metrics_text, open_watch, tenant

pytestmark = pytest.mark.cluster


@pytest.mark.parametrize("content_type", [
    "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None,
    "application/json; charset=latin1",
])
async def test_json_routes_take_application_json_only(gateway: Any, content_type: str | None) -> None:
    """A cross-site form can post text/plain that parses as JSON, without a
    preflight: a login CSRF would sign the victim into the attacker's account."""
    email = unique_email()
    body = f'{{"email": "{email}", "password": "{PASSWORD}"}}'.encode()
    headers = {"Content-Type": content_type} if content_type else {}
    for path in ("/api/v1/auth/register", "/api/v1/auth/login"):
        answer = await gateway.post(path, data=body, headers=headers)
        assert await error_of(answer) == (415, "unsupported_media_type"), path
    user = await register_and_login(gateway)
    answer = await user.call("POST", "/api/v1/workspaces/init", data=b'{"tier": "basic"}', headers=headers)
    assert await error_of(answer) == (415, "unsupported_media_type")


async def test_overlong_strings_are_400_and_never_logged_as_errors(gateway: Any, database_url: str,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    long = "a" * 4000
    for path, body in (("/api/v1/auth/login", {"email": long + "@example.test", "password": PASSWORD}),
                       ("/api/v1/auth/login", {"email": "x@example.test", "password": long}),
                       ("/api/v1/auth/register", {"email": long + "@example.test", "password": PASSWORD})):
        status, _code = await error_of(await gateway.post(path, json=body))
        assert status == 400, path
    user = await register_and_login(gateway)
    assert (await error_of(await user.call("POST", "/api/v1/workspaces/init", json={"tier": long})))[0] == 400
    root = await admin_session(gateway, database_url)
    assert (await error_of(await root.call("GET", f"/api/v1/audit?action={long}")))[0] == 400
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]


async def test_kubeconfig_issuance_is_rate_limited_per_user(make_gateway: Any) -> None:
    gateway = await make_gateway(GATEWAY_RATE_KUBECONFIG="2/3600")
    user, _workspace = await tenant(gateway)
    for _ in range(2):
        await user.kubeconfig()
    refused = await user.call("GET", "/api/v1/workspaces/credentials/kubeconfig")
    assert await error_of(refused) == (429, "rate_limited")
    assert int(refused.headers["Retry-After"]) > 0
    other, _ = await tenant(gateway)  # per user: another user is not held back
    await other.kubeconfig()


async def test_one_stream_too_many_is_429_and_cuts_nothing(make_gateway: Any) -> None:
    gateway = await make_gateway(GATEWAY_MAX_STREAMS_PER_WORKSPACE="2")
    user, workspace = await tenant(gateway)
    first, second = await open_watch(gateway, user, workspace), await open_watch(gateway, user, workspace)
    try:
        path = f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps?watch=true"
        refused = await user.call("GET", path)
        assert refused.status == 429 and int(refused.headers["Retry-After"]) > 0
        assert (await refused.json())["error"]["code"] == "rate_limited"
        # Short requests are not streams; the open watches still deliver.
        made = await user.call("POST", f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps",
                               json={"metadata": {"name": "seen"}})
        assert made.status == 201
        for stream in (first, second):  # after any ADDED for what was there before (kube-root-ca.crt)
            while b'"seen"' not in (line := await asyncio.wait_for(stream.content.readline(), 30)):
                assert line, "the watch ended before delivering the new ConfigMap"
        # Another workspace has slots of its own.
        other_user, other = await tenant(gateway)
        third = await open_watch(gateway, other_user, other)
        third.close()
        await third._test_session.close()  # type: ignore[attr-defined]
    finally:
        for stream in (first, second):
            stream.close()
            await stream._test_session.close()  # type: ignore[attr-defined]


async def audited_login_address(gateway: Any, database_url: str, email: str, headers: CIMultiDict[str]) -> str:
    answer = await gateway.post("/api/v1/auth/login", json={"email": email, "password": PASSWORD}, headers=headers)
    assert answer.status == 200, await answer.text()
    user_id = (await answer.json())["user"]["id"]
    root = await admin_session(gateway, database_url)
    rows = await (await root.call("GET", f"/api/v1/audit?user_id={user_id}&action=Login")).json()
    return str(rows[0]["ip_address"])


async def test_forwarded_for_in_several_lines_is_one_list(make_gateway: Any, database_url: str) -> None:
    """Behind a proxy that appends its own X-Forwarded-For line, the client's
    forged first line must not be believed."""
    gateway = await make_gateway(GATEWAY_TRUSTED_PROXIES="127.0.0.1")
    user = await register_and_login(gateway)
    forged = CIMultiDict([("X-Forwarded-For", "6.6.6.6"), ("X-Forwarded-For", "198.51.100.1")])
    assert await audited_login_address(gateway, database_url, user.email, forged) == "198.51.100.1"


async def test_per_address_limits_count_an_ipv6_slash_64_as_one_address(make_gateway: Any) -> None:
    gateway = await make_gateway(GATEWAY_TRUSTED_PROXIES="127.0.0.1", GATEWAY_RATE_REGISTER="2/3600")
    for host in ("2001:db8:7:7::1", "2001:db8:7:7::2"):
        answer = await gateway.post("/api/v1/auth/register", json={"email": unique_email(), "password": PASSWORD},
                                    headers={"X-Forwarded-For": host})
        assert answer.status == 201
    same_subscriber = await gateway.post("/api/v1/auth/register", json={"email": unique_email(), "password": PASSWORD},
                                         headers={"X-Forwarded-For": "2001:db8:7:7:dead:beef:0:1"})
    assert await error_of(same_subscriber) == (429, "rate_limited")
    elsewhere = await gateway.post("/api/v1/auth/register", json={"email": unique_email(), "password": PASSWORD},
                                   headers={"X-Forwarded-For": "2001:db8:7:8::1"})
    assert elsewhere.status == 201



async def test_a_tenant_reaching_the_gateway_cannot_read_its_metrics(gateway: Any) -> None:
    """What a tenant's pod reaches is the public listener; the metrics (every
    tenant's request counts, streams and token results) are not there."""
    user, workspace = await tenant(gateway)
    await user.call("GET", f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps")
    for path in ("/metrics", "/metrics/", "/Metrics", "/k8s/metrics"):
        answer = await gateway.get(path)
        assert answer.status == 404, path
        assert "tenant_gateway_" not in await answer.text(), path
    # The metrics listener has them, and nothing else.
    assert "tenant_gateway_requests_total" in await metrics_text(gateway)
    host, port = gateway.app[keys.METRICS_ADDRESS]
    async with aiohttp.ClientSession() as session:
        for path in ("/healthz", "/api/v1/me", f"/k8s/{workspace['id']}/api"):
            async with session.get(f"http://{host}:{port}{path}", headers=user.bearer) as answer:
                assert answer.status == 404, path
