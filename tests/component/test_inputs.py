"""Hostile input on the gateway's own routes: malformed, oversized, overlong,
wrongly typed bodies and queries, NUL characters, forged forwarding headers,
a Host that is no host; always the contract's 4xx, never a 500. And what
clients do that is not hostile but must still work: a body in pieces. A
head trickled in is closed when its idle time is up (no cluster)."""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import ssl
import uuid
from typing import Any, AsyncIterator

import pytest
from multidict import CIMultiDict

from devstack.processes import free_port
from tests.support.gatewayclient import PASSWORD, admin_session, error_of, register_and_login, unique_email


@pytest.mark.parametrize("raw", [b"", b"{", b"[]", b"null", b'"x"', b"\xff\xfe"])
async def test_malformed_json_is_400(gateway: Any, raw: bytes) -> None:
    response = await gateway.post("/api/v1/auth/register", data=raw, headers={"Content-Type": "application/json"})
    assert await error_of(response) == (400, "invalid_json")


async def test_a_compressed_body_is_not_inflated(gateway: Any) -> None:
    """Bodies are taken as sent (proxy.app.handler_args): a gzip body is not
    JSON text, and nothing is inflated (a small bomb stays small)."""
    body = gzip.compress(json.dumps({"email": unique_email(), "password": PASSWORD}).encode())
    response = await gateway.post("/api/v1/auth/register", data=body, headers={
        "Content-Type": "application/json", "Content-Encoding": "gzip"})
    assert await error_of(response) == (400, "invalid_json")


async def test_an_expectation_is_met_or_refused_in_the_contracts_shape(gateway: Any) -> None:
    """aiohttp asks the route, before any middleware, what to answer to
    Expect: a text/plain 417 by default."""
    refused = await gateway.get("/api/v1/me", headers={"Expect": "something-else"})
    assert await error_of(refused) == (417, "expectation_failed")
    assert refused.headers["X-Content-Type-Options"] == "nosniff"
    body = json.dumps({"email": unique_email(), "password": PASSWORD}).encode()
    met = await gateway.post("/api/v1/auth/register", data=body, expect100=True,
                             headers={"Content-Type": "application/json"})
    assert met.status == 201, await met.text()


async def test_oversized_body_is_413(gateway: Any) -> None:
    response = await gateway.post("/api/v1/auth/login", data=b"{" + b" " * 70_000 + b"}")
    assert (await error_of(response))[0] == 413


async def pieces(*parts: bytes) -> AsyncIterator[bytes]:
    """A body sent as chunks with pauses between them: each reaches the
    gateway in a read of its own."""
    for number, part in enumerate(parts):
        if number:
            await asyncio.sleep(0.1)
        yield part


async def test_a_body_that_arrives_in_pieces_is_read_whole(gateway: Any) -> None:
    """One read of the body hands back only what has arrived: a valid body in
    two pieces was an `invalid_json` 400."""
    body = json.dumps({"email": unique_email(), "password": PASSWORD}).encode()
    answer = await gateway.post("/api/v1/auth/register", data=pieces(body[:9], body[9:]),
                                headers={"Content-Type": "application/json"})
    assert answer.status == 201, await answer.text()
    too_large = await gateway.post("/api/v1/auth/login", data=pieces(b"{" + b" " * 40_000, b" " * 40_000 + b"}"),
                                   headers={"Content-Type": "application/json"})
    assert (await error_of(too_large))[0] == 413


@pytest.mark.parametrize("host", ["gw\tx.example", "g\u00e4tew\u00e4y.example", "user@gw.example", "gw.example/x",
                                  "gw.example:99999x"])
async def test_a_host_header_that_is_no_host_is_400(gateway: Any, host: str,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """The gateway builds sign-in links and kubeconfigs from Host (when
    GATEWAY_PUBLIC_URL is unset): anything but a host and port is refused."""
    answer = await gateway.post("/api/v1/auth/device", json={}, headers={"Host": host})
    assert await error_of(answer) == (400, "invalid_host")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_malformed_queries_are_400_and_literal_paths_are_not_ids(gateway: Any, database_url: str) -> None:
    """Found by schemathesis against the OpenAPI document: a filter that is not
    what it claims to be is a mistake to report, not a value to guess at."""
    user = await register_and_login(gateway)
    root = await admin_session(gateway, database_url)
    assert await error_of(await user.call("GET", "/api/v1/workspaces?all=maybe")) == (400, "invalid_query")
    assert (await user.call("GET", "/api/v1/workspaces?all=false")).status == 200
    for query in ("workspace_id=nope", "user_id=1", f"user_id={uuid.uuid4()}x"):
        assert await error_of(await root.call("GET", f"/api/v1/audit?{query}")) == (400, "invalid_query"), query
    assert (await root.call("GET", f"/api/v1/audit?user_id={root.user_id}")).status == 200
    # `init` and `credentials` are literal segments, never looked up as workspace ids.
    wrong_method = await user.call("GET", "/api/v1/workspaces/init")
    assert (await error_of(wrong_method))[0] == 405 and wrong_method.headers["Allow"] == "POST"
    assert (await error_of(await user.call("GET", "/api/v1/workspaces/credentials")))[0] == 404


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


async def test_sign_in_starts_count_an_ipv6_slash_64_as_one_address(make_gateway: Any) -> None:
    """Device sign-in and single sign-on starts write a row each, unsigned in:
    their per-address limit must not be dodged by moving inside a /64. (The
    provider is not reachable: a start the limit lets through is a 503.)"""
    gateway = await make_gateway(
        GATEWAY_TRUSTED_PROXIES="127.0.0.1", GATEWAY_RATE_LOGIN="2/3600",
        oidc_providers=[{"name": "org", "issuer": f"https://127.0.0.1:{free_port()}/realms/org",
                         "client_id": "gateway", "client_secret": "s"}])
    for path, method, allowed in (("/api/v1/auth/device", "POST", 200), ("/api/v1/auth/oidc/org/login", "GET", 503)):
        for host in ("2001:db8:9:9::1", "2001:db8:9:9::2", "2001:db8:9:9:dead:beef:0:1"):
            answer = await gateway.request(method, path, json={} if method == "POST" else None,
                                           headers={"X-Forwarded-For": host}, allow_redirects=False)
            expected = 429 if host.endswith("beef:0:1") else allowed
            assert answer.status == expected, (path, host, await answer.text())


async def test_failed_sso_callbacks_are_limited_per_address_before_they_are_audited(
        make_gateway: Any, database_url: str) -> None:
    """Given a client sending forged callbacks (`?error=...`), each one a
    failed `Login` audit row in an append-only table, when it goes past
    GATEWAY_RATE_LOGIN, then it gets 429 with `Retry-After` and the contract's
    error shape, and no more rows are written; another address is not held up.
    (The provider is never reached: these fail before the code exchange.)"""
    gateway = await make_gateway(
        GATEWAY_TRUSTED_PROXIES="127.0.0.1", GATEWAY_RATE_LOGIN="3/3600",
        oidc_providers=[{"name": "org", "issuer": f"https://127.0.0.1:{free_port()}/realms/org",
                         "client_id": "gateway", "client_secret": "s"}])
    forged = {"X-Forwarded-For": "198.51.100.7"}
    path = "/api/v1/auth/oidc/org/callback?error=access_denied"
    for _ in range(3):
        assert await error_of(await gateway.get(path, headers=forged)) == (401, "provider_refused")
    for _ in range(5):
        limited = await gateway.get(path, headers=forged)
        assert await error_of(limited) == (429, "rate_limited") and int(limited.headers["Retry-After"]) > 0
    other = await gateway.get(path, headers={"X-Forwarded-For": "198.51.100.8"})
    assert await error_of(other) == (401, "provider_refused")
    root = await admin_session(gateway, database_url)
    rows = await (await root.call("GET", "/api/v1/audit?action=Login")).json()
    failed = [row for row in rows if row["details"].get("reason") == "provider_refused"]
    assert sorted(row["ip_address"] for row in failed) == ["198.51.100.7"] * 3 + ["198.51.100.8"]


async def test_nul_characters_are_refused_as_input_not_crashes(gateway: Any, database_url: str) -> None:
    """U+0000 is valid JSON and valid percent-encoding, but PostgreSQL text
    cannot hold it: wherever it would reach the database, the answer is 400."""
    login = await gateway.post("/api/v1/auth/login", json={"email": "a\u0000b@example.com",
                                                           "password": "correct horse battery"})
    assert (login.status, (await login.json())["error"]["code"]) == (400, "invalid_text")
    root = await admin_session(gateway, database_url)
    audit = await root.call("GET", "/api/v1/audit?action=%00")
    assert (audit.status, (await audit.json())["error"]["code"]) == (400, "invalid_text")


async def test_a_connection_that_trickles_its_head_in_is_closed_when_idle_time_is_up(make_gateway: Any) -> None:
    """Slowloris: a client that sends half a request head and waits holds a
    connection (a descriptor, TLS state) for nothing; the gateway closes it
    after GATEWAY_CLIENT_IDLE_SECONDS, as it does between requests."""
    gateway = await make_gateway(GATEWAY_CLIENT_IDLE_SECONDS="1")
    context = ssl.create_default_context(cafile=str(gateway.ca_file))
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.server.port, ssl=context,
                                                   server_hostname="127.0.0.1")
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        await writer.drain()
        async with asyncio.timeout(10):  # aiohttp's own default would hold it an hour
            try:
                left = await reader.read()
            except (ConnectionError, ssl.SSLError):  # closed either way
                left = b""
        assert left == b""
    finally:
        writer.close()
