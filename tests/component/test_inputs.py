"""Hostile input on the gateway's own routes: malformed, oversized, overlong,
wrongly typed bodies and queries, NUL characters, forged forwarding headers;
always the contract's 4xx, never a 500 (no cluster)."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest
from multidict import CIMultiDict

from tests.gatewayclient import PASSWORD, admin_session, error_of, register_and_login, unique_email


@pytest.mark.parametrize("raw", [b"", b"{", b"[]", b"null", b'"x"', b"\xff\xfe"])
async def test_malformed_json_is_400(gateway: Any, raw: bytes) -> None:
    response = await gateway.post("/api/v1/auth/register", data=raw, headers={"Content-Type": "application/json"})
    assert await error_of(response) == (400, "invalid_json")


async def test_oversized_body_is_413(gateway: Any) -> None:
    response = await gateway.post("/api/v1/auth/login", data=b"{" + b" " * 70_000 + b"}")
    assert (await error_of(response))[0] == 413


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


async def test_nul_characters_are_refused_as_input_not_crashes(gateway: Any, database_url: str) -> None:
    """U+0000 is valid JSON and valid percent-encoding, but PostgreSQL text
    cannot hold it: wherever it would reach the database, the answer is 400."""
    login = await gateway.post("/api/v1/auth/login", json={"email": "a\u0000b@example.com",
                                                           "password": "correct horse battery"})
    assert (login.status, (await login.json())["error"]["code"]) == (400, "invalid_text")
    root = await admin_session(gateway, database_url)
    audit = await root.call("GET", "/api/v1/audit?action=%00")
    assert (audit.status, (await audit.json())["error"]["code"]) == (400, "invalid_text")
