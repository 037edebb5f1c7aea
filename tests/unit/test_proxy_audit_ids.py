"""How the proxy names its requests' events in the cluster's audit log
(proxy.passthrough.relay.Relay.exchange), which is how the activity
timeline shows a proxied write once: each write sent names a new event,
a read names none, and the write's audit row names the event of the
attempt that counted. The exchange is driven with a `send` of the test's
own: no API server, no database (the audit rows stay in the writer's queue)."""

from __future__ import annotations

import datetime
import uuid
from typing import cast

from provisioning.audit import AuditWriter
from provisioning.db.pool import Database
from provisioning.models import IssuedToken, User, Workspace
from proxy.auth.authenticating import Principal
from proxy.http.metrics import Metrics
from proxy.passthrough.relay import Relay, new_audit_id
from proxy.passthrough.routing import Decision
from proxy.passthrough.stream_slots import StreamSlots
from proxy.passthrough.streams import StreamRegistry
from proxy.passthrough.ticket import Ticket
from proxy.passthrough.token_cache import TenantTokenCache, TokenKey

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
PERSON = uuid.UUID("00000000-0000-4000-8000-000000000001")
WORKSPACE = uuid.UUID("00000000-0000-4000-8000-000000000002")


class Answered:
    """What `send` answers: a status, and the release the exchange may ask for."""

    def __init__(self, status: int) -> None:
        self.status = status

    def release(self) -> None:
        pass


async def fresh_token(key: TokenKey) -> IssuedToken:
    return IssuedToken("fresh", NOW + datetime.timedelta(days=3650), None)


def relay_and_ticket(method: str, is_write: bool) -> tuple[Relay, Ticket, AuditWriter]:
    metrics = Metrics()
    writer = AuditWriter(cast(Database, None))  # never started: its rows stay queued, for the test to read
    relay = Relay({}, TenantTokenCache(fresh_token), StreamRegistry(metrics, StreamSlots(10, metrics)), writer,
                  metrics)
    user = User(PERSON, "person@example.test", is_admin=False)
    workspace = Workspace(WORKSPACE, PERSON, "tenant-a", "sa-tenant-admin", "basic", "provisioned", NOW, "uid-1")
    ticket = Ticket(Principal(user, uuid.uuid4(), False, NOW), workspace,
                    Decision("forward", "/api/v1/namespaces/tenant-a/configmaps/x", is_write=is_write), method,
                    TokenKey("tenant-a", "sa-tenant-admin", "uid-1", PERSON.int), lambda: None, 0)
    return relay, ticket, writer


def test_an_audit_id_is_a_new_uuid_each_time() -> None:
    made = {new_audit_id() for _ in range(100)}
    assert len(made) == 100 and all(str(uuid.UUID(one)) == one for one in made)


async def test_a_write_names_its_event_and_its_row_names_the_same() -> None:
    relay, ticket, writer = relay_and_ticket("DELETE", is_write=True)
    sent: list[str | None] = []

    async def send(token: str, audit_id: str | None) -> Answered:
        sent.append(audit_id)
        return Answered(200)

    await relay.exchange(ticket, "cached", send, replayable=True)  # type: ignore[arg-type]
    [row] = writer.queue.take(10)
    assert sent == [row.details["audit_id"]] and sent[0] is not None
    assert (row.action, row.user_id, row.details["status"]) == ("ProxyWrite", PERSON, 200)


async def test_a_write_sent_again_after_a_refused_token_names_a_new_event() -> None:
    relay, ticket, writer = relay_and_ticket("DELETE", is_write=True)
    sent: list[tuple[str, str | None]] = []

    async def send(token: str, audit_id: str | None) -> Answered:
        sent.append((token, audit_id))
        return Answered(401 if len(sent) == 1 else 200)

    await relay.exchange(ticket, "stale", send, replayable=True)  # type: ignore[arg-type]
    [row] = writer.queue.take(10)
    assert [token for token, _ in sent] == ["stale", "fresh"]
    assert sent[0][1] != sent[1][1] and row.details["audit_id"] == sent[1][1]


async def test_a_read_names_no_event_and_writes_no_row() -> None:
    relay, ticket, writer = relay_and_ticket("GET", is_write=False)
    sent: list[str | None] = []

    async def send(token: str, audit_id: str | None) -> Answered:
        sent.append(audit_id)
        return Answered(200)

    await relay.exchange(ticket, "cached", send, replayable=True)  # type: ignore[arg-type]
    assert sent == [None] and writer.queue.take(10) == []
