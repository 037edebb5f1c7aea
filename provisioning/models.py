"""The gateway's own values: frozen dataclasses, read from the database or
built by the domain, never carrying a Kubernetes token."""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from provisioning.clusters import DEFAULT_CLUSTER

WorkspaceStatus = Literal["provisioning", "provisioned", "suspended"]
Role = Literal["admin", "edit", "view"]


@dataclass(frozen=True)
class User:
    id: uuid.UUID
    email: str
    is_admin: bool
    status: str = "active"
    provider: str | None = None
    """The identity provider the user signs in with; None for a password account."""

    def public(self) -> dict[str, Any]:
        body: dict[str, Any] = {"id": str(self.id), "email": self.email, "is_admin": self.is_admin}
        if self.provider is not None:
            body["provider"] = self.provider
        return body


@dataclass(frozen=True)
class Workspace:
    id: uuid.UUID
    user_id: uuid.UUID
    namespace: str
    service_account: str
    tier: str
    status: WorkspaceStatus
    created_at: datetime.datetime
    service_account_uid: str | None = None
    cluster: str = DEFAULT_CLUSTER
    """The cluster it is on (provisioning.placement); never changes."""
    dedicated: bool = False
    """It holds its cluster alone (a dedicated tier's workspace)."""

    def public(self, quota: dict[str, str] | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": str(self.id),
            "user_id": str(self.user_id),
            "cluster": self.cluster,
            "namespace": self.namespace,
            "service_account": self.service_account,
            "status": self.status,
            "tier": self.tier,
            "created_at": self.created_at.isoformat(),
        }
        if quota is not None:
            body["quota"] = quota
        return body


@dataclass(frozen=True)
class Member:
    """A person's membership of a workspace, and the ServiceAccount that is
    them in its namespace (provisioning.members)."""

    workspace_id: uuid.UUID
    user_id: uuid.UUID
    role: Role
    service_account: str
    service_account_uid: str | None
    """None while the account and its binding are not made (or were revoked)."""
    added_at: datetime.datetime
    added_by: uuid.UUID | None = None
    email: str | None = None
    via: str = "direct"
    group_provider: str | None = None
    group_name: str | None = None
    revoked_at: datetime.datetime | None = None

    def public(self) -> dict[str, Any]:
        return {"user_id": str(self.user_id), "email": self.email, "role": self.role,
                "added_by": str(self.added_by) if self.added_by else None, "added_at": self.added_at.isoformat(),
                "status": "active", "service_account": self.service_account, "via": self.via}


@dataclass(frozen=True)
class Invitation:
    workspace_id: uuid.UUID
    email: str
    provider: str | None
    role: Role
    added_by: uuid.UUID | None
    added_at: datetime.datetime

    def public(self) -> dict[str, Any]:
        return {"user_id": None, "email": self.email, "role": self.role, "provider": self.provider,
                "added_by": str(self.added_by) if self.added_by else None, "added_at": self.added_at.isoformat(),
                "status": "invited"}


@dataclass(frozen=True)
class GroupBinding:
    workspace_id: uuid.UUID
    provider: str
    group: str
    role: Role
    added_by: uuid.UUID | None
    added_at: datetime.datetime

    def public(self) -> dict[str, Any]:
        return {"provider": self.provider, "group": self.group, "role": self.role,
                "added_by": str(self.added_by) if self.added_by else None, "added_at": self.added_at.isoformat()}


@dataclass(frozen=True)
class AuditEvent:
    action: str
    user_id: uuid.UUID | None = None
    workspace_id: uuid.UUID | None = None
    ip_address: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class IssuedToken:
    """A TokenRequest result. `token` is only ever held in memory."""

    token: str = field(repr=False)
    expires_at: datetime.datetime
    credential_id: str | None
    """The token's `jti`, which the API server writes into its own audit log."""
    issuance_id: str | None = None
    """The gateway's record of it (GET /api/v1/credentials), when it is bound to a Secret."""


@dataclass(frozen=True)
class BindingSecret:
    """A Secret of the gateway's type a token is (or will be) bound to: an
    issuance's, or a spare made ahead (provisioning.spares). What deleting
    it needs; the Secret's name is the issuance's id (manifests)."""

    id: uuid.UUID
    workspace_id: uuid.UUID
    namespace: str
    secret_name: str
    cluster: str = DEFAULT_CLUSTER


@dataclass(frozen=True)
class Begun:
    """An issuance's row written (provisioning.db.credentials.begin): its
    id, its Secret's name, and that Secret's uid when it is a spare's, made
    already; None when the issuance must make it."""

    id: uuid.UUID
    secret_name: str
    secret_uid: str | None


@dataclass(frozen=True)
class Credential:
    """One issuance: the record of a token the gateway handed out, bound to
    its Secret (provisioning.credentials). Never the token itself."""

    id: uuid.UUID
    user_id: uuid.UUID
    workspace_id: uuid.UUID
    kind: str
    """`kubeconfig` (downloaded) or `token` (the token route: the exec plugin, `tenant-gateway credential`)."""
    namespace: str
    service_account: str
    secret_name: str
    jti: str | None
    issued_at: datetime.datetime
    expires_at: datetime.datetime
    revoked_at: datetime.datetime | None = None
    ip_address: str | None = None
    user_agent: str | None = None
    last_used_at: datetime.datetime | None = None
    cluster: str = DEFAULT_CLUSTER
    """Its workspace's cluster, which minted it and holds its Secret."""

    def public(self) -> dict[str, Any]:
        def when(moment: datetime.datetime | None) -> str | None:
            return moment.isoformat() if moment is not None else None

        return {"id": str(self.id), "user_id": str(self.user_id), "workspace_id": str(self.workspace_id),
                "kind": self.kind, "service_account": self.service_account, "issued_at": when(self.issued_at),
                "expires_at": when(self.expires_at), "revoked_at": when(self.revoked_at),
                "ip_address": self.ip_address, "user_agent": self.user_agent,
                "last_used_at": when(self.last_used_at)}


@dataclass(frozen=True)
class DeviceRequest:
    """What asked for a device sign-in code, as the approver is shown it:
    the client's own word for its name (anyone can send any name), the
    address the gateway saw it come from, and when it asked."""

    client_name: str | None
    client_address: str | None
    started_at: datetime.datetime
    expires_at: datetime.datetime

    def public(self) -> dict[str, Any]:
        return {"client_name": self.client_name, "client_address": self.client_address,
                "started_at": self.started_at.isoformat(), "expires_at": self.expires_at.isoformat()}
