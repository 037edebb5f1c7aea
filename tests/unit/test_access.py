"""Who may see and use a workspace (provisioning.access): one decision,
one status per error code, for every route that asks. Pure."""

from __future__ import annotations

import datetime
import uuid

import pytest

from provisioning import access
from provisioning.errors import Conflict, Forbidden, GatewayError, NotFound
from provisioning.models import User, Workspace

OWNER = User(uuid.uuid4(), "owner@example.test", is_admin=False)
STRANGER = User(uuid.uuid4(), "stranger@example.test", is_admin=False)
ADMIN = User(uuid.uuid4(), "admin@example.test", is_admin=True)


def workspace(status: str) -> Workspace:
    return Workspace(uuid.uuid4(), OWNER.id, f"tenant-{OWNER.id}", "sa-tenant-admin", "basic", status,  # type: ignore[arg-type]
                     datetime.datetime.now(datetime.timezone.utc))


@pytest.mark.parametrize("decide", [access.visible, access.usable])
def test_someone_elses_workspace_is_indistinguishable_from_none(decide: object) -> None:
    for user, found in ((STRANGER, workspace("provisioned")), (STRANGER, None), (OWNER, None)):
        with pytest.raises(NotFound) as refused:
            decide(user, found)  # type: ignore[operator]
        assert str(refused.value) == "no such workspace"


@pytest.mark.parametrize("status, refusal, code", [
    ("suspended", Forbidden, "workspace_suspended"),
    ("provisioning", Conflict, "workspace_not_ready"),
])
def test_a_workspace_is_usable_only_while_provisioned(status: str, refusal: type[GatewayError], code: str) -> None:
    for user in (OWNER, ADMIN):
        assert access.visible(user, workspace(status)).status == status  # still visible, to show its state
        with pytest.raises(refusal) as refused:
            access.usable(user, workspace(status))
        assert refused.value.code == code


def test_the_owner_and_an_admin_may_use_a_provisioned_workspace() -> None:
    found = workspace("provisioned")
    assert access.usable(OWNER, found) is found and access.usable(ADMIN, found) is found
