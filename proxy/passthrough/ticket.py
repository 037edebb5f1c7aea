"""A proxied request that passed the gate: who, which workspace, what path.

Everything a relay needs travels in the Ticket, so relays never look at the
session, the database or the settings themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from provisioning.audit import AuditWriter
from provisioning.models import AuditEvent, Workspace
from proxy.auth.authenticating import Authenticator, Principal
from proxy.metrics import Metrics
from proxy.passthrough.routing import Decision
from proxy.passthrough.streams import Owner, StreamRegistry
from proxy.passthrough.tenants import WorkspaceDirectory
from proxy.passthrough.upstream import Upstream
from proxy.token_cache import TenantTokenCache, TokenKey


@dataclass
class Passthrough:
    """The proxy's long-lived parts, built once per application."""

    upstream: Upstream
    tokens: TenantTokenCache
    streams: StreamRegistry
    directory: WorkspaceDirectory
    audit: AuditWriter
    metrics: Metrics
    authenticator: Authenticator


class Ticket:
    """Built once per proxied request, so a plain class with slots."""

    __slots__ = ("passthrough", "principal", "workspace", "decision", "method", "path", "resolve_client_ip", "key")

    def __init__(self, passthrough: Passthrough, principal: Principal, workspace: Workspace, decision: Decision,
                 method: str, path: str, resolve_client_ip: Callable[[], str | None]) -> None:
        self.passthrough = passthrough
        self.principal = principal
        self.workspace = workspace
        self.decision = decision
        self.method = method
        self.path = path
        # Resolved only when an audit row needs it: most proxied requests never do.
        self.resolve_client_ip = resolve_client_ip
        # cluster, namespace, ServiceAccount, its UID, audience (none)
        self.key = TokenKey(passthrough.upstream.server, workspace.namespace, workspace.service_account,
                            workspace.service_account_uid or "", "")

    @property
    def owner(self) -> Owner:
        """What authorised this request, for a stream's lifetime."""
        return Owner(self.workspace.id, self.principal.session_id, self.principal.user.id,
                     self.principal.session_expires_at)

    def cached_token(self) -> str | None:
        """The tenant token if it is cached (the warm path: no coroutine), else None."""
        return self.passthrough.tokens.cached(self.key)

    async def token(self) -> str:
        return await self.passthrough.tokens.get(self.key)

    def drop_token(self, token: str) -> None:
        """The API server refused `token` (401): forget it, unless a fresh
        one has already replaced it."""
        self.passthrough.tokens.invalidate(self.key, token)

    def audit_write(self, status: int) -> None:
        """Writes are recorded with the human identity; reads only counted."""
        if not self.decision.is_write:
            self.passthrough.metrics.proxy_read()
            return
        self.passthrough.audit.enqueue(self.event("ProxyWrite", status=status))

    def event(self, action: str, **details: object) -> AuditEvent:
        return AuditEvent(action, self.principal.user.id, self.workspace.id, self.resolve_client_ip(),
                          {"method": self.method, "path": self.path, **details})
