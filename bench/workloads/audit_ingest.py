"""Issue 37's audit-ingest row: one gateway replica takes the API server's
audit webhook at >= 5,000 events a second, and its activity timeline
(GET /api/v1/activity) shows an event <= 2 s after its batch was posted.

The replica is a gateway process of its own with its audit listener where
the local API server sends its audit (devstack.auditing: GATEWAY_AUDIT_*),
on the run's PostgreSQL. Its load is sent the way the API server's webhook
backend sends it: `audit.k8s.io/v1` EventLists of BATCH_EVENTS events (the
backend's default --audit-webhook-batch-max-size; under load every batch is
full), each POSTed on its own as soon as it is full (the backend sends
batches concurrently), over TLS with the API server's audit client
certificate, kept-alive connections. One API server sends at most 10
batches a second by default (4,000 events): 5,000 a second is more than
one API server's worth, as a replica behind several would take.

The events are metadata-level events as the API server writes them (user
with groups and extra, source addresses, user agent, objectRef, response
status, both timestamps, the authorization annotations; about 1.3 KB each),
made for people of real issuances: tokens issued through the gateway's
token route to three workspaces' owners, each event naming one token's
`jti` in its user extra, as the API server does. Of each batch about 86 %
are attributed to those tokens, 9 % carry a token the gateway did not issue
in a tenant namespace (kept, unattributed), 5 % are outside any tenant
namespace with no token of ours (not kept).

Two phases, the replica's CPU read from /proc around each:

* **Ceiling**: CEILING_SENDERS senders post batches back to back for
  CEILING_SECONDS: events a second answered 204.
* **Timeline lag at the target**: batches offered at TARGET_EVENTS_PER_S
  for PACED_SECONDS. Each batch carries one event of a fourth person (the
  probe), named after its batch, stamped with the batch's time; the probe
  person asks their timeline (limit 50) every PROBE_POLL_SECONDS on the
  same replica. Lag: from posting the batch to the first timeline answer
  that shows its event. Also the rate answered 204 over the phase (it must
  keep up with what is offered) and the batches' answer times.

Afterwards every event of every answered batch that should be kept must be
stored, once (0 lost). Targets: the ceiling and the paced rate >= 5,000
events/s; lag p99 <= 2 s; 0 lost, 0 refused.

Alone: `python -m bench.workloads.audit_ingest` (its own stack; the cluster
lock; BENCH_QUICK=1 is shorter), written to results/audit-ingest.json.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import itertools
import json
import random
import ssl
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterator

import aiohttp
import asyncpg
import psutil

from bench.stack import Stack, stop_process
from bench.workloads.common import QUICK, pct
from devstack import auditing

BATCH_EVENTS = 400
"""The API server's --audit-webhook-batch-max-size default."""
TARGET_EVENTS_PER_S = 5_000
LAG_TARGET_SECONDS = 2.0
CEILING_SENDERS = 4
CEILING_SECONDS = 5 if QUICK else 20
PACED_SECONDS = 10 if QUICK else 30
PROBE_POLL_SECONDS = 0.05
TOKENS_PER_PERSON = 4
PEOPLE = 3
SETTLE_SECONDS = 30.0
"""How long the last batches and probes may take once a phase's sending ends."""

_AUDIT_ID, _TIME, _NAME = "00000000-0000-4000-8000-0000000a0d17", "@TIME@", "@NAME@"
_VERBS = (("get", 200), ("get", 200), ("get", 200), ("list", 200), ("list", 200), ("watch", 200),
          ("create", 201), ("update", 200), ("patch", 200), ("delete", 200))
_RESOURCES = ("configmaps", "pods", "deployments", "services", "secrets")


@dataclass(frozen=True)
class Credential:
    """A token the gateway issued: its jti, and whose account it is."""

    jti: str
    namespace: str
    service_account: str


@dataclass
class Batch:
    body: bytes
    events: int
    kept: int
    """Events the gateway should keep (attributed, or in a tenant namespace)."""
    probe: str | None = None


def jti_of(token: str) -> str:
    """The `jti` claim of a service account token (a JWT; its payload is
    base64url without padding)."""
    payload = token.split(".")[1]
    return str(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["jti"])


def event_template(*, verb: str, code: int, resource: str, namespace: str, username: str, uid: str,
                   jti: str | None) -> str:
    """One metadata-level ResponseComplete event, in JSON as the API server
    writes it, with the audit id, times and object name left to fill in."""
    groups = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"]
    user: dict[str, Any] = {"username": username, "uid": uid, "groups": groups}
    if jti is not None:
        user["extra"] = {"authentication.kubernetes.io/credential-id": [f"JTI={jti}"]}
    named = verb not in ("list", "watch", "create")
    uri = f"/api/v1/namespaces/{namespace}/{resource}" + (f"/{_NAME}" if named else "?limit=500")
    return json.dumps({
        "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata", "auditID": _AUDIT_ID,
        "stage": "ResponseComplete", "requestURI": uri, "verb": verb, "user": user,
        "sourceIPs": ["198.51.100.23"], "userAgent": "kubectl/v1.34.1 (linux/amd64) kubernetes/93248f9",
        "objectRef": {"resource": resource, "namespace": namespace, "name": _NAME, "apiVersion": "v1"},
        "responseStatus": {"metadata": {}, "code": code},
        "requestReceivedTimestamp": _TIME, "stageTimestamp": _TIME,
        "annotations": {"authorization.k8s.io/decision": "allow",
                        "authorization.k8s.io/reason": f'RBAC: allowed by RoleBinding "tenant-admin/{namespace}" '
                                                       f'of ClusterRole "tenant-admin" to ServiceAccount '
                                                       f'"{username.rsplit(":", 1)[-1]}/{namespace}"'},
    }, separators=(",", ":"))


def fill(template: str, name: str, at: str) -> str:
    return template.replace(_AUDIT_ID, str(uuid.uuid4())).replace(_NAME, name).replace(_TIME, at)


def event_list(events: list[str]) -> bytes:
    """An EventList as the webhook backend POSTs it."""
    return ('{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":['
            + ",".join(events) + "]}").encode()


def batch_sizes(total: int, size: int = BATCH_EVENTS) -> list[int]:
    """`total` events as the backend batches them: full batches, the rest last."""
    full, rest = divmod(total, size)
    return [size] * full + ([rest] if rest else [])


def timestamp(at: datetime.datetime) -> str:
    return at.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class EventMaker:
    """Batches of realistic events for a set of issued credentials, each
    event named `<run>-<n>` so the run's rows can be counted."""

    credentials: list[Credential]
    probe: Credential | None = None
    run: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    _numbers: Iterator[int] = field(default_factory=itertools.count)
    _batches: Iterator[int] = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        kept: list[tuple[str, bool]] = []
        for credential in self.credentials:
            username = f"system:serviceaccount:{credential.namespace}:{credential.service_account}"
            for (verb, code), resource in itertools.product(_VERBS, _RESOURCES):
                kept.append((event_template(verb=verb, code=code, resource=resource,
                                            namespace=credential.namespace, username=username, uid=str(uuid.uuid4()),
                                            jti=credential.jti), True))
        namespace = self.credentials[0].namespace
        # Per 100 events: 86 of ours, 9 a tenant's own token in its namespace, 5 outside tenant namespaces.
        foreign = [(event_template(verb=verb, code=code, resource="configmaps", namespace=namespace,
                                   username=f"system:serviceaccount:{namespace}:ci-bot", uid=str(uuid.uuid4()),
                                   jti=str(uuid.uuid4())), True) for verb, code in _VERBS[:9]]
        outside = [(event_template(verb=verb, code=code, resource="configmaps", namespace="platform-tools",
                                   username="system:serviceaccount:platform-tools:deployer", uid=str(uuid.uuid4()),
                                   jti=None), False) for verb, code in _VERBS[:5]]
        random.shuffle(kept)
        self._mix = [kept[i % len(kept)] for i in range(86)] + foreign + outside
        random.shuffle(self._mix)
        if self.probe is not None:
            self._probe = event_template(
                verb="patch", code=200, resource="configmaps", namespace=self.probe.namespace,
                username=f"system:serviceaccount:{self.probe.namespace}:{self.probe.service_account}",
                uid=str(uuid.uuid4()), jti=self.probe.jti)

    def batch(self, size: int = BATCH_EVENTS, *, with_probe: bool = False) -> Batch:
        at = timestamp(datetime.datetime.now(datetime.timezone.utc))
        events, kept, probe = [], 0, None
        if with_probe:
            probe = f"probe-{self.run}-{next(self._batches)}"
            events.append(fill(self._probe, probe, at))
            kept += 1
        while len(events) < size:
            template, keep = self._mix[next(self._numbers) % len(self._mix)]
            events.append(fill(template, f"{self.run}-{len(events)}-{random.getrandbits(48):x}", at))
            kept += keep
        return Batch(event_list(events), len(events), kept, probe)


@dataclass
class Sent:
    sent: float
    answered: float
    status: int
    batch: Batch


class Replica:
    """The gateway replica under test, and a client that posts like the API server."""

    def __init__(self, stack: Stack) -> None:
        assert stack.cluster is not None
        self.stack, cluster = stack, stack.cluster
        self.url, self.process = stack.launch_gateway("audit-ingest", extra_env=cluster.audit_environment())
        stack.wait_ready(self.url, self.process, "audit-ingest")
        self.audit_url = f"https://127.0.0.1:{cluster.audit_webhook_port}/audit"
        pki_dir = cluster.state_dir / "pki"
        self.tls = ssl.create_default_context(cafile=str(cluster.audit_client_ca))
        self.tls.load_cert_chain(pki_dir / f"{auditing.AUDIT_CLIENT}.crt", pki_dir / f"{auditing.AUDIT_CLIENT}.key")

    def cpu_seconds(self) -> float:
        times = psutil.Process(self.process.pid).cpu_times()
        return float(times.user + times.system)

    async def post(self, session: aiohttp.ClientSession, batch: Batch) -> Sent:
        sent = time.perf_counter()
        async with session.post(self.audit_url, data=batch.body,
                                headers={"Content-Type": "application/json"}) as answer:
            await answer.read()
        return Sent(sent, time.perf_counter(), answer.status, batch)


async def _person(stack: Stack, session: aiohttp.ClientSession, tokens: int) -> tuple[str, list[Credential]]:
    """A workspace owner with `tokens` tokens issued through the gateway: their session and credentials."""
    tenant = await stack.new_tenant(session)
    credentials = []
    for _ in range(tokens):
        async with session.get(f"{stack.gateway_url}/api/v1/workspaces/credentials/token",
                               headers={"Authorization": f"Bearer {tenant.session_token}"}) as answer:
            assert answer.status == 200, await answer.text()
            body = await answer.json()
        credentials.append(Credential(jti_of(body["token"]), body["namespace"], body["service_account"]))
    return tenant.session_token, credentials


def _rate(sent: list[Sent]) -> dict[str, Any]:
    answered = [s for s in sent if s.status == 204]
    seconds = max(s.answered for s in sent) - min(s.sent for s in sent) if sent else float("nan")
    events = sum(s.batch.events for s in answered)
    answers = [s.answered - s.sent for s in sent]
    return {"batches": len(sent), "events": events, "seconds": seconds, "events_per_s": events / seconds,
            "refused": {str(status): sum(1 for s in sent if s.status == status)
                        for status in sorted({s.status for s in sent} - {204})},
            "answer_p50_ms": pct(answers, 0.5) * 1000, "answer_p99_ms": pct(answers, 0.99) * 1000}


async def ceiling(replica: Replica, maker: EventMaker) -> tuple[dict[str, Any], list[Sent]]:
    sent: list[Sent] = []
    stop_at = time.perf_counter() + CEILING_SECONDS
    cpu = replica.cpu_seconds()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, ssl=replica.tls)) as session:
        async def sender() -> None:
            while time.perf_counter() < stop_at:
                sent.append(await replica.post(session, maker.batch()))

        await asyncio.gather(*(sender() for _ in range(CEILING_SENDERS)))
    result = _rate(sent)
    result.update(senders=CEILING_SENDERS,
                  cpu_ms_per_1000_events=(replica.cpu_seconds() - cpu) * 1e6 / max(1, result["events"]))
    return result, sent


async def paced(replica: Replica, maker: EventMaker, probe_session: str) -> tuple[dict[str, Any], list[Sent]]:
    """Batches offered at TARGET_EVENTS_PER_S, the probe person's timeline read meanwhile."""
    interval = BATCH_EVENTS / TARGET_EVENTS_PER_S
    count = round(PACED_SECONDS / interval)
    seen: dict[str, float] = {}
    posted: dict[str, float] = {}
    cpu = replica.cpu_seconds()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, ssl=replica.tls)) as session, \
            replica.stack.session() as reader:
        sending = True

        async def timeline() -> None:
            url = f"{replica.url}/api/v1/activity?limit=50"
            headers = {"Authorization": f"Bearer {probe_session}"}
            settle_until = None
            while True:
                async with reader.get(url, headers=headers) as answer:
                    assert answer.status == 200, await answer.text()
                    items = (await answer.json())["items"]
                now = time.perf_counter()
                for item in items:
                    if item["source"] == "cluster" and item["name"] not in seen:
                        seen[item["name"]] = now
                if not sending:
                    settle_until = settle_until or now + SETTLE_SECONDS
                    if set(posted) <= set(seen) or now > settle_until:
                        return
                await asyncio.sleep(PROBE_POLL_SECONDS)

        reading = asyncio.create_task(timeline())
        tasks: list[asyncio.Task[Sent]] = []
        began = time.perf_counter()
        for n in range(count):
            await asyncio.sleep(max(0.0, began + n * interval - time.perf_counter()))
            batch = maker.batch(with_probe=True)
            assert batch.probe is not None
            posted[batch.probe] = time.perf_counter()
            tasks.append(asyncio.create_task(replica.post(session, batch)))
        offered_seconds = time.perf_counter() - began
        sent = list(await asyncio.gather(*tasks))
        sending = False
        await reading
    lags = [seen[name] - at for name, at in posted.items() if name in seen]
    result = _rate(sent)
    result.update(offered_events_per_s=count * BATCH_EVENTS / offered_seconds, offered_seconds=offered_seconds,
                  probes=len(posted), probes_seen=len(lags), lag_p50_s=pct(lags, 0.5), lag_p99_s=pct(lags, 0.99),
                  lag_max_s=max(lags) if lags else float("nan"), probe_poll_ms=PROBE_POLL_SECONDS * 1000,
                  cpu_ms_per_1000_events=(replica.cpu_seconds() - cpu) * 1e6 / max(1, result["events"]))
    return result, sent


async def _stored(database_url: str, run: str) -> int:
    connection = await asyncpg.connect(database_url)
    try:
        found = await connection.fetchval("SELECT count(*) FROM cluster_events WHERE name LIKE $1",
                                          f"{run}-%")
        probes = await connection.fetchval("SELECT count(*) FROM cluster_events WHERE name LIKE $1",
                                           f"probe-{run}-%")
    finally:
        await connection.close()
    return int(found) + int(probes)


async def audit_ingest(stack: Stack) -> dict[str, Any]:
    async with stack.session() as session:
        people = [await _person(stack, session, TOKENS_PER_PERSON) for _ in range(PEOPLE)]
        probe_session, (probe,) = await _person(stack, session, 1)
    maker = EventMaker([credential for _, credentials in people for credential in credentials], probe)
    replica = await asyncio.to_thread(Replica, stack)
    try:
        top, top_sent = await ceiling(replica, maker)
        at_target, paced_sent = await paced(replica, maker, probe_session)
    finally:
        stop_process(replica.process)
    owed = sum(s.batch.kept for s in top_sent + paced_sent if s.status == 204)
    stored = await _stored(stack.database_url, maker.run)
    example = json.loads(maker.batch(1).body)["items"][0]
    return {"batch_events": BATCH_EVENTS, "target_events_per_s": TARGET_EVENTS_PER_S,
            "event_bytes": len(json.dumps(example, separators=(",", ":"))),
            "credentials": len(maker.credentials), "ceiling": top, "paced": at_target,
            "kept_owed": owed, "kept_stored": stored, "lost": max(0, owed - stored),
            "stored_beyond": max(0, stored - owed)}


def ingest_verdicts(r: dict[str, Any]) -> list[tuple[str, str, bool]]:
    top, at_target = r["ceiling"], r["paced"]
    target = r["target_events_per_s"]
    refused = sum(top["refused"].values()) + sum(at_target["refused"].values())
    return [
        (f"audit ingest ceiling >= {target:,} events/s", f"{top['events_per_s']:,.0f}/s",
         top["events_per_s"] >= target),
        (f"audit ingest at {target:,}/s keeps up", f"{at_target['events_per_s']:,.0f}/s",
         at_target["events_per_s"] >= 0.98 * target and not at_target["refused"]),
        (f"audit timeline lag p99 <= {LAG_TARGET_SECONDS:.0f} s",
         f"{at_target['lag_p99_s']:.2f} s ({at_target['probes_seen']}/{at_target['probes']})",
         at_target["lag_p99_s"] <= LAG_TARGET_SECONDS and at_target["probes_seen"] == at_target["probes"]),
        ("audit ingest: 0 events lost, 0 refused", f"{r['lost']} lost, {refused} refused",
         r["lost"] == 0 and refused == 0),
    ]


def print_ingest(r: dict[str, Any]) -> None:
    top, at_target = r["ceiling"], r["paced"]
    print(f"\naudit ingest         batches of {r['batch_events']} events (~{r['event_bytes']} bytes each), "
          f"{r['credentials']} issued tokens")
    print(f"  {'ceiling':<18} {top['senders']} senders: {top['events_per_s']:>8,.0f} events/s over "
          f"{top['seconds']:.1f} s, answer p50 {top['answer_p50_ms']:.0f} ms p99 {top['answer_p99_ms']:.0f} ms, "
          f"{top['cpu_ms_per_1000_events']:.0f} ms CPU per 1,000 events, refused {top['refused'] or 0}")
    print(f"  {'at the target':<18} offered {at_target['offered_events_per_s']:,.0f}/s, answered "
          f"{at_target['events_per_s']:,.0f}/s, answer p50 {at_target['answer_p50_ms']:.0f} ms "
          f"p99 {at_target['answer_p99_ms']:.0f} ms; timeline lag p50 {at_target['lag_p50_s']:.2f} s "
          f"p99 {at_target['lag_p99_s']:.2f} s max {at_target['lag_max_s']:.2f} s "
          f"({at_target['probes_seen']} of {at_target['probes']} probes seen)")
    print(f"  {'stored':<18} {r['kept_stored']:,} of {r['kept_owed']:,} owed, {r['lost']} lost")


if __name__ == "__main__":
    from bench.alone import run_alone

    run_alone("audit-ingest", audit_ingest, ingest_verdicts, print_ingest)
