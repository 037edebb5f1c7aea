"""The relay service: what the relays use once the gate has let a request
through. Built once per application (proxy.app) and passed to every relay
explicitly, beside the request and its Ticket.

It holds the upstreams (the only clients that send tenant tokens), one
per cluster: a ticket goes to its workspace's own cluster and no other,
whatever its path says (the path is relative to that cluster's API
server). And the tenant-token cache (keyed by cluster too), the registry of open streams, the audit writer and the
metrics, and owns the decisions every relay shares: which token a request
goes with (and forgetting one the API server refused, `exchange`), and how
a relayed request is recorded.
"""

from __future__ import annotations

import uuid
from typing import Awaitable, Callable, Mapping, NoReturn

from provisioning.audit import AuditWriter
from provisioning.audit_queue import Place
from provisioning.errors import ClusterUnavailable
from provisioning.fleet import naming
from proxy.http.metrics import Metrics
from proxy.passthrough.http1 import Answer
from proxy.passthrough.streams import StreamRegistry
from proxy.passthrough.ticket import Ticket
from proxy.passthrough.token_cache import TenantTokenCache
from proxy.passthrough.upstream import SEND_FAILURES, UpstreamApi, send_failed


class Relay:
    __slots__ = ("upstreams", "named", "tokens", "streams", "audit", "metrics")

    def __init__(self, upstreams: Mapping[str, UpstreamApi], tokens: TenantTokenCache, streams: StreamRegistry,
                 audit: AuditWriter, metrics: Metrics) -> None:
        self.upstreams = dict(upstreams)
        self.named = len(self.upstreams) > 1
        """Failures name the cluster only when there is more than one."""
        self.tokens = tokens
        self.streams = streams
        self.audit = audit
        self.metrics = metrics

    def upstream(self, ticket: Ticket) -> UpstreamApi:
        """The upstream of the ticket's workspace's cluster: the only one it may reach."""
        cluster = ticket.workspace.cluster
        found = self.upstreams.get(cluster)
        if found is None:
            raise ClusterUnavailable(f"cluster {cluster} is not configured on this gateway")
        return found

    def failed(self, ticket: Ticket, error: Exception) -> NoReturn:
        """send_failed, with the cluster named when there are several."""
        try:
            send_failed(error)
        except ClusterUnavailable as unavailable:
            if not self.named:
                raise
            self.metrics.upstream_failure(ticket.workspace.cluster)
            raise naming(ticket.workspace.cluster, unavailable) from error

    def cached_token(self, ticket: Ticket) -> str | None:
        """The tenant token if it is cached (the warm path: no coroutine), else None."""
        return self.tokens.cached(ticket.token_key)

    def token(self, ticket: Ticket) -> Awaitable[str]:
        """The cache's own fill, awaited by the caller: no coroutine of its own."""
        return self.tokens.get(ticket.token_key)

    def drop_token(self, ticket: Ticket, token: str) -> None:
        """The API server refused `token` (401): forget it, unless a fresh
        one has already replaced it."""
        self.tokens.invalidate(ticket.token_key, token)

    async def exchange(self, ticket: Ticket, token: str, send: Callable[[str, str | None], Awaitable[Answer]], *,
                       replayable: bool) -> Answer:
        """One exchange as the tenant, `send(token, audit_id)`. A write first
        takes a place for its audit row (AuditUnavailable, 503, if none comes
        free in time: the write never leaves), filled once the API server has
        answered (status 0 if it did not: a write that was sent may have
        taken effect). Each time a write is sent it names its event in the
        cluster's audit log (`audit_id`, a new one each time: a retry is
        another event), and its row names the last: the activity timeline
        shows the write once (provisioning.db.activity). A read is sent with
        None: the API server names it. A token the API server refuses (401)
        is forgotten, and a `replayable` request (one without a body) goes
        once more with a fresh one. Failures are mapped to the error tree
        here (proxy.passthrough.upstream.send_failed)."""
        place = await self.audit.reserve() if ticket.decision.is_write else None
        audit_id = new_audit_id() if place is not None else None
        try:
            try:
                answer = await send(token, audit_id)
                if answer.status == 401 and replayable:
                    answer.release()
                    self.drop_token(ticket, token)
                    token = await self.token(ticket)
                    audit_id = new_audit_id() if place is not None else None
                    answer = await send(token, audit_id)
            except SEND_FAILURES as error:
                self.failed(ticket, error)
        except BaseException:
            self.record(ticket, 0, place, audit_id)
            raise
        if answer.status == 401:
            self.drop_token(ticket, token)
        self.record(ticket, answer.status, place, audit_id)
        return answer

    def record(self, ticket: Ticket, status: int, place: Place | None = None, audit_id: str | None = None) -> None:
        """Writes are recorded with the human identity, in the `place` taken
        before they were sent, with the `audit_id` the API server's event of
        it has; reads only counted. Status 0: no answer came (the client
        left, or the exchange failed), and the write may have taken effect
        all the same."""
        if place is None:
            self.metrics.proxy_read()
            self.metrics.proxied(ticket.workspace.cluster, "read")
            return
        self.metrics.proxied(ticket.workspace.cluster, "write")
        details: dict[str, object] = {"status": status}
        if audit_id is not None:
            details["audit_id"] = audit_id
        place.fill(ticket.event("ProxyWrite", **details))


def new_audit_id() -> str:
    """A name for one request's event in the cluster's audit log, sent as
    its Audit-Id header: the API server takes it as the event's auditID
    (the tenant's own Audit-Id never travels: proxy.passthrough.headers)."""
    return str(uuid.uuid4())
