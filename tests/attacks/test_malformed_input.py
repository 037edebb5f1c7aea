"""Given any malformed input, when it reaches any route, then the answer is a
4xx in the contract's JSON error shape, never a 500.

A seeded random walk over every route with hostile bodies, ids, queries and
headers (a cheap fuzzer: the seed makes failures reproducible)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from tests.support.gatewayclient import admin_session, register_and_login

pytestmark = pytest.mark.cluster

BODIES: list[Any] = [
    None, b"", b"{", b"\x00\xff", b"[]", b"null", b"1e999999", b'{"email": {"$ne": null}}',
    {"email": "a" * 10_000 + "@x.io", "password": "p" * 2000}, {"tier": ["basic"]}, {"tier": None},
    {"tier": "basic' OR '1'='1"}, {"tier": "../../etc/passwd"}, {"email": "a@b.c\r\nX-Injected: 1", "password": "x" * 12},
    {"email": "\u202eevil@example.com", "password": "\ud800" * 3}, {"password": 1, "email": 2}, [1, 2, 3], "string",
]
IDS = ["not-a-uuid", "00000000-0000-0000-0000-000000000000", "%00", "..%2F..%2F", "' OR 1=1 --", "9" * 100, "%ff%fe"]
QUERIES = ["", "?all=maybe", "?limit=-1", "?limit=abc", "?limit=99999999999999999999", "?workspace_id=%00",
           "?user_id=x&action=%27", "?workspace_id=" + "a" * 5000]


def routes(workspace_id: str) -> list[tuple[str, str]]:
    return [
        ("POST", "/api/v1/auth/register"), ("POST", "/api/v1/auth/login"), ("POST", "/api/v1/auth/logout"),
        ("GET", "/api/v1/me"), ("POST", "/api/v1/workspaces/init"), ("GET", "/api/v1/workspaces"),
        ("GET", "/api/v1/workspaces/{id}"), ("GET", "/api/v1/workspaces/credentials/kubeconfig"),
        ("POST", "/api/v1/workspaces/{id}/suspend"), ("POST", "/api/v1/workspaces/{id}/resume"),
        ("POST", "/api/v1/users/{id}/suspend"), ("GET", "/api/v1/audit"),
        ("GET", f"/k8s/{workspace_id}/api/v1/namespaces/x/pods"), ("POST", f"/k8s/{workspace_id}/apis/x/y/z"),
        ("PUT", f"/k8s/{workspace_id}/api/v1/namespaces/%2e%2e"), ("GET", "/k8s/{id}/version"),
    ]


async def test_random_malformed_requests_never_get_a_500(gateway: Any, database_url: str) -> None:
    user = await register_and_login(gateway)
    workspace = await user.init()
    root = await admin_session(gateway, database_url)
    rng = random.Random(20261123)
    for _ in range(400):
        method, template = rng.choice(routes(workspace["id"]))
        path = template.replace("{id}", rng.choice(IDS + [workspace["id"]])) + rng.choice(QUERIES)
        body = rng.choice(BODIES)
        headers = dict(rng.choice([user.bearer, root.bearer, {}, {"Authorization": "Bearer " + "A" * 5000},
                                   {"Cookie": "gw_session=" + "x" * 3000}, {"Authorization": "Basic Og=="}]))
        headers["Content-Type"] = "application/json"
        if rng.random() < 0.3:
            headers["Content-Type"] = rng.choice(["text/plain", "application/json; charset=latin1", "multipart/form-data",
                                                  "application/x-www-form-urlencoded", "application/jsonx"])
        data = body if isinstance(body, bytes) or body is None else json.dumps(body, ensure_ascii=False, allow_nan=True).encode("utf-8", "surrogatepass")
        answer = await gateway.request(method, path, data=data, headers=headers, allow_redirects=False)
        text = await answer.text()
        assert answer.status < 500, (method, path, body, answer.status, text[:300])
        answered_by_gateway = not path.startswith("/k8s/") or answer.status in (401, 403)
        if answer.status >= 400 and answered_by_gateway:
            body = json.loads(text)
            if path.startswith("/k8s/"):  # also a Kubernetes Status, for kubectl and the client libraries
                assert (body["kind"], body["code"], body["message"]) == ("Status", answer.status,
                                                                        body["error"]["message"]), text[:300]
            else:
                assert set(body) == {"error"}, (method, path, text[:300])
