"""Paging every workspace (`GET /api/v1/workspaces?all=true&limit=N&cursor=C`,
issue 41 item 5) against a real PostgreSQL: the pages, followed by their
cursors, are the unpaged listing, in the same order, each workspace once,
also for workspaces made in the same instant; and what is not a page query
is refused in the contract's shape."""

from __future__ import annotations

import uuid
from typing import Any

from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from tests.support.gatewayclient import admin_session, error_of, register_and_login


async def _workspaces(db: Database, count: int) -> list[str]:
    made = []
    for _ in range(count):
        user = await repo.create_user(db, f"paged-{uuid.uuid4().hex[:10]}@example.test", "not a hash")
        workspace, _ = await repo.claim_workspace(db, user.id, f"tenant-{user.id}", "sa-tenant-admin", "basic")
        made.append(str(workspace.id))
    return made


async def test_pages_followed_by_their_cursors_are_the_whole_listing_in_order(
        gateway: Any, db: Database, database_url: str) -> None:
    # Given five workspaces, two of them made in the same instant
    made = await _workspaces(db, 5)
    await db.fetch("UPDATE workspaces SET created_at = (SELECT created_at FROM workspaces WHERE id = $1) "
                     "WHERE id = $2", uuid.UUID(made[1]), uuid.UUID(made[2]))
    root = await admin_session(gateway, database_url)

    # When an administrator pages through them two at a time
    pages, cursor = [], None
    while True:
        answer = await root.call("GET", "/api/v1/workspaces?all=true&limit=2" + (f"&cursor={cursor}" if cursor else ""))
        assert answer.status == 200, await answer.text()
        body = await answer.json()
        pages.append([w["id"] for w in body["items"]])
        cursor = body["next"]
        if cursor is None:
            break
    unpaged = [w["id"] for w in await (await root.call("GET", "/api/v1/workspaces?all=true")).json()]

    # Then the pages are the unpaged listing, cut in twos, the last one short
    assert [len(page) for page in pages] == [2, 2, 1]
    assert [i for page in pages for i in page] == unpaged
    assert sorted(unpaged) == sorted(made)


async def test_a_page_of_the_default_size_names_no_next_page_when_it_is_the_last(
        gateway: Any, db: Database, database_url: str) -> None:
    await _workspaces(db, 3)
    root = await admin_session(gateway, database_url)
    body = await (await root.call("GET", "/api/v1/workspaces?all=true&limit=100")).json()
    assert len(body["items"]) == 3 and body["next"] is None


async def test_what_is_no_page_query_is_refused(gateway: Any, database_url: str) -> None:
    root = await admin_session(gateway, database_url)
    user = await register_and_login(gateway)
    for query, expected in (("all=true&limit=0", (400, "invalid_limit")), ("all=true&limit=501", (400, "invalid_limit")),
                            ("all=true&limit=x", (400, "invalid_limit")),
                            ("all=true&cursor=bm90LWpzb24", (400, "invalid_cursor")),
                            ("all=true&cursor=WyJ5ZXN0ZXJkYXkiLCJ4Il0", (400, "invalid_cursor")),
                            ("limit=10", (400, "invalid_query"))):
        assert await error_of(await root.call("GET", f"/api/v1/workspaces?{query}")) == expected, query
    assert await error_of(await user.call("GET", "/api/v1/workspaces?all=true&limit=10")) == (403, "admin_required")


async def test_every_workspace_read_a_page_at_a_time_is_each_workspace_once_in_order(db: Database) -> None:
    """What reconcile walks (repo.every_workspace): pages of 2 over 5
    workspaces, two made in the same instant across a page boundary."""
    made = await _workspaces(db, 5)
    await db.fetch("UPDATE workspaces SET created_at = (SELECT created_at FROM workspaces WHERE id = $1) "
                   "WHERE id = $2", uuid.UUID(made[2]), uuid.UUID(made[1]))
    walked = [str(w.id) async for w in repo.every_workspace(db, page=2)]
    assert walked == [str(w.id) for w in await repo.all_workspaces(db)]
    assert sorted(walked) == sorted(made)
