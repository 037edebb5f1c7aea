"""Issue 41 item 2, `make bench-scale`: what the gateway costs as tenants
grow. One stack (bench/stack.py); workspaces onboarded to 100, then 1,000,
then 10,000 (BENCH_SCALE_SIZES), and at each size, in the same run:

* **Onboarding** through the gateway's API (`POST /api/v1/workspaces/init`,
  16 at a time), so every namespace is made by the real onboarding and
  admitted by the local cluster's real admission policies. The accounts
  behind them are rows written here (provisioning.db.repositories,
  create_user and create_session, with one argon2 hash of the bench
  password made by the gateway's own hasher, and session tokens signed with
  the stack's session key): registering 10,000 accounts through the API
  would spend most of the run in argon2. Logins are measured through the API.
* **Replicas**: the serving gateway's RSS after the size's measurements;
  a new replica started STARTS times, its time from exec to `/readyz` 200
  (median) and its RSS when ready (median).
* **Latency** (sequential, one client, p50/p99): login (LOGINS, random
  accounts); kubeconfig issuance (ISSUANCES, random workspaces); a warm
  proxied GET (WARM_GETS of one ServiceAccount through `/k8s/`, after a
  warm-up); a cold proxied GET (COLD_GETS workspaces never proxied before:
  directory and token cache misses); `GET /api/v1/workspaces?all=true`
  paged by 100 (every page of the walk; the unpaged answer's time is kept as
  context); suspension and resume (SUSPENSIONS workspaces, each suspended
  then resumed through the API). After the cold GETs every workspace not
  yet proxied to gets one GET (8 at a time): from then on each tenant has a
  cached token and directory entry, as on a busy day, and the RSS, the
  event burst and the later figures meet every tenant's state.
* **`tenant-gateway reconcile`** over every workspace, as an operator runs
  it (its wall time, and per workspace: linear when that stays flat).
* **The event listener's lag**: a watch held open through the gateway on
  one workspace; 1,000 workspace changes committed as fast as 8 database
  connections can (each an `UPDATE` of a row that fires the real
  `workspace_changed` trigger: every replica evicts the workspace, drops its
  tokens and cuts its streams), the watched workspace's change last; the
  lag is from that last commit to the gateway cutting the watch. LAG_ROUNDS
  rounds (p50 and max).

Judged (bench/scale.py): each figure at the largest size within 1.25x of
the smallest; reconcile per workspace likewise (linear). Alone:
`python -m bench.workloads.scale` (the cluster lock), written to
results/scale.json and plotted to results/scale.png.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import random
import statistics
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import aiohttp
import asyncpg

from bench.scale import FIGURES, TOLERANCE, Page, curves, markdown_table, print_scale, scale_verdicts, walk_pages
from bench.stack import PASSWORD, Stack, stop_process
from bench.workloads.common import pct
from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.models import AuditEvent
from provisioning.secrets import Secret
from proxy.auth import passwords, sessions

SIZES = tuple(int(n) for n in os.environ.get("BENCH_SCALE_SIZES", "100,1000,10000").split(","))
RECONCILE_UP_TO = int(os.environ.get("BENCH_SCALE_RECONCILE_UP_TO", str(max(SIZES))))
"""`reconcile` is run at the sizes up to this (all, unless told). Judged
linear at the largest size it ran at."""
ONBOARDING_CONCURRENCY = 16
STARTS = 3
LOGINS = 50
ISSUANCES = 100
WARM_GETS = 300
COLD_GETS = 50
SUSPENSIONS = 10
PAGE = 100
BURST = 1000
LAG_ROUNDS = 15
SESSION_SECONDS = 4 * 3600


@dataclass
class Account:
    user_id: uuid.UUID
    email: str
    token: str
    workspace_id: str = ""
    namespace: str = ""


@dataclass
class Population:
    accounts: list[Account] = field(default_factory=list)
    proxied: set[str] = field(default_factory=set)
    """Workspaces proxied to already: no longer cold."""

    def unproxied(self, count: int, rng: random.Random) -> list[Account]:
        fresh = [a for a in self.accounts if a.workspace_id not in self.proxied]
        chosen = rng.sample(fresh, min(count, len(fresh)))
        self.proxied.update(a.workspace_id for a in chosen)
        return chosen


def _ms(seconds: list[float]) -> dict[str, float]:
    return {"p50_ms": pct(seconds, 0.5) * 1000, "p99_ms": pct(seconds, 0.99) * 1000}


async def _timed(count: int, call: Callable[[int], Awaitable[None]], concurrency: int = 1) -> list[float]:
    times: list[float] = []
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with gate:
            began = time.perf_counter()
            await call(i)
            times.append(time.perf_counter() - began)

    await asyncio.gather(*(one(i) for i in range(count)))
    return times


async def _paired(count: int, figure: Callable[[int], Awaitable[None]],
                  control: Callable[[int], Awaitable[None]]) -> tuple[list[float], list[float]]:
    """`figure` and its control alternately, one at a time (which goes first
    alternates too), so both meet the same background: the machine's other
    work, and an API server holding as many namespaces."""
    figure_times: list[float] = []
    control_times: list[float] = []
    for i in range(count):
        pair = ((figure, figure_times), (control, control_times))
        for call, times in (pair if i % 2 == 0 else pair[::-1]):
            began = time.perf_counter()
            await call(i)
            times.append(time.perf_counter() - began)
    return figure_times, control_times


def _both(name: str, figure_times: list[float], control_times: list[float]) -> dict[str, float]:
    """A figure and its control (`control_<name>_...`), p50 and p99."""
    return {**{f"{name}_{k}": v for k, v in _ms(figure_times).items()},
            **{f"control_{name}_{k}": v for k, v in _ms(control_times).items()}}


class Direct:
    """The controls' calls to the API server, made as the gateway's own
    identity makes them (its client certificate): a TokenRequest, one bound
    to a Secret that exists, and a GET with a tenant's token."""

    def __init__(self, stack: Stack) -> None:
        import ssl

        assert stack.cluster is not None
        self.server = stack.cluster.server
        pki_dir = stack.cluster.state_dir / "pki"
        context = ssl.create_default_context(cafile=str(stack.cluster.ca_file))
        context.load_cert_chain(pki_dir / "gateway.crt", pki_dir / "gateway.key")
        self.as_gateway = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context))
        self.as_tenant = aiohttp.ClientSession(connector=aiohttp.TCPConnector(
            ssl=ssl.create_default_context(cafile=str(stack.cluster.ca_file))))

    async def close(self) -> None:
        await self.as_gateway.close()
        await self.as_tenant.close()

    def _token_url(self, account: Account) -> str:
        return f"{self.server}/api/v1/namespaces/{account.namespace}/serviceaccounts/sa-tenant-admin/token"

    async def token(self, account: Account, bound: dict[str, str] | None = None) -> str:
        from provisioning import manifests

        async with self.as_gateway.post(self._token_url(account),
                                        json=manifests.token_request(7200, None, bound)) as r:
            assert r.status == 201, await r.text()
            return str((await r.json())["status"]["token"])

    async def binding_secret(self, account: Account) -> dict[str, str]:
        from provisioning import manifests

        async with self.as_gateway.post(
                f"{self.server}/api/v1/namespaces/{account.namespace}/secrets",
                json=manifests.credential_secret(account.namespace, account.workspace_id, str(uuid.uuid4()))) as r:
            assert r.status == 201, await r.text()
            metadata = (await r.json())["metadata"]
        return {"name": metadata["name"], "uid": metadata["uid"]}

    async def get(self, account: Account, token: str) -> None:
        async with self.as_tenant.get(
                f"{self.server}/api/v1/namespaces/{account.namespace}/serviceaccounts/sa-tenant-admin",
                headers={"Authorization": f"Bearer {token}"}) as r:
            assert r.status == 200, await r.text()
            await r.read()


# -- the population ------------------------------------------------------------


async def _accounts(db: Database, secret: Secret, password_hash: str, count: int) -> list[Account]:
    """`count` accounts with an open session each, written as the API writes them."""
    made: list[Account] = []
    gate = asyncio.Semaphore(8)

    async def one(_i: int) -> None:
        async with gate:
            email = f"scale-{uuid.uuid4().hex[:12]}@example.test"
            user = await repo.create_user(db, email, password_hash)
            session_id, now = uuid.uuid4(), datetime.datetime.now(datetime.timezone.utc)
            token, expires = sessions.mint(secret, user.id, session_id, now, SESSION_SECONDS)
            opened = await repo.create_session(db, session_id, user.id, expires, AuditEvent(
                "Login", user.id, None, None, {"result": "success", "bench": "scale"}))
            assert opened is not None
            made.append(Account(user.id, email, token))

    await asyncio.gather(*(one(i) for i in range(count)))
    return made


async def _onboard(stack: Stack, session: aiohttp.ClientSession, accounts: list[Account]) -> dict[str, Any]:
    """Each account's workspace through `POST /api/v1/workspaces/init`."""
    refused: list[str] = []

    async def one(i: int) -> None:
        account = accounts[i]
        async with session.post(f"{stack.gateway_url}/api/v1/workspaces/init", json={},
                                headers={"Authorization": f"Bearer {account.token}"}) as r:
            body = await r.json()
            if r.status != 201 or body.get("status") != "provisioned":
                refused.append(f"{r.status} {json.dumps(body)[:200]}")
                return
            account.workspace_id, account.namespace = body["id"], body["namespace"]

    began = time.perf_counter()
    times = await _timed(len(accounts), one, ONBOARDING_CONCURRENCY)
    seconds = time.perf_counter() - began
    first_refusals = list(refused)
    for _ in range(3):  # init is idempotent: a repeat finishes what a refused call left (a 503 of a busy machine)
        pending = [i for i, account in enumerate(accounts) if not account.workspace_id]
        if not pending:
            break
        refused.clear()
        await asyncio.sleep(2)
        await _timed(len(pending), lambda k: one(pending[k]))
    if any(not account.workspace_id for account in accounts):
        raise RuntimeError(f"{len(refused)} onboardings did not provision, e.g. {refused[:3]}")
    return {"count": len(accounts), "seconds": seconds, "rate": len(accounts) / seconds,
            "concurrency": ONBOARDING_CONCURRENCY, "refused_then_repeated": len(first_refusals),
            "refusals": first_refusals[:5], **_ms(times)}


# -- the measurements of one size --------------------------------------------------


async def _replicas(stack: Stack) -> dict[str, float]:
    """A new replica started STARTS times: exec to /readyz 200, and its RSS then."""
    import psutil

    ready_seconds, rss = [], []
    async with stack.session() as session:
        for attempt in range(STARTS):
            began = time.perf_counter()
            url, process = stack.launch_gateway(f"replica-{attempt}")
            try:
                while True:
                    if process.poll() is not None:
                        raise RuntimeError((stack.root / f"replica-{attempt}.log").read_text()[-2000:])
                    try:
                        async with session.get(f"{url}/readyz") as r:
                            if r.status == 200:
                                break
                    except aiohttp.ClientError:
                        pass
                    if time.perf_counter() - began > 120:
                        raise RuntimeError("a new replica was not ready within 120 s")
                    await asyncio.sleep(0.02)
                ready_seconds.append(time.perf_counter() - began)
                rss.append(psutil.Process(process.pid).memory_info().rss / 2**20)
            finally:
                await asyncio.to_thread(stop_process, process)
    return {"startup_s": statistics.median(ready_seconds), "replica_rss_mib": statistics.median(rss),
            "startup_max_s": max(ready_seconds)}


async def _logins(stack: Stack, session: aiohttp.ClientSession, population: Population,
                  rng: random.Random) -> dict[str, float]:
    chosen = rng.sample(population.accounts, min(LOGINS, len(population.accounts)))

    async def one(i: int) -> None:
        async with session.post(f"{stack.gateway_url}/api/v1/auth/login",
                                json={"email": chosen[i].email, "password": PASSWORD}) as r:
            assert r.status == 200, await r.text()
            await r.read()

    async def control(_i: int) -> None:  # the password hash a login checks, here: the machine's pace
        await passwords.hash_password(PASSWORD)

    return _both("login", *await _paired(len(chosen), one, control))


async def _issuances(stack: Stack, session: aiohttp.ClientSession, population: Population,
                     rng: random.Random, direct: Direct) -> dict[str, float]:
    chosen = [rng.choice(population.accounts) for _ in range(ISSUANCES)]

    async def one(i: int) -> None:
        async with session.get(f"{stack.gateway_url}/api/v1/workspaces/credentials/kubeconfig",
                               headers={"Authorization": f"Bearer {chosen[i].token}"}) as r:
            assert r.status == 200, await r.text()
            await r.read()

    # What an issuance asks of the API server when it claims a spare: a
    # token bound to a Secret that exists, in a workspace chosen the same way.
    controlled = [rng.choice(population.accounts) for _ in range(ISSUANCES)]
    bound = {a.workspace_id: await direct.binding_secret(a) for a in controlled}

    async def control(i: int) -> None:
        await direct.token(controlled[i], bound[controlled[i].workspace_id])

    return _both("issuance", *await _paired(ISSUANCES, one, control))


def _account_url(stack: Stack, account: Account) -> str:
    return (f"{stack.gateway_url}/k8s/{account.workspace_id}/api/v1/namespaces/{account.namespace}"
            "/serviceaccounts/sa-tenant-admin")


async def _proxied_gets(stack: Stack, session: aiohttp.ClientSession, population: Population,
                        rng: random.Random, direct: Direct) -> dict[str, float]:
    """Each against the same GET straight to the API server: a warm one
    with a token held, a cold one with a TokenRequest first (what the
    gateway does on a token cache miss)."""
    async def get(account: Account) -> None:
        async with session.get(_account_url(stack, account), headers={"Authorization": f"Bearer {account.token}"}) as r:
            assert r.status == 200, await r.text()
            await r.read()

    warm = population.accounts[0]
    population.proxied.add(warm.workspace_id)
    held = await direct.token(warm)
    for _ in range(20):
        await get(warm)
        await direct.get(warm, held)
    warm_pairs = await _paired(WARM_GETS, lambda _i: get(warm), lambda _i: direct.get(warm, held))
    cold = population.unproxied(COLD_GETS, rng)

    async def cold_direct(i: int) -> None:  # the same workspace: nothing of the gateway's is warmed by it
        await direct.get(cold[i], await direct.token(cold[i]))

    cold_pairs = await _paired(len(cold), lambda i: get(cold[i]), cold_direct)
    return {**_both("warm_get", *warm_pairs), **_both("cold_get", *cold_pairs)}


async def _activate_all(stack: Stack, session: aiohttp.ClientSession, population: Population) -> dict[str, float]:
    """Every workspace not yet proxied to gets one proxied GET (8 at a time):
    each then has a cached token and directory entry, as on a busy day, so
    the event burst below meets every tenant's state, not a handful's."""
    rest = [a for a in population.accounts if a.workspace_id not in population.proxied]

    async def get(i: int) -> None:
        account = rest[i]
        async with session.get(_account_url(stack, account), headers={"Authorization": f"Bearer {account.token}"}) as r:
            assert r.status == 200, await r.text()
            await r.read()

    began = time.perf_counter()
    await _timed(len(rest), get, 8)
    population.proxied.update(a.workspace_id for a in rest)
    return {"activated": len(rest), "activation_s": time.perf_counter() - began}


async def _listing(stack: Stack, session: aiohttp.ClientSession, admin: str, size: int) -> dict[str, float]:
    headers = {"Authorization": f"Bearer {admin}"}

    async def fetch(cursor: str | None) -> Page:
        query = f"all=true&limit={PAGE}" + (f"&cursor={cursor}" if cursor else "")
        async with session.get(f"{stack.gateway_url}/api/v1/workspaces?{query}", headers=headers) as r:
            assert r.status == 200, await r.text()
            body = await r.json()
        return body["items"], body["next"]

    items, times = await walk_pages(fetch, limit=PAGE, clock=time.perf_counter)
    if len(items) != size or len({w["id"] for w in items}) != size:
        raise RuntimeError(f"the paged listing had {len(items)} workspaces ({len({w['id'] for w in items})} "
                           f"distinct), {size} onboarded")
    began = time.perf_counter()
    async with session.get(f"{stack.gateway_url}/api/v1/workspaces?all=true", headers=headers) as r:
        assert r.status == 200
        unpaged = len(await r.json())
    unpaged_ms = (time.perf_counter() - began) * 1000
    assert unpaged == size
    return {**{f"page_{k}": v for k, v in _ms(times).items()}, "pages": len(times), "unpaged_listing_ms": unpaged_ms}


async def _suspensions(stack: Stack, session: aiohttp.ClientSession, admin: str, population: Population,
                       rng: random.Random) -> dict[str, float]:
    headers = {"Authorization": f"Bearer {admin}"}
    chosen = rng.sample(population.accounts[1:], min(SUSPENSIONS, len(population.accounts) - 1))
    suspend: list[float] = []
    resume: list[float] = []
    for account in chosen:
        for verb, times, status in (("suspend", suspend, "suspended"), ("resume", resume, "provisioned")):
            began = time.perf_counter()
            async with session.post(f"{stack.gateway_url}/api/v1/workspaces/{account.workspace_id}/{verb}",
                                    headers=headers) as r:
                body = await r.json()
                assert r.status == 200 and body["status"] == status, body
            times.append(time.perf_counter() - began)
    return {**{f"suspend_{k}": v for k, v in _ms(suspend).items()},
            **{f"resume_{k}": v for k, v in _ms(resume).items()}}


async def _reconcile(stack: Stack, size: int) -> dict[str, float]:
    began = time.perf_counter()
    done = await asyncio.to_thread(stack.run_cli, "reconcile")
    seconds = time.perf_counter() - began
    if done.returncode == 2:  # the cluster or the database stopped answering: no run over all to time
        raise RuntimeError(f"reconcile exited 2: {done.stdout[-1500:]} {done.stderr[-1500:]}")
    # Anything it changed or left alone is a line (none expected: every workspace was just onboarded).
    return {"reconcile_s": seconds, "reconcile_ms_per_workspace": seconds * 1000 / size,
            "reconcile_exit": done.returncode, "reconcile_lines": len(done.stdout.splitlines())}


async def _event_lag(stack: Stack, session: aiohttp.ClientSession, population: Population,
                     rng: random.Random) -> dict[str, float]:
    """LAG_ROUNDS rounds: a watch open through the gateway, BURST changes, the
    watched workspace's last; from its commit to the watch's end."""
    watched = population.accounts[0]
    others = [uuid.UUID(a.workspace_id) for a in population.accounts[1:]]
    url = (f"{stack.gateway_url}/k8s/{watched.workspace_id}/api/v1/namespaces/{watched.namespace}"
           "/configmaps?watch=1&timeoutSeconds=600")
    change = "UPDATE workspaces SET status = status WHERE id = $1"
    pool = await asyncpg.create_pool(stack.database_url, min_size=8, max_size=8)
    lags, bursts = [], []
    try:
        for _ in range(LAG_ROUNDS):
            async with session.get(url, headers={"Authorization": f"Bearer {watched.token}"}) as watch:
                assert watch.status == 200, await watch.text()
                await asyncio.sleep(0.5)  # the stream registered on the replica
                targets = [rng.choice(others) for _ in range(BURST - 1)]
                began = time.perf_counter()

                async def changes(share: list[uuid.UUID]) -> None:
                    async with pool.acquire() as connection:
                        for workspace_id in share:
                            await connection.execute(change, workspace_id)

                await asyncio.gather(*(changes(targets[k::8]) for k in range(8)))
                # From before the last change is sent: its NOTIFY can reach the
                # gateway, and the watch's end reach us, before our COMMIT's answer does.
                committed = time.perf_counter()
                await pool.execute(change, uuid.UUID(watched.workspace_id))
                bursts.append(time.perf_counter() - began)
                async with asyncio.timeout(60):
                    try:
                        async for _chunk in watch.content.iter_any():
                            pass
                    except aiohttp.ClientError:
                        pass  # cut mid-chunk or the connection closed: ended all the same
                lags.append(time.perf_counter() - committed)
    finally:
        await pool.close()
    return {"event_lag_p50_ms": statistics.median(lags) * 1000, "event_lag_max_ms": max(lags) * 1000,
            "burst_commit_s": statistics.median(bursts)}


async def _measure_steps(stack: Stack, population: Population, admin: str, size: int, rng: random.Random,
                         direct: Direct, figures: dict[str, float]) -> None:
    async with stack.session() as session:
        for name, step in (("logins", _logins(stack, session, population, rng)),
                           ("issuances", _issuances(stack, session, population, rng, direct)),
                           ("proxied GETs", _proxied_gets(stack, session, population, rng, direct)),
                           ("every workspace proxied once", _activate_all(stack, session, population)),
                           ("listing", _listing(stack, session, admin, size)),
                           ("suspensions", _suspensions(stack, session, admin, population, rng)),
                           ("event lag", _event_lag(stack, session, population, rng))):
            print(f"  {size:,}: {name} ...", flush=True)
            figures.update(await step)


async def _measure(stack: Stack, population: Population, admin: str, size: int, rng: random.Random) -> dict[str, Any]:
    figures: dict[str, float] = {}
    direct = Direct(stack)
    try:
        await _measure_steps(stack, population, admin, size, rng, direct, figures)
    finally:
        await direct.close()
    if size <= RECONCILE_UP_TO:
        print(f"  {size:,}: reconcile ...", flush=True)
        figures.update(await _reconcile(stack, size))
    print(f"  {size:,}: replicas ...", flush=True)
    figures.update(await _replicas(stack))
    figures["rss_mib"] = stack.gateway_rss_mib()
    return figures


async def scale(stack: Stack, sizes: tuple[int, ...] = SIZES, seed: int = 41) -> dict[str, Any]:
    rng = random.Random(seed)
    secret = Secret(stack.session_secret)
    password_hash = await passwords.hash_password(PASSWORD)
    db = await Database.connect(stack.database_url, min_size=1, max_size=8)
    try:
        admin_email = f"scale-admin-{uuid.uuid4().hex[:8]}@example.test"
        await repo.create_user(db, admin_email, password_hash, is_admin=True)
        async with stack.session() as session:
            async with session.post(f"{stack.gateway_url}/api/v1/auth/login",
                                    json={"email": admin_email, "password": PASSWORD}) as r:
                admin = str((await r.json())["token"])
        population = Population()
        steps = []
        for size in sizes:
            more = size - len(population.accounts)
            print(f"onboarding {more:,} workspaces (to {size:,}) ...", flush=True)
            accounts = await _accounts(db, secret, password_hash, more)
            async with stack.session() as session:
                onboarding = await _onboard(stack, session, accounts)
            population.accounts += accounts
            figures = await _measure(stack, population, admin, size, rng)
            steps.append({"size": size, "onboarding": onboarding, "figures": figures})
            print(json.dumps(steps[-1]), flush=True)
    finally:
        await db.close()
    return {"onboarded_through": "the gateway's API, POST /api/v1/workspaces/init (accounts and sessions as rows)",
            "samples": {"starts": STARTS, "logins": LOGINS, "issuances": ISSUANCES, "warm_gets": WARM_GETS,
                        "cold_gets": COLD_GETS, "suspensions": SUSPENSIONS, "page": PAGE, "burst": BURST,
                        "lag_rounds": LAG_ROUNDS, "reconcile_up_to": RECONCILE_UP_TO},
            "tolerance": TOLERANCE, "figures": [f.key for f in FIGURES], "steps": steps}


def plot(result: dict[str, Any], path: Any) -> None:
    from bench.png import ratio_chart

    drawn = [(c.number, [(float(x), y) for x, y in c.points]) for c in curves(result)]
    path.write_bytes(ratio_chart(drawn, x_ticks=[float(s) for s in result_sizes(result)], threshold=TOLERANCE))


def result_sizes(result: dict[str, Any]) -> list[int]:
    return [int(step["size"]) for step in result["steps"]]


def _main() -> None:
    from bench.alone import run_alone
    from bench.record import RESULTS

    name = "scale" if SIZES == (100, 1000, 10000) else "scale-" + "-".join(map(str, SIZES))

    def printed(result: dict[str, Any]) -> None:
        print_scale(result)
        print("\n" + markdown_table(result) + "\n")
        plot(result, RESULTS / f"{name}.png")
        print(f"plotted: {RESULTS / f'{name}.png'}")

    run_alone(name, scale, scale_verdicts, printed)


if __name__ == "__main__":
    _main()
