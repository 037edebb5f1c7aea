"""Who may see, use and manage a workspace, and as which account
(provisioning.access): one decision, one status per error code, for every
route that asks. Pure."""

from __future__ import annotations

import datetime
import uuid

import pytest

from provisioning import access, roles
from provisioning.errors import Conflict, Forbidden, GatewayError, NotFound
from provisioning.models import Member, Role, User, Workspace

OWNER = User(uuid.uuid4(), "owner@example.test", is_admin=False)
STRANGER = User(uuid.uuid4(), "stranger@example.test", is_admin=False)
ADMIN = User(uuid.uuid4(), "admin@example.test", is_admin=True)
COLLEAGUE = User(uuid.uuid4(), "colleague@example.test", is_admin=False)
NOW = datetime.datetime.now(datetime.timezone.utc)


def workspace(status: str) -> Workspace:
    return Workspace(uuid.uuid4(), OWNER.id, f"tenant-{OWNER.id}", "sa-tenant-admin", "basic", status,  # type: ignore[arg-type]
                     NOW, service_account_uid="uid-owner")


def member_of(found: Workspace, user: User, role: Role, uid: str | None = None) -> Member:
    owner = user.id == found.user_id
    account = "sa-tenant-admin" if owner else f"member-{user.id}"
    return Member(found.id, user.id, role, account, found.service_account_uid if owner else uid, NOW)


@pytest.mark.parametrize("decide", [access.visible, access.usable, access.manageable])
def test_someone_elses_workspace_is_indistinguishable_from_none(decide: object) -> None:
    for user, found in ((STRANGER, workspace("provisioned")), (STRANGER, None), (OWNER, None)):
        with pytest.raises(NotFound) as refused:
            decide(user, found, None)  # type: ignore[operator]
        assert str(refused.value) == "no such workspace"


@pytest.mark.parametrize("decide", [access.visible, access.usable, access.manageable])
def test_a_former_member_is_told_what_a_stranger_is(decide: object) -> None:
    """Membership is the row: once it is gone (removed, or left), the
    workspace is as missing to them as to anyone else."""
    with pytest.raises(NotFound) as refused:
        decide(COLLEAGUE, workspace("provisioned"), None)  # type: ignore[operator]
    assert str(refused.value) == "no such workspace" and refused.value.status == 404


@pytest.mark.parametrize("status, refusal, code", [
    ("suspended", Forbidden, "workspace_suspended"),
    ("provisioning", Conflict, "workspace_not_ready"),
])
def test_a_workspace_is_usable_only_while_provisioned(status: str, refusal: type[GatewayError], code: str) -> None:
    for role in roles.ROLES:
        found = workspace(status)
        for user, member in ((OWNER, member_of(found, OWNER, "admin")), (ADMIN, None),
                             (COLLEAGUE, member_of(found, COLLEAGUE, role))):
            assert access.visible(user, found, member).status == status  # still visible, to show its state
            with pytest.raises(refusal) as refused:
                access.usable(user, found, member)
            assert refused.value.code == code


def test_the_owner_uses_the_workspace_as_its_own_account() -> None:
    found = workspace("provisioned")
    seat = access.usable(OWNER, found, member_of(found, OWNER, "admin"))
    assert seat.workspace is found and seat.role == "admin"
    assert (seat.service_account, seat.service_account_uid) == ("sa-tenant-admin", "uid-owner")


@pytest.mark.parametrize("role", ["admin", "edit", "view"])
def test_a_member_sees_and_uses_the_workspace_as_their_own_account_in_their_role(role: Role) -> None:
    found = workspace("provisioned")
    member = member_of(found, COLLEAGUE, role, uid="uid-colleague")
    assert access.visible(COLLEAGUE, found, member) is found
    seat = access.usable(COLLEAGUE, found, member)
    assert seat.member is member and seat.role == role
    assert (seat.service_account, seat.service_account_uid) == (f"member-{COLLEAGUE.id}", "uid-colleague")


def test_a_members_account_not_made_yet_is_a_seat_without_a_uid() -> None:
    """Made at their first credential (provisioning.members.seat), not when added."""
    found = workspace("provisioned")
    seat = access.usable(COLLEAGUE, found, member_of(found, COLLEAGUE, "edit"))
    assert seat.service_account == f"member-{COLLEAGUE.id}" and seat.service_account_uid is None


def test_a_gateway_admin_who_is_not_a_member_acts_as_the_owners_account() -> None:
    found = workspace("provisioned")
    assert access.visible(ADMIN, found, None) is found
    seat = access.usable(ADMIN, found, None)
    assert seat.member is None and seat.role == "admin"
    assert (seat.service_account, seat.service_account_uid) == ("sa-tenant-admin", "uid-owner")
    assert access.manageable(ADMIN, found, None) is found


def test_a_gateway_admin_who_is_a_member_acts_as_their_membership() -> None:
    found = workspace("provisioned")
    admin_user = User(COLLEAGUE.id, COLLEAGUE.email, is_admin=True)
    seat = access.usable(admin_user, found, member_of(found, admin_user, "view", uid="uid-v"))
    assert seat.role == "view" and seat.service_account == f"member-{COLLEAGUE.id}"
    assert access.manageable(admin_user, found, member_of(found, admin_user, "view")) is found  # still the gateway's admin


def test_the_workspaces_admins_manage_its_members() -> None:
    found = workspace("provisioned")
    assert access.manageable(OWNER, found, member_of(found, OWNER, "admin")) is found
    assert access.manageable(COLLEAGUE, found, member_of(found, COLLEAGUE, "admin")) is found


@pytest.mark.parametrize("role", ["edit", "view"])
def test_edit_and_view_members_cannot_manage_members(role: Role) -> None:
    for status in ("provisioned", "suspended"):
        found = workspace(status)
        with pytest.raises(Forbidden) as refused:
            access.manageable(COLLEAGUE, found, member_of(found, COLLEAGUE, role))
        assert refused.value.status == 403 and refused.value.code == "workspace_admin_required"
