"""The objects onboarding creates: labels, bindings, network isolation, the
suspension label. Pure."""

from __future__ import annotations

from provisioning import manifests
from provisioning.tiers import parse_tiers


def test_manifests_carry_the_workspace_label_and_bind_only_in_namespace() -> None:
    tier = parse_tiers("basic: {requests.cpu: '4'}")["basic"]
    steps = manifests.onboarding_steps("tenant-u", "wid", tier, "tenant-admin")
    assert [s.kind for s in steps] == ["Namespace", "ResourceQuota", "LimitRange", "NetworkPolicy",
                                       "ServiceAccount", "RoleBinding"]
    assert all(s.body["metadata"]["labels"][manifests.WORKSPACE_LABEL] == "wid" for s in steps)
    binding = steps[-1].body
    assert binding["kind"] == "RoleBinding" and binding["metadata"]["namespace"] == "tenant-u"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "sa-tenant-admin", "namespace": "tenant-u"}]
    assert steps[-2].body["automountServiceAccountToken"] is False
    assert steps[0].body["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_network_isolation_admits_the_namespace_itself_and_the_platform_never_another_tenant() -> None:
    spec = manifests.network_isolation("tenant-u", "wid")["spec"]
    assert spec["podSelector"] == {} and spec["policyTypes"] == ["Ingress"]
    (rule,) = spec["ingress"]
    assert rule["from"] == [
        {"podSelector": {}},
        {"namespaceSelector": {"matchExpressions": [
            {"key": manifests.WORKSPACE_LABEL, "operator": "DoesNotExist"}]}},
    ]


def test_suspension_label_patch_sets_and_removes() -> None:
    assert manifests.suspended_label_patch(True) == {"metadata": {"labels": {manifests.SUSPENDED_LABEL: "true"}}}
    # A merge patch removes a key with null.
    assert manifests.suspended_label_patch(False) == {"metadata": {"labels": {manifests.SUSPENDED_LABEL: None}}}


def test_a_members_account_and_binding_are_named_for_them_and_bind_only_their_account() -> None:
    account = "member-6f1c"
    made = manifests.service_account("tenant-u", "wid", account)
    assert made["metadata"]["name"] == account and made["metadata"]["namespace"] == "tenant-u"
    assert made["automountServiceAccountToken"] is False
    binding = manifests.role_binding("tenant-u", "wid", "tenant-view", account)
    assert binding["metadata"]["name"] == account and binding["metadata"]["namespace"] == "tenant-u"
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "tenant-view"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": "tenant-u"}]
    for body in (made, binding):
        assert body["metadata"]["labels"] == {manifests.WORKSPACE_LABEL: "wid", **manifests.MANAGED_BY}


def test_a_members_steps_are_at_their_own_names() -> None:
    account = "member-6f1c"
    account_step = manifests.service_account_step("tenant-u", "wid", account)
    binding_step = manifests.role_binding_step("tenant-u", "wid", "tenant-edit", account)
    assert account_step.path == f"/api/v1/namespaces/tenant-u/serviceaccounts/{account}"
    assert binding_step.path == f"/apis/rbac.authorization.k8s.io/v1/namespaces/tenant-u/rolebindings/{account}"
    assert binding_step.body["roleRef"]["name"] == "tenant-edit"


def test_the_owners_account_and_binding_keep_their_names() -> None:
    assert manifests.service_account("tenant-u", "wid")["metadata"]["name"] == "sa-tenant-admin"
    owner = manifests.role_binding("tenant-u", "wid", "tenant-admin")
    assert owner["metadata"]["name"] == "tenant-admin"
    assert owner["subjects"] == [{"kind": "ServiceAccount", "name": "sa-tenant-admin", "namespace": "tenant-u"}]
    assert manifests.role_binding_step("tenant-u", "wid", "tenant-admin").name == "tenant-admin"
