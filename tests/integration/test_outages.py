"""Fail closed: with the database down every route that needs it answers 503
(login included) and /readyz says so. A real PostgreSQL, really stopped."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.databases import stop_postgres
from tests.support.gatewayclient import PASSWORD, register_and_login

pytestmark = pytest.mark.cluster


async def test_database_down_is_503_everywhere(migrated_own_postgres: Any, make_gateway: Any) -> None:
    client = await make_gateway(GATEWAY_DATABASE_URL=migrated_own_postgres.get_uri())
    user = await register_and_login(client)
    await stop_postgres(migrated_own_postgres)
    for method, path, body in [
        ("POST", "/api/v1/auth/login", {"email": user.email, "password": PASSWORD}),
        ("POST", "/api/v1/auth/register", {"email": "new@example.test", "password": PASSWORD}),
        ("GET", "/api/v1/me", None),
        ("POST", "/api/v1/workspaces/init", {}),
        ("GET", "/api/v1/workspaces/credentials/kubeconfig", None),
    ]:
        answer = await user.call(method, path, json=body)
        assert answer.status == 503, (path, await answer.text())
        assert (await answer.json())["error"]["code"] == "database_unavailable"
    ready = await client.get("/readyz")
    assert ready.status == 503 and (await ready.json())["checks"]["database"] == "unavailable"
    assert (await client.get("/healthz")).status == 200
