"""Member roles (provisioning.roles): their names in requests, their
ClusterRoles, the accounts and bindings named for members, and what each
may do in words. Pure."""

from __future__ import annotations

import uuid

import pytest

from provisioning import roles
from provisioning.errors import BadRequest


@pytest.mark.parametrize("role", ["admin", "edit", "view"])
def test_the_three_roles_are_accepted_as_named(role: str) -> None:
    assert roles.parse_role(role) == role


@pytest.mark.parametrize("value", [None, "", "Admin", "owner", "cluster-admin", " view", 1, True, ["view"],
                                   {"role": "view"}])
def test_anything_else_is_400_unknown_role(value: object) -> None:
    with pytest.raises(BadRequest) as refused:
        roles.parse_role(value)
    assert refused.value.status == 400 and refused.value.code == "unknown_role"
    assert "admin, edit, view" in refused.value.message


def test_the_owner_is_sa_tenant_admin_everyone_else_their_own_account() -> None:
    user_id = uuid.uuid4()
    assert roles.member_account(user_id, owner=True) == "sa-tenant-admin"
    assert roles.member_account(user_id, owner=False) == f"member-{user_id}"
    assert roles.member_account(uuid.uuid4(), owner=False) != roles.member_account(user_id, owner=False)


def test_a_binding_is_named_for_its_account_the_owners_is_tenant_admin() -> None:
    assert roles.binding_name("sa-tenant-admin") == "tenant-admin"
    account = roles.member_account(uuid.uuid4(), owner=False)
    assert roles.binding_name(account) == account


def test_each_role_is_bound_to_its_own_cluster_role() -> None:
    default = roles.ClusterRoles()
    assert [default.of(r) for r in roles.ROLES] == ["tenant-admin", "tenant-edit", "tenant-view"]
    assert default.names() == ("tenant-admin", "tenant-edit", "tenant-view")
    configured = roles.ClusterRoles(admin="my-tenant-role")  # GATEWAY_TENANT_CLUSTERROLE
    assert configured.of("admin") == "my-tenant-role" and configured.of("view") == "tenant-view"
    assert configured.names() == ("my-tenant-role", "tenant-edit", "tenant-view")


def test_only_workspace_admins_and_gateway_admins_may_manage() -> None:
    assert roles.may_manage("admin", gateway_admin=False)
    assert not roles.may_manage("edit", gateway_admin=False) and not roles.may_manage("view", gateway_admin=False)
    assert not roles.may_manage(None, gateway_admin=False)
    assert roles.may_manage(None, gateway_admin=True) and roles.may_manage("view", gateway_admin=True)


def test_every_role_is_described_in_words_with_its_cluster_role() -> None:
    described = roles.describe(roles.ClusterRoles(admin="my-tenant-role"))
    assert [d["role"] for d in described] == ["admin", "edit", "view"]
    assert [d["cluster_role"] for d in described] == ["my-tenant-role", "tenant-edit", "tenant-view"]
    assert all(set(d) == {"role", "cluster_role", "description"} for d in described)
    assert [d["description"] for d in described] == [roles.WORDS[r] for r in roles.ROLES]
    assert "Secrets" in roles.WORDS["view"] and "members" in roles.WORDS["admin"]
