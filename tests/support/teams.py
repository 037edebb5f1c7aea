"""A team workspace as the cluster tests play it: an owner (tests.support.
tenants.onboard) and members of other roles, each holding the kubeconfig the
gateway issued them, talking to the API server directly.

Members other than the owner join through SSO only (an invitation accepted
when a provider-verified email signs in; tests/integration/test_keycloak.py
and the Keycloak helper play that path). Here they are added as test setup:
a membership row inserted with provisioning.db.members.add_member for a
password account registered through the gateway. Everything after that goes
through the real gateway API, kubectl and the API server.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
from kubernetes import client

from devstack.cluster import LocalCluster
from provisioning import roles
from provisioning.db import members as member_rows
from provisioning.models import AuditEvent, Role
from tests.support import kubeclients
from tests.support.gatewayclient import Session, register_and_login
from tests.support.tenants import Tenant, onboard


@dataclass
class Member:
    session: Session
    workspace_id: str
    namespace: str
    role: Role
    account: str
    kubeconfig: Path
    api: client.ApiClient

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def rbac(self) -> client.RbacAuthorizationV1Api:
        return client.RbacAuthorizationV1Api(self.api)

    @property
    def username(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.account}"


async def add_member(database_url: str, workspace_id: str, owner_id: str, user_id: str, role: Role) -> None:
    """Test setup standing in for an accepted invitation (see the module's docstring)."""
    connection = await asyncpg.connect(database_url)
    try:
        async with connection.transaction():
            added = await member_rows.add_member(
                connection, uuid.UUID(workspace_id), uuid.UUID(user_id), role,
                roles.member_account(user_id, owner=False), uuid.UUID(owner_id),
                AuditEvent("AddMember", uuid.UUID(owner_id), uuid.UUID(workspace_id), None,
                           {"member": user_id, "role": role, "via": "test setup"}))
            assert added is not None
    finally:
        await connection.close()


async def fresh_kubeconfig(member: Member, tmp_path: Path) -> Path:
    """A new kubeconfig of the member's, downloaded through the gateway."""
    path = tmp_path / f"{member.session.user_id}-{uuid.uuid4().hex[:6]}.kubeconfig"
    path.write_text(await member.session.kubeconfig(member.workspace_id))
    return path


async def join(gateway: Any, database_url: str, tmp_path: Path, owner: Tenant, role: Role,
               session: Session | None = None) -> Member:
    """A user (new, or `session`'s) made a `role` member of the owner's
    workspace, with the kubeconfig they downloaded."""
    session = session or await register_and_login(gateway)
    await add_member(database_url, owner.workspace_id, owner.session.user_id, session.user_id, role)
    path = tmp_path / f"{session.user_id}-{owner.workspace_id[:8]}.kubeconfig"
    path.write_text(await session.kubeconfig(owner.workspace_id))
    return Member(session, owner.workspace_id, owner.namespace, role, roles.member_account(session.user_id, owner=False),
                  path, kubeclients.from_kubeconfig(path))


@dataclass
class Team:
    owner: Tenant
    owner_kubeconfig: Path
    edit: Member
    view: Member


async def team(gateway: Any, database_url: str, tmp_path: Path) -> Team:
    """An owner (admin) with an `edit` and a `view` member."""
    owner = await onboard(gateway, tmp_path)
    return Team(owner, tmp_path / f"{owner.session.user_id}.kubeconfig",
                await join(gateway, database_url, tmp_path, owner, "edit"),
                await join(gateway, database_url, tmp_path, owner, "view"))


async def kubectl(cluster: LocalCluster, kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real kubectl, off the event loop: the test gateway serves on it."""
    return await asyncio.to_thread(kubeclients.kubectl, cluster, kubeconfig, *args)


def refused(result: subprocess.CompletedProcess[str]) -> bool:
    """kubectl was refused by authentication (401) or authorisation (403)."""
    text = result.stderr.lower()
    return result.returncode != 0 and ("unauthorized" in text or "forbidden" in text
                                       or "must be logged in" in text)


async def until_refused(cluster: LocalCluster, kubeconfig: Path, namespace: str, within: float) -> float:
    """Seconds until the API server refuses the kubeconfig (401 or 403);
    fails the test past `within`."""
    start = time.monotonic()
    while True:
        result = await kubectl(cluster, kubeconfig, "-n", namespace, "get", "configmaps")
        if refused(result):
            return time.monotonic() - start
        assert result.returncode == 0, result.stderr
        assert time.monotonic() - start < within, f"the kubeconfig still works {within} s later"
        await asyncio.sleep(0.2)
