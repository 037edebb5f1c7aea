"""The gateway's credential against what it needs: the permission report, the
policy gaps `check` names, the confinement probes. Pure."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from provisioning.permissions import (FORBIDDEN, POLICIES, UNCONFINED, Permission, confinement_probes,
                                      evaluate, policy_gaps, required_permissions, rule_grants, rules_beyond,
                                      shipped_policies)
from tests.support.permissions import ADMISSION, CLUSTERROLES, as_installed, shipped_review


def _installed(name: str, selector: Any, **binding: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    match = {"namespaceSelector": selector} if selector is not None else {}
    spec = {"policyName": name, "validationActions": ["Deny"], "matchResources": match, **binding}
    return {"metadata": {"name": name}, "spec": {"failurePolicy": "Fail"}}, {"metadata": {"name": name}, "spec": spec}


def test_permission_report() -> None:
    required = required_permissions("tenant-admin")
    allowed = {p: True for p in required} | {p: False for p in FORBIDDEN}
    assert evaluate(required, allowed).ok
    assert evaluate(required, allowed, bypasses=(UNCONFINED,)).excessive == (UNCONFINED,)
    allowed[Permission("create", "serviceaccounts", subresource="token")] = False
    allowed[Permission("get", "secrets")] = True
    report = evaluate(required, allowed)
    assert [str(p) for p in report.missing] == ["create serviceaccounts/token cluster-wide"]
    assert [str(p) for p in report.excessive] == ["get secrets cluster-wide"]


def test_policy_gaps_name_every_bypass_of_the_shipped_policy_set() -> None:
    shipped = [_installed(name, selector) for name, selector in POLICIES.items()]
    policies, bindings = [p for p, _ in shipped], [b for _, b in shipped]
    assert policy_gaps(policies, bindings) == ()
    # Missing, failing open, warning only, narrowed, bound elsewhere: each is a bypass.
    assert policy_gaps(policies[1:], bindings) == (
        "ValidatingAdmissionPolicy tenant-gateway-no-long-lived-tokens (deploy/kubernetes/admission.yaml) is not installed",)
    ignore = [{**policies[2], "spec": {"failurePolicy": "Ignore"}}]
    assert "fails open" in policy_gaps(policies[:2] + ignore + policies[3:], bindings)[0]
    name, selector = "tenant-gateway-rolebinding-subjects", POLICIES["tenant-gateway-rolebinding-subjects"]
    others = [b for b in bindings if b["spec"]["policyName"] != name]
    for weakened in (_installed(name, selector, validationActions=["Warn"])[1],
                     _installed(name, {"matchLabels": {"x": "y"}})[1],
                     _installed(name, {**selector, "matchLabels": {"x": "y"}})[1],
                     {**_installed(name, selector)[1], "spec": {**_installed(name, selector)[1]["spec"],
                      "matchResources": {"namespaceSelector": selector, "objectSelector": {"matchLabels": {"a": "b"}}}}},
                     _installed("something-else", selector)[1]):
        assert policy_gaps(policies, others + [weakened]) == (
            f"ValidatingAdmissionPolicy {name} (deploy/kubernetes/admission.yaml) "
            "has no binding that denies in every namespace it guards",), weakened


def test_check_requires_every_policy_the_deployment_ships_as_shipped() -> None:
    """A wall added to admission.yaml but not to POLICIES would never be
    checked; one in POLICIES the file lacks would fail every `check`."""
    shipped = list(yaml.safe_load_all((Path(__file__).parents[2] / "deploy/kubernetes/admission.yaml").read_text()))
    policies = [d for d in shipped if d["kind"] == "ValidatingAdmissionPolicy"]
    bindings = [d for d in shipped if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert sorted(p["metadata"]["name"] for p in policies) == sorted(POLICIES)
    assert policy_gaps(policies, bindings) == ()


def test_confinement_probes_aim_at_a_tenant_namespace_when_there_is_one() -> None:
    assert [p.method for p in confinement_probes(None)] == ["POST", "POST", "POST"]
    probes = confinement_probes("tenant-x")
    assert [(p.method, p.path) for p in probes[3:]] == [("PATCH", "/api/v1/namespaces/tenant-x")] * 2 + [
        ("POST", "/api/v1/namespaces/tenant-x/secrets")] * 2 + [
        ("PATCH", "/apis/rbac.authorization.k8s.io/v1/namespaces/tenant-x/rolebindings/tenant-admin")]
    token_secret, secret_with_data = probes[5].body, probes[6].body
    assert token_secret["type"] == "kubernetes.io/service-account-token"
    assert secret_with_data["type"] == "tenant-gateway.io/credential" and secret_with_data["data"]
    assert probes[1].body["metadata"]["ownerReferences"] and probes[1].body["metadata"]["name"].startswith("tenant-")
    assert probes[2].body["spec"]["finalizers"] and probes[2].body["metadata"]["name"].startswith("tenant-")


def test_the_shipped_clusterrole_grants_exactly_what_the_code_needs() -> None:
    """No read the code never makes (list on quotas, limit ranges, accounts,
    network policies; get on tenant-admin): the cluster tests run on this
    role, so they prove the smaller set suffices."""
    role = next(d for d in yaml.safe_load_all(CLUSTERROLES.read_text()) if d["metadata"]["name"] == "tenant-gateway")
    granted = [p for rule in role["rules"] for p in rule_grants(rule)]
    assert len(granted) == len(set(granted))  # each once
    assert set(granted) == set(required_permissions("tenant-admin"))
    assert Permission("list", "resourcequotas") not in granted
    assert Permission("get", "clusterroles", "rbac.authorization.k8s.io", name="tenant-admin") not in granted


def test_rule_grants_spell_out_a_policy_rule() -> None:
    rule = {"apiGroups": ["", "apps"], "resources": ["pods/exec", "*"], "verbs": ["get"], "resourceNames": ["a"]}
    assert [str(p) for p in rule_grants(rule, "ns")] == [
        "get pods/exec named a in namespace ns", "get * named a in namespace ns",
        "get pods/exec.apps named a in namespace ns", "get *.apps named a in namespace ns"]


def test_the_shipped_credential_holds_nothing_beyond_its_needs() -> None:
    required = required_permissions("tenant-admin")
    assert rules_beyond({"kube-system": shipped_review(), "tenant-x": shipped_review()}, required) == ()


def test_every_grant_beyond_the_needs_is_named_once_with_where_it_was_seen() -> None:
    """What an operator might add: each is excessive, even where no fixed
    probe would ask about it."""
    required = required_permissions("tenant-admin")
    loosened, local = shipped_review(), shipped_review()
    loosened["resourceRules"] += [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["watch"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]},
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["bind"],
         "resourceNames": ["admin", "tenant-admin"]},
        {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["list"]},
    ]
    loosened["nonResourceRules"] += [{"verbs": ["get"], "nonResourceURLs": ["/metrics"]}]
    local["resourceRules"] += [{"apiGroups": [""], "resources": ["pods", "pods/exec"], "verbs": ["create"]},
                               {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]
    assert rules_beyond({"kube-system": loosened, "tenant-x": local}, required) == (
        "watch secrets in namespace kube-system: not a permission the gateway needs",
        "list configmaps in namespaces kube-system, tenant-x: not a permission the gateway needs",
        "bind clusterroles.rbac.authorization.k8s.io named admin in namespace kube-system: "
        "not a permission the gateway needs",
        "list serviceaccounts in namespace kube-system: not a permission the gateway needs",
        "create pods in namespace tenant-x: not a permission the gateway needs",
        "create pods/exec in namespace tenant-x: not a permission the gateway needs",
        "get non-resource URL /metrics: not a permission the gateway needs",
    )
    # Already named by a forbidden access review: not twice.
    assert not any(line.startswith("watch secrets") for line in
                   rules_beyond({"kube-system": loosened}, required, (Permission("watch", "secrets"),)))


def test_wildcards_are_beyond_any_need() -> None:
    admin = {"resourceRules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
             "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}
    assert rules_beyond({"kube-system": admin}, required_permissions("tenant-admin")) == (
        "* *.* in namespace kube-system: not a permission the gateway needs",
        "* non-resource URL *: not a permission the gateway needs")
    # Through evaluate, the forbidden `*` access review names it, once.
    required = required_permissions("tenant-admin")
    report = evaluate(required, {p: True for p in required + FORBIDDEN}, reviews={"kube-system": admin})
    assert [str(p) for p in report.excessive].count("* *.* cluster-wide") == 1
    assert not any(str(p).startswith("* *.* in namespace") for p in report.excessive)


def test_the_forbidden_probes_ask_each_verb_that_matters() -> None:
    """A fixed short list let `watch` secrets, `bind` admin, `create` pods and
    `get` pods/exec through."""
    asked = {str(p) for p in FORBIDDEN}
    for line in ("watch secrets cluster-wide", "get secrets cluster-wide", "patch secrets cluster-wide",
                 "deletecollection secrets cluster-wide", "create pods cluster-wide",
                 "get pods/exec cluster-wide", "create pods/attach cluster-wide", "create pods/portforward cluster-wide",
                 "bind clusterroles.rbac.authorization.k8s.io named admin cluster-wide",
                 "bind clusterroles.rbac.authorization.k8s.io named edit cluster-wide",
                 "bind clusterroles.rbac.authorization.k8s.io cluster-wide", "escalate roles.rbac.authorization.k8s.io cluster-wide",
                 "impersonate serviceaccounts cluster-wide", "impersonate uids.authentication.k8s.io cluster-wide",
                 "delete validatingadmissionpolicybindings.admissionregistration.k8s.io cluster-wide"):
        assert line in asked, line
    required = set(required_permissions("tenant-admin"))
    assert not required & set(FORBIDDEN)


def test_the_package_ships_admission_yaml_itself_and_check_reads_it() -> None:
    """Read at every check, not copied into code: a change to the file is
    the reference at once."""
    import provisioning

    assert (Path(provisioning.__file__).parent / "admission.yaml").read_text() == ADMISSION.read_text()
    shipped = shipped_policies()
    assert set(POLICIES) <= set(shipped)
    assert shipped == {d["metadata"]["name"]: d["spec"] for d in yaml.safe_load_all(ADMISSION.read_text())
                       if d and d["kind"] == "ValidatingAdmissionPolicy"}


def test_a_policy_that_is_not_the_shipped_one_is_a_bypass() -> None:
    shipped = shipped_policies()
    policies = [as_installed(name, spec) for name, spec in shipped.items()]
    bindings = [_installed(name, selector)[1] for name, selector in POLICIES.items()]
    assert policy_gaps(policies, bindings, shipped) == ()
    where = "ValidatingAdmissionPolicy {} (deploy/kubernetes/admission.yaml) is not the shipped one: "

    def changed(name: str, change: Any) -> tuple[str, ...]:
        edited = [copy.deepcopy(p) for p in policies]
        change(next(p["spec"] for p in edited if p["metadata"]["name"] == name))
        return policy_gaps(edited, bindings, shipped)

    tokens = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["serviceaccounts/token"]}
    assert changed("tenant-gateway-confined", lambda spec: spec["matchConstraints"].update(
        excludeResourceRules=[tokens])) == (
        where.format("tenant-gateway-confined") + "spec.matchConstraints.excludeResourceRules differs",)
    assert changed("tenant-gateway-no-gateway-grade-tokens", lambda spec: spec["matchConstraints"].update(
        objectSelector={"matchLabels": {"checked": "yes"}})) == (
        where.format("tenant-gateway-no-gateway-grade-tokens") + "spec.matchConstraints.objectSelector differs",)
    assert changed("tenant-gateway-no-external-ips", lambda spec: spec.update(
        matchConditions=[{"name": "not-mine", "expression": "false"}])) == (
        where.format("tenant-gateway-no-external-ips") + "spec.matchConditions differs",)
    assert changed("tenant-gateway-no-external-names", lambda spec: spec["validations"][0].update(
        expression="true")) == (where.format("tenant-gateway-no-external-names") + "spec.validations differs",)
    # A field only a newer API server fills in is a default, not a difference:
    # a cluster upgrade must not stop the gateway from starting.
    assert changed("tenant-gateway-confined", lambda spec: spec["matchConstraints"].update(
        someFutureDefault="Equivalent")) == ()
    # Failing open is said once, as before.
    assert changed("tenant-gateway-suspended", lambda spec: spec.update(failurePolicy="Ignore")) == (
        "ValidatingAdmissionPolicy tenant-gateway-suspended (deploy/kubernetes/admission.yaml) fails open "
        "(failurePolicy is not Fail)",)


def test_a_shipped_policy_check_does_not_know_by_name_must_be_installed_as_shipped() -> None:
    shipped = {**shipped_policies(), "tenant-gateway-new-wall": {"matchConstraints": {"resourceRules": []}}}
    policies = [as_installed(name, spec) for name, spec in shipped_policies().items()]
    bindings = [_installed(name, selector)[1] for name, selector in POLICIES.items()]
    assert policy_gaps(policies, bindings, shipped) == (
        "ValidatingAdmissionPolicy tenant-gateway-new-wall (deploy/kubernetes/admission.yaml) is not installed",)
