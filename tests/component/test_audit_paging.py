"""The admins' audit route paged with its `before` cursor (the last row's
created_at and id), its people named by email and filtered by email; a
malformed cursor is 400, never a 500 nor an empty page."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from tests.support.gatewayclient import admin_session, error_of, login, register_and_login


async def audit(root: Any, **query: str) -> list[dict[str, Any]]:
    response = await root.call("GET", f"/api/v1/audit?{urlencode(query)}")
    assert response.status == 200, await response.text()
    return list(await response.json())


async def test_older_rows_are_reached_page_by_page_and_people_are_named(gateway: Any, database_url: str) -> None:
    # Given a person with a registration and five sign-ins, and a second person with their own
    person = await register_and_login(gateway)
    for _ in range(4):
        await login(gateway, person.email)
    other = await register_and_login(gateway)
    root = await admin_session(gateway, database_url)

    # When the admin reads the person's rows, by their email in other capitals, unpaged
    everything = await audit(root, email=person.email.upper())
    # Then they are the person's six, newest first, each named by email
    assert [row["action"] for row in everything] == ["Login"] * 5 + ["Register"]
    assert {row["user_id"] for row in everything} == {person.user_id}
    assert {row["email"] for row in everything} == {person.email}
    times = [row["created_at"] for row in everything]
    assert times == sorted(times, reverse=True)

    # When they page it two rows at a time, each page starting before the last row of the one before
    pages: list[list[dict[str, Any]]] = []
    before = ""
    while True:
        page = await audit(root, email=person.email, limit="2", **({"before": before} if before else {}))
        if not page:
            break
        pages.append(page)
        before = f"{page[-1]['created_at']},{page[-1]['id']}"
    # Then every row comes once, in the same order, and the oldest (the registration) is reached
    assert [len(page) for page in pages] == [2, 2, 2]
    assert [row["id"] for page in pages for row in page] == [row["id"] for row in everything]
    assert pages[-1][-1]["action"] == "Register"

    # And the cursor combines with the other filters; an email no one has matches nothing
    older_logins = await audit(root, email=person.email, action="Login",
                               before=f"{everything[1]['created_at']},{everything[1]['id']}")
    assert [row["id"] for row in older_logins] == [row["id"] for row in everything[2:5]]
    assert await audit(root, email="no-one-has-this@example.test") == []
    mine = await audit(root, email=other.email)
    assert {row["email"] for row in mine} == {other.email} and len(mine) == 2
    # And rows of no person carry email null
    assert all(row["email"] is None for row in await audit(root) if row["user_id"] is None)


async def test_a_malformed_cursor_is_400(gateway: Any, database_url: str) -> None:
    root = await admin_session(gateway, database_url)
    for before in ("nope", "2025-01-01T00:00:00+00:00", "2025-01-01T00:00:00+00:00,not-a-uuid",
                   ",00000000-0000-0000-0000-000000000000", "x" * 300):
        assert await error_of(await root.call("GET", f"/api/v1/audit?{urlencode({'before': before})}")) == (
            400, "invalid_cursor"), before
    assert (await error_of(await root.call("GET", f"/api/v1/audit?{urlencode({'email': 'a' * 300})}")))[0] == 400
    for query in ("before=2025-01-01T00:00:00%00,00000000-0000-0000-0000-000000000000", "email=a%00b@example.test"):
        assert (await root.call("GET", f"/api/v1/audit?{query}")).status < 500, query  # NUL: never a 500
    # A time without an offset is taken as UTC; either way a good cursor is 200
    for before in ("2025-01-01T00:00:00,00000000-0000-0000-0000-000000000000",
                   "2025-01-01T00:00:00Z,00000000-0000-0000-0000-000000000000"):
        assert (await root.call("GET", f"/api/v1/audit?{urlencode({'before': before})}")).status == 200
