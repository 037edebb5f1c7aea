"""The roles of a workspace's members: what they are called, which
ClusterRole each is bound to, and what each may do, in words. Pure.

The API server enforces a role (each member is a ServiceAccount of their
own, bound to the role's ClusterRole, deploy/kubernetes/clusterroles.yaml);
the gateway decides only who may manage members (`may_manage`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from provisioning.errors import BadRequest
from provisioning.models import Role

ROLES: tuple[Role, ...] = ("admin", "edit", "view")

OWNER_SERVICE_ACCOUNT = "sa-tenant-admin"
"""The owner's account and the workspace's own (suspension replaces it)."""
OWNER_ROLEBINDING = "tenant-admin"
MEMBER_PREFIX = "member-"
"""Every other member's ServiceAccount and RoleBinding are `member-<user id>`."""

WORDS: Mapping[Role, str] = {
    "admin": "Manages the workspace's members, and does everything in its namespace the tenant role allows: "
             "workloads, Secrets, RBAC inside the namespace, exec and port-forward.",
    "edit": "Creates and changes workloads, Services, ConfigMaps and Secrets, and uses exec, logs and "
            "port-forward; cannot change RBAC or members.",
    "view": "Reads the namespace's objects and logs, except Secrets; changes nothing.",
}
"""What each role may do, as the API and the console say it."""


@dataclass(frozen=True)
class ClusterRoles:
    """The ClusterRole each role is bound to. The admin one is the
    configured tenant role (GATEWAY_TENANT_CLUSTERROLE); the gateway's own
    credential may bind exactly these three (`bind` by name)."""

    admin: str = "tenant-admin"
    edit: str = "tenant-edit"
    view: str = "tenant-view"

    def of(self, role: Role) -> str:
        return str(getattr(self, role))

    def names(self) -> tuple[str, ...]:
        return (self.admin, self.edit, self.view)


def parse_role(value: object) -> Role:
    """A role named in a request body; 400 `unknown_role` otherwise."""
    if not isinstance(value, str) or value not in ROLES:
        raise BadRequest(f"role must be one of {', '.join(ROLES)}", code="unknown_role")
    return value


def member_account(user_id: object, *, owner: bool) -> str:
    """The ServiceAccount (and RoleBinding) name of a member."""
    return OWNER_SERVICE_ACCOUNT if owner else f"{MEMBER_PREFIX}{user_id}"


def binding_name(service_account: str) -> str:
    """The RoleBinding that binds a member's account to their role."""
    return OWNER_ROLEBINDING if service_account == OWNER_SERVICE_ACCOUNT else service_account


def may_manage(role: Role | None, *, gateway_admin: bool) -> bool:
    """Who may add, change and remove members: the workspace's admins and the gateway's."""
    return gateway_admin or role == "admin"


def describe(cluster_roles: ClusterRoles) -> list[dict[str, str]]:
    """Every role and what it may do (GET /api/v1/roles, the console)."""
    return [{"role": role, "cluster_role": cluster_roles.of(role), "description": WORDS[role]} for role in ROLES]
