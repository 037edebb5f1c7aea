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


def test_check_refuses_a_bind_of_any_clusterrole_but_the_member_roles() -> None:
    from provisioning.permissions import FORBIDDEN, evaluate, required_permissions

    required = required_permissions("tenant-admin")
    allowed = {**{p: True for p in required}, **{p: False for p in FORBIDDEN}}
    bind = {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["bind"]}
    members = {"resourceRules": [{**bind, "resourceNames": ["tenant-admin", "tenant-edit", "tenant-view"]}]}
    assert evaluate(required, allowed, reviews={"kube-system": members}).ok
    other = {"resourceRules": [{**bind, "resourceNames": ["tenant-view", "ops-admin"]}]}
    report = evaluate(required, allowed, reviews={"kube-system": other, "tenant-x": other})
    assert not report.ok
    assert report.excessive == ("bind clusterroles.rbac.authorization.k8s.io named ops-admin in namespaces "
                                "kube-system, tenant-x: lets the credential grant what it does not hold",)
    assert report.beyond_needs == ()
