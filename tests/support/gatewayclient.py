"""Drive the gateway the way a web UI or a script would."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp.test_utils import TestClient

from provisioning.db import repositories as repo
from provisioning.models import AuditEvent
from proxy import keys
from proxy.cli.server import create_user

PASSWORD = "correct horse battery staple"


def unique_email() -> str:
    return f"user-{uuid.uuid4().hex[:12]}@example.test"


@dataclass
class Session:
    client: TestClient  # type: ignore[type-arg]
    user_id: str
    email: str
    token: str
    csrf: str

    @property
    def bearer(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    async def call(self, method: str, path: str, **kwargs: Any) -> Any:
        headers = {**self.bearer, **kwargs.pop("headers", {})}
        return await self.client.request(method, path, headers=headers, **kwargs)

    async def init(self, tier: str | None = None) -> dict[str, Any]:
        response = await self.call("POST", "/api/v1/workspaces/init", json={"tier": tier} if tier else {})
        assert response.status in (200, 201), await response.text()
        return dict(await response.json())

    async def kubeconfig(self, workspace_id: str | None = None) -> str:
        query = f"?workspace_id={workspace_id}" if workspace_id else ""
        response = await self.call("GET", f"/api/v1/workspaces/credentials/kubeconfig{query}")
        assert response.status == 200, await response.text()
        return str(await response.text())


async def register_and_login(client: TestClient, email: str | None = None) -> Session:  # type: ignore[type-arg]
    email = email or unique_email()
    registered = await client.post("/api/v1/auth/register", json={"email": email, "password": PASSWORD})
    assert registered.status == 201, await registered.text()
    return await login(client, email)


async def login(client: TestClient, email: str, password: str = PASSWORD) -> Session:  # type: ignore[type-arg]
    response = await client.post("/api/v1/auth/login", json={"email": email, "password": password})
    assert response.status == 200, await response.text()
    body = await response.json()
    return Session(client, body["user"]["id"], email, body["token"], body["csrf_token"])


async def admin_session(client: TestClient, database_url: str) -> Session:  # type: ignore[type-arg]
    email = f"admin-{uuid.uuid4().hex[:8]}@example.test"
    await create_user(database_url, email, PASSWORD, True)
    return await login(client, email)


async def error_of(response: Any) -> tuple[int, str]:
    body = await response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    return response.status, body["error"]["code"]


async def tenant(gateway: Any) -> tuple[Session, dict[str, Any]]:
    """A new user and their provisioned workspace, returned once this
    gateway has heard the provisioning's workspace_changed event. Arriving
    later, the event would cut a stream of the workspace the test opens
    next, as any change to a workspace cuts the streams authorised while it
    happened (proxy.passthrough.streams): a test must not race it."""
    provisioned: set[str] = set()
    gateway.server.app[keys.EVENTS].subscribe(
        lambda message: provisioned.add(str(message.get("id"))) if message.get("status") == "provisioned" else None)
    user = await register_and_login(gateway)
    workspace = await user.init()
    async with asyncio.timeout(10):
        while workspace["id"] not in provisioned:
            await asyncio.sleep(0.01)
    return user, workspace


async def provisioned_workspace(gateway: Any) -> tuple[Session, str]:
    """A signed-in user and the path of a configmap list in their workspace,
    made in the database directly (the component ring has no cluster),
    returned once the gateway has heard of the provisioning (its
    workspace_changed event): as in `tenant`, a test must not race it."""
    heard: set[str] = set()
    gateway.server.app[keys.EVENTS].subscribe(lambda message: heard.add(str(message.get("id"))))
    user = await register_and_login(gateway)
    db = gateway.server.app[keys.DATABASE]
    namespace = f"tenant-{user.user_id}"
    workspace, _ = await repo.claim_workspace(db, uuid.UUID(user.user_id), namespace, "sa-tenant-admin", "basic")
    await repo.finish_provisioning(db, workspace.id, "uid-1", AuditEvent("WorkspaceProvisioned", workspace.user_id,
                                                                         workspace.id, None, {}))
    async with asyncio.timeout(10):
        while str(workspace.id) not in heard:
            await asyncio.sleep(0.01)
    return user, f"/k8s/{workspace.id}/api/v1/namespaces/{namespace}/configmaps"


async def k8s_error(answer: Any) -> tuple[int, str]:
    """Status and code of a refusal on /k8s (the contract's error, in a Kubernetes Status)."""
    body = await answer.json()
    assert body["kind"] == "Status" and body["code"] == answer.status, body
    return answer.status, body["error"]["code"]


def exec_handshake(key: str) -> dict[str, str]:
    """The headers of a WebSocket upgrade (an exec's) with `key` as Sec-WebSocket-Key."""
    return {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": key}


def metric(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def metrics_text(gateway: Any) -> str:
    """The test gateway's /metrics, read from its metrics listener (never the public one)."""
    host, port = gateway.app[keys.METRICS_ADDRESS]
    async with aiohttp.ClientSession() as session, session.get(f"http://{host}:{port}/metrics") as answer:
        assert answer.status == 200
        return str(await answer.text())
