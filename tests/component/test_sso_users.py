"""A single-sign-on user's row takes the provider's claims only forward in
time (provisioning.db.repositories.sso_user), against PostgreSQL.

Given a row that took its claims from a token issued at some time, when a
token issued earlier is presented (a demoted admin's old ID token, still
within its expiry), then nothing changes; one issued at the same second may
take admin rights away but not give them; a newer one sets everything. The
real-provider version of the story is in tests/integration/test_sso.py.

And a sign-in that changes nothing the replicas act on tells them nothing:
`user_changed` (which cuts the user's streams on every replica) comes only
for a change of status, admin rights, email or provider.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import uuid
from typing import Any

import asyncpg

from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.models import AuditEvent

ISSUER = "https://idp.example/realms/org-a"
T0 = datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)


def at(seconds: int) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


class Person:
    """One subject at the provider, signing in with tokens of given claims."""

    def __init__(self, db: Database) -> None:
        self.db, self.subject = db, str(uuid.uuid4())

    async def signs_in(self, issued: int, *, admin: bool, email: str = "alice@org-a.example") -> Any:
        return await repo.sso_user(self.db, provider="org-a", issuer=ISSUER, subject=self.subject, email=email,
                                   is_admin=admin, issued_at=at(issued))

    async def row(self) -> Any:
        return await self.db.fetchrow(
            "SELECT xmin::text AS version, email, is_admin, oidc_claims_issued_at FROM users "
            "WHERE oidc_issuer = $1 AND oidc_subject = $2", ISSUER, self.subject)


async def test_an_older_token_cannot_give_back_what_a_newer_one_took(db: Database) -> None:
    alice = Person(db)
    assert (await alice.signs_in(0, admin=True)).is_admin
    demoted = await alice.signs_in(60, admin=False, email="alice@new.example")
    assert not demoted.is_admin and demoted.email == "alice@new.example"
    # The old token, still within its expiry: the row stays as the newer one left it.
    replayed = await alice.signs_in(0, admin=True)
    assert (replayed.id, replayed.is_admin, replayed.email) == (demoted.id, False, "alice@new.example")
    assert (await alice.row())["oidc_claims_issued_at"] == at(60)
    # A newer token may make her an admin again.
    assert (await alice.signs_in(120, admin=True)).is_admin


async def test_a_token_of_the_same_second_may_only_take_admin_rights_away(db: Database) -> None:
    alice = Person(db)
    await alice.signs_in(0, admin=False)
    assert not (await alice.signs_in(0, admin=True)).is_admin
    bob = Person(db)
    await bob.signs_in(0, admin=True)
    lowered = await bob.signs_in(0, admin=False, email="bob@renamed.example")
    assert not lowered.is_admin and lowered.email == "bob@renamed.example"
    assert not (await bob.signs_in(0, admin=True)).is_admin


async def test_a_row_from_before_issue_times_were_kept_takes_any_token(db: Database) -> None:
    alice = Person(db)
    await alice.signs_in(60, admin=True)
    await db.fetch("UPDATE users SET oidc_claims_issued_at = NULL WHERE oidc_subject = $1", alice.subject)
    assert not (await alice.signs_in(0, admin=False)).is_admin
    assert (await alice.row())["oidc_claims_issued_at"] == at(0)


async def test_a_sign_in_that_changes_nothing_writes_nothing(db: Database) -> None:
    alice = Person(db)
    await alice.signs_in(60, admin=True)
    before = await alice.row()
    await alice.signs_in(60, admin=True)  # the same token again (another replica's first sight of it)
    await alice.signs_in(30, admin=False)  # an older one
    assert (await alice.row())["version"] == before["version"]


async def test_a_password_account_with_the_same_email_is_never_touched(db: Database) -> None:
    local = await repo.create_user(db, "carol@org-a.example", "not-a-real-hash", is_admin=False)
    carol = Person(db)
    user = await carol.signs_in(0, admin=True, email="carol@org-a.example")
    assert user.id != local.id
    assert not (await repo.get_user(db, local.id)).is_admin


async def test_only_a_change_the_replicas_act_on_tells_them(db: Database, database_url: str) -> None:
    events: list[dict[str, str]] = []
    listener = await asyncpg.connect(database_url)
    await listener.add_listener(repo.EVENTS_CHANNEL, lambda *args: events.append(json.loads(args[3])))

    async def told() -> list[str]:
        await asyncio.sleep(0.3)  # NOTIFY arrives at commit; give it time to cross
        said = [event["kind"] for event in events]
        events.clear()
        return said

    try:
        alice = Person(db)
        user = await alice.signs_in(0, admin=False)
        assert await told() == []  # made, not changed
        await alice.signs_in(60, admin=False)  # a later sign-in: only the issue time moves
        await alice.signs_in(60, admin=False)  # and the same token again
        assert await told() == []
        await alice.signs_in(120, admin=True)
        assert await told() == ["user_changed"]
        await alice.signs_in(180, admin=True, email="alice@renamed.example")
        assert await told() == ["user_changed"]
        await repo.set_user_status(db, user.id, "suspended", AuditEvent("SuspendUser", None, None, None, {}))
        assert await told() == ["user_changed"]
    finally:
        await listener.close()
