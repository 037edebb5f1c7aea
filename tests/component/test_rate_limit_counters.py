"""The rate-limit table does not grow for ever (proxy.routes.ratelimit), against PostgreSQL.

Given counters whose window has ended, when a replica's sweeper runs, then
they are gone and live ones stay (also one whose window restarted after it
had ended). Given an address over its login limit, when it tries ever new
emails, then no counter is made per email; while the address is within its
limit, the per-email count still holds across addresses.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any


from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from proxy.routes.ratelimit import CounterSweeper
from tests.support.gatewayclient import PASSWORD, error_of, unique_email


async def counters(db: Database, prefix: str = "") -> list[str]:
    rows = await db.fetch("SELECT key FROM rate_limits WHERE key LIKE $1 || '%' ORDER BY key", prefix)
    return [row["key"] for row in rows]


async def test_counters_whose_window_ended_are_swept_and_live_ones_kept(db: Database) -> None:
    await repo.count_hits(db, ["short:a", "short:b", "restarted:c"], 1)
    await repo.count_hits(db, ["long:a"], 3600)
    await asyncio.sleep(1.2)
    assert (await repo.count_hits(db, ["restarted:c"], 1))["restarted:c"][0] == 1  # a new window
    sweeper = CounterSweeper(db, interval=0.1)
    await sweeper.start()
    try:
        for _ in range(50):
            if len(await counters(db)) == 2:
                break
            await asyncio.sleep(0.1)
    finally:
        await sweeper.stop(timeout=5)
    assert await counters(db) == ["long:a", "restarted:c"]
    assert (await repo.count_hits(db, ["long:a"], 3600))["long:a"][0] == 2  # untouched


async def test_a_sweep_of_many_counters_takes_them_all(db: Database) -> None:
    await db.fetch("""INSERT INTO rate_limits (key, window_start, hits, window_end)
                      SELECT 'flood:' || n, now() - interval '2 minutes', 1, now() - interval '1 minute'
                      FROM generate_series(1, 12000) AS n""")
    assert await CounterSweeper(db).sweep() == 12000
    assert await counters(db) == []


async def test_an_address_over_its_login_limit_adds_no_counter_per_email(make_gateway: Any, db: Database) -> None:
    gateway = await make_gateway(GATEWAY_RATE_LOGIN="2/60")
    statuses = []
    for _ in range(8):
        answer = await gateway.post("/api/v1/auth/login", json={"email": unique_email(), "password": "wrong!!"})
        statuses.append((await error_of(answer))[0])
    assert statuses == [401, 401] + [429] * 6
    assert len(await counters(db, "login-email:email:")) == 2


async def test_one_email_is_still_limited_across_addresses(make_gateway: Any) -> None:
    gateway = await make_gateway(GATEWAY_RATE_LOGIN="2/60", GATEWAY_TRUSTED_PROXIES="127.0.0.1")
    email = unique_email()
    statuses = []
    for address in ("198.51.100.1", "198.51.100.2", "198.51.100.3"):
        answer = await gateway.post("/api/v1/auth/login", json={"email": email, "password": "wrong!!"},
                                    headers={"X-Forwarded-For": address})
        statuses.append((await error_of(answer))[0])
    assert statuses == [401, 401, 429]


async def test_an_emails_limit_answers_alike_whether_or_not_it_has_an_account(make_gateway: Any) -> None:
    """The per-email counter is the account's when the email finds one
    (however it is spelled): its 429 must still read as an unknown email's."""
    gateway = await make_gateway(GATEWAY_RATE_LOGIN="2/60", GATEWAY_TRUSTED_PROXIES="127.0.0.1")
    known = unique_email()
    registered = await gateway.post("/api/v1/auth/register", json={"email": known, "password": PASSWORD})
    assert registered.status == 201
    answers = []
    for email in (known, unique_email()):
        for address in ("198.51.100.1", "198.51.100.2", "198.51.100.3"):
            answer = await gateway.post("/api/v1/auth/login", json={"email": email, "password": "wrong!!"},
                                        headers={"X-Forwarded-For": address})
            error = (await answer.json())["error"]
            answers.append((answer.status, error["code"], re.sub(r"\d+", "N", error["message"])))
    assert answers[:3] == answers[3:]
    assert [status for status, *_ in answers[:3]] == [401, 401, 429]
