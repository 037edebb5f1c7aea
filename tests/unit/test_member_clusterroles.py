"""The member roles' ClusterRoles as deploy/kubernetes/clusterroles.yaml ships them."""

from __future__ import annotations

from typing import Any

import yaml

from tests.support.permissions import CLUSTERROLES


def _grants(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    """Every (group, resource, verb) a role's rules grant: a rule's lists multiply."""
    return {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def test_a_workspace_admin_holds_everything_the_other_roles_grant() -> None:
    """So an admin member can bind tenant-edit or tenant-view to their
    workloads: RBAC refuses a binding that grants what the binder lacks."""
    shipped = {d["metadata"]["name"]: d for d in yaml.safe_load_all(CLUSTERROLES.read_text()) if d}
    admin = _grants(shipped["tenant-admin"])
    for name in ("tenant-edit", "tenant-view"):
        assert _grants(shipped[name]) - admin == set(), name
