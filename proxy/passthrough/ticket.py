"""A proxied request that passed the gate: who, which workspace, what path.

The gate (proxy.passthrough.gate) decides and produces one Ticket; the
relays read it and never look at the session, the database or the settings
themselves. A Ticket is a value: nothing changes it once it is made.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from provisioning.models import AuditEvent, Workspace
from proxy.auth.authenticating import Principal
from proxy.passthrough.routing import Decision
from proxy.passthrough.streams import Owner
from proxy.passthrough.token_cache import TokenKey


class Ticket(NamedTuple):
    """Built once per proxied request: a tuple, the cheapest immutable value."""

    principal: Principal
    workspace: Workspace
    decision: Decision
    method: str
    token_key: TokenKey
    """Which cached tenant token the request is sent with."""
    resolve_client_ip: Callable[[], str | None]
    """Resolved only when an audit row needs it: most proxied requests never do."""
    cuts_seen: int
    """The stream registry's cut count before the gate read anything (proxy.passthrough.streams)."""

    @property
    def owner(self) -> Owner:
        """What authorised this request, for a stream's lifetime."""
        return Owner(self.workspace.id, self.principal.session_id, self.principal.user.id,
                     self.principal.session_expires_at, self.cuts_seen)

    def event(self, action: str, **details: object) -> AuditEvent:
        """This request as an audit row, with the human identity."""
        return AuditEvent(action, self.principal.user.id, self.workspace.id, self.resolve_client_ip(),
                          {"method": self.method, "path": self.decision.upstream_path, **details})
