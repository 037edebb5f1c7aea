"""The pure parts of team workspaces (provisioning.members): the token
cache's grace after a member's objects were deleted, and which group
binding a sign-in grants. Pure."""

from __future__ import annotations

import datetime
import uuid

from provisioning import members
from provisioning.kube.tokens import TOKEN_CACHE_GRACE_SECONDS
from provisioning.models import GroupBinding, Member, Role

NOW = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.timezone.utc)


def member(revoked_at: datetime.datetime | None) -> Member:
    user_id = uuid.uuid4()
    return Member(uuid.uuid4(), user_id, "edit", f"member-{user_id}", None, NOW, revoked_at=revoked_at)


def test_no_grace_for_a_member_whose_objects_were_never_deleted() -> None:
    assert members.grace_left(member(None), NOW) == 0.0


def test_new_objects_wait_out_the_token_caches_grace_after_a_revocation() -> None:
    assert members.grace_left(member(NOW), NOW) == TOKEN_CACHE_GRACE_SECONDS
    four_ago = NOW - datetime.timedelta(seconds=4)
    assert members.grace_left(member(four_ago), NOW) == TOKEN_CACHE_GRACE_SECONDS - 4
    long_ago = NOW - datetime.timedelta(seconds=TOKEN_CACHE_GRACE_SECONDS + 1)
    assert members.grace_left(member(long_ago), NOW) == 0.0
    assert members.grace_left(member(NOW - datetime.timedelta(seconds=TOKEN_CACHE_GRACE_SECONDS)), NOW) == 0.0


def binding(workspace_id: uuid.UUID, group: str, role: Role) -> GroupBinding:
    return GroupBinding(workspace_id, "realm-a", group, role, None, NOW)


def test_per_workspace_the_binding_granting_the_most_wins_whatever_the_order() -> None:
    first, second = uuid.uuid4(), uuid.uuid4()
    bindings = [binding(first, "readers", "view"), binding(first, "admins", "admin"), binding(first, "devs", "edit"),
                binding(second, "readers", "view")]
    for ordered in (bindings, list(reversed(bindings))):
        chosen = members.strongest(ordered)
        assert set(chosen) == {first, second}
        assert (chosen[first].group, chosen[first].role) == ("admins", "admin")
        assert chosen[second].role == "view"


def test_of_equal_bindings_the_first_is_kept_and_none_grant_nothing() -> None:
    workspace_id = uuid.uuid4()
    chosen = members.strongest([binding(workspace_id, "one", "edit"), binding(workspace_id, "two", "edit")])
    assert chosen[workspace_id].group == "one"
    assert members.strongest([]) == {}
