"""Pure builders for the objects onboarding makes, and their API paths.

Every object carries the workspace label, so an operator can find all of a
tenant's objects with one selector and onboarding can tell its own objects
from somebody else's that merely share a name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from provisioning import roles, workload_rules
from provisioning.tiers import Tier, quantity_value
from provisioning.workload_rules import WorkloadRules

WORKSPACE_LABEL = "tenant-gateway.io/workspace-id"
# Set on a suspended workspace's namespace; deploy/kubernetes/admission.yaml
# then refuses every change made there by the namespace's own ServiceAccounts.
SUSPENDED_LABEL = "tenant-gateway.io/suspended"
MANAGED_BY = {"app.kubernetes.io/managed-by": "tenant-gateway"}
# Pod Security admission on every tenant namespace
# (workload_rules.pod_security_labels). Without it (the API server's default
# is "privileged") a tenant could run a privileged or hostPath pod and own
# the node, and with it every other tenant. "restricted" unless the tier
# says "baseline" (which refuses exactly those escapes and runs images as
# root); "restricted" is warned and audited either way. Tenants cannot
# relabel their namespace, and admission.yaml holds the gateway to those two
# levels.
TENANT_SERVICE_ACCOUNT = roles.OWNER_SERVICE_ACCOUNT
TENANT_ROLEBINDING = roles.OWNER_ROLEBINDING
QUOTA_NAME = "tenant-quota"
LIMITRANGE_NAME = "tenant-defaults"
ISOLATION_NAME = "tenant-isolation"

Manifest = dict[str, Any]


def namespace_for(user_id: object) -> str:
    return f"tenant-{user_id}"


def _metadata(name: str, workspace_id: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {WORKSPACE_LABEL: workspace_id, **MANAGED_BY}}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def namespace(name: str, workspace_id: str, rules: WorkloadRules = WorkloadRules()) -> Manifest:
    """The tenant's namespace: Pod Security at the tier's level, and the
    tier's byte caps and image allow-list where admission reads them."""
    meta = _metadata(name, workspace_id)
    meta["labels"].update(workload_rules.pod_security_labels(rules))
    meta["annotations"] = workload_rules.namespace_annotations(rules)
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def namespace_convergence(existing: Mapping[str, Any], rules: WorkloadRules) -> Convergence | None:
    """The merge patch that gives an existing namespace its tier's Pod
    Security level and caps (one onboarded before they existed, or whose
    tier changed); None if it has them. Annotations of the prefix the tier
    no longer writes are removed; nothing else is touched."""
    meta = existing.get("metadata") or {}
    have_labels: Mapping[str, str] = meta.get("labels") or {}
    have_notes: Mapping[str, str] = meta.get("annotations") or {}
    want_labels = workload_rules.pod_security_labels(rules)
    want_notes = workload_rules.namespace_annotations(rules)
    labels = {key: value for key, value in want_labels.items() if have_labels.get(key) != value}
    notes: dict[str, str | None] = {key: value for key, value in want_notes.items() if have_notes.get(key) != value}
    notes.update({key: None for key in have_notes
                  if key.startswith(workload_rules.ANNOTATION_PREFIX) and key not in want_notes})
    if not (labels or notes):
        return None
    words = [f"{key} {have_labels.get(key, 'unset')} -> {value}" for key, value in sorted(labels.items())]
    words += [f"{key} {have_notes.get(key, 'unset')!r} -> {value if value is None else repr(value)}"
              for key, value in sorted(notes.items())]
    patch: dict[str, Any] = {}
    if labels:
        patch["labels"] = labels
    if notes:
        patch["annotations"] = notes
    return Convergence({"metadata": patch}, ", ".join(words))


def service_account(ns: str, workspace_id: str, name: str = TENANT_SERVICE_ACCOUNT) -> Manifest:
    """A member's account: the owner's `sa-tenant-admin`, another's `member-<user id>`."""
    return {
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": _metadata(name, workspace_id, ns),
        # Tokens come only from TokenRequest; never auto-mount them into pods.
        "automountServiceAccountToken": False,
    }


def role_binding(ns: str, workspace_id: str, cluster_role: str, account: str = TENANT_SERVICE_ACCOUNT) -> Manifest:
    """A member's account bound to their role's ClusterRole (the binding is
    named after the account; the owner's is `tenant-admin`)."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": _metadata(roles.binding_name(account), workspace_id, ns),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}],
    }


def resource_quota(ns: str, workspace_id: str, tier: Tier) -> Manifest:
    return {
        "apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": _metadata(QUOTA_NAME, workspace_id, ns),
        "spec": {"hard": tier.quota},
    }


def _same_quantity(old: str | None, new: str | None) -> bool:
    if old is None or new is None:
        return old == new
    try:
        return quantity_value(old) == quantity_value(new)
    except ValueError:  # not ours to judge: the API server stored it
        return old == new


@dataclass(frozen=True)
class Convergence:
    """How to bring an existing object to what the tier says: a merge patch,
    and what it changes in words (for `tenant-gateway reconcile`)."""

    patch: Manifest
    described: str


def quota_convergence(existing: Mapping[str, Any], tier: Tier) -> Convergence | None:
    """The merge patch that makes an existing quota's `hard` the tier's,
    keys the tier no longer names removed (null); None if it already is.
    Quantities compare by value: the API server writes `1000m` back as `1`."""
    have: Mapping[str, str] = (existing.get("spec") or {}).get("hard") or {}
    want = tier.quota
    changed = {key: want.get(key) for key in sorted(set(have) | set(want))
               if not _same_quantity(have.get(key), want.get(key))}
    if not changed:
        return None
    words = ", ".join(f"{key} {have.get(key, 'unset')} -> {value if value is not None else 'unset'}"
                      for key, value in changed.items())
    return Convergence({"spec": {"hard": changed}}, words)


def limit_range(ns: str, workspace_id: str, tier: Tier) -> Manifest:
    return {
        "apiVersion": "v1", "kind": "LimitRange",
        "metadata": _metadata(LIMITRANGE_NAME, workspace_id, ns),
        "spec": {"limits": [{
            "type": "Container",
            "default": dict(tier.default_limits),
            "defaultRequest": dict(tier.default_requests),
        }]},
    }


def limit_range_convergence(existing: Mapping[str, Any], tier: Tier) -> Convergence | None:
    """The merge patch that makes an existing LimitRange's container
    defaults the tier's (a tier, or a release, that adds a default: without
    it a quota naming that resource refuses every pod that states none);
    None if they already are. Other entries of `spec.limits` are kept."""
    limits: list[Mapping[str, Any]] = list((existing.get("spec") or {}).get("limits") or [])
    ours = limit_range("", "", tier)["spec"]["limits"][0]
    found = next((entry for entry in limits if entry.get("type") == "Container"), None)
    if found is not None and all(
            set(found.get(field) or {}) == set(ours[field])
            and all(_same_quantity((found.get(field) or {}).get(key), value) for key, value in ours[field].items())
            for field in ("default", "defaultRequest")):
        return None
    words = []
    for field in ("default", "defaultRequest"):
        have: Mapping[str, str] = (found or {}).get(field) or {}
        want: Mapping[str, str] = ours[field]
        words += [f"{field}.{key} {have.get(key, 'unset')} -> {want.get(key, 'unset')}"
                  for key in sorted(set(have) | set(want)) if not _same_quantity(have.get(key), want.get(key))]
    kept = [entry for entry in limits if entry is not found]
    merged = {**(found or {}), **ours}
    return Convergence({"spec": {"limits": [*kept, merged]}}, ", ".join(words))


def network_isolation(ns: str, workspace_id: str) -> Manifest:
    """No other tenant's pods may connect to this tenant's pods.

    Ingress is allowed from the namespace itself and from every namespace
    that is not a tenant's (ingress controllers, monitoring: the platform),
    so only tenant-to-tenant traffic is cut. A tenant cannot take the
    workspace label off its namespace to pass as the platform, and may add
    policies of its own to let named tenants in. Egress is left open. Takes
    effect where the cluster's network plugin enforces NetworkPolicy.
    """
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": _metadata(ISOLATION_NAME, workspace_id, ns),
        "spec": {
            "podSelector": {},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [
                {"podSelector": {}},
                {"namespaceSelector": {"matchExpressions": [{"key": WORKSPACE_LABEL, "operator": "DoesNotExist"}]}},
            ]}],
        },
    }


@dataclass(frozen=True)
class Step:
    """One object to converge: where to POST it and where it lives once made."""

    kind: str
    collection: str
    name: str
    body: Manifest
    converge: Callable[[Mapping[str, Any]], Convergence | None] | None = None
    """For objects an existing workspace must follow when its tier changes:
    given the object found, what to change (None: nothing)."""

    @property
    def path(self) -> str:
        return f"{self.collection}/{self.name}"


def service_account_step(ns: str, workspace_id: str, name: str = TENANT_SERVICE_ACCOUNT) -> Step:
    return Step("ServiceAccount", f"/api/v1/namespaces/{ns}/serviceaccounts", name,
                service_account(ns, workspace_id, name))


def role_binding_step(ns: str, workspace_id: str, cluster_role: str, account: str = TENANT_SERVICE_ACCOUNT) -> Step:
    return Step("RoleBinding", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
                roles.binding_name(account), role_binding(ns, workspace_id, cluster_role, account))


def namespace_step(ns: str, workspace_id: str, tier: Tier) -> Step:
    return Step("Namespace", "/api/v1/namespaces", ns, namespace(ns, workspace_id, tier.rules),
                converge=lambda existing: namespace_convergence(existing, tier.rules))


def bounds_steps(ns: str, workspace_id: str, tier: Tier) -> list[Step]:
    """What keeps a namespace in bounds: quota, container defaults, network
    isolation. An existing workspace converges to these (`reconcile`)."""
    core = f"/api/v1/namespaces/{ns}"
    return [
        Step("ResourceQuota", f"{core}/resourcequotas", QUOTA_NAME, resource_quota(ns, workspace_id, tier),
             converge=lambda existing: quota_convergence(existing, tier)),
        Step("LimitRange", f"{core}/limitranges", LIMITRANGE_NAME, limit_range(ns, workspace_id, tier),
             converge=lambda existing: limit_range_convergence(existing, tier)),
        Step("NetworkPolicy", f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies", ISOLATION_NAME,
             network_isolation(ns, workspace_id)),
    ]


def onboarding_steps(ns: str, workspace_id: str, tier: Tier, cluster_role: str) -> list[Step]:
    """The contract's five objects and the network isolation, in dependency
    order: the namespace first, its bounds (quota, defaults, isolation)
    before anything could run in it, the ServiceAccount and its binding
    last (resume replaces the one and restores the other on their own)."""
    return [
        namespace_step(ns, workspace_id, tier),
        *bounds_steps(ns, workspace_id, tier),
        service_account_step(ns, workspace_id),
        role_binding_step(ns, workspace_id, cluster_role),
    ]


def suspended_label_patch(suspended: bool) -> Manifest:
    """A merge patch setting or removing (null) the suspension label."""
    return {"metadata": {"labels": {SUSPENDED_LABEL: "true" if suspended else None}}}


def token_request(ttl_seconds: int, audiences: list[str] | None = None,
                  bound_to: Mapping[str, str] | None = None) -> Manifest:
    """`bound_to`: the Secret (name and UID) whose deletion revokes the token."""
    spec: dict[str, Any] = {"expirationSeconds": ttl_seconds}
    if audiences:
        spec["audiences"] = audiences
    if bound_to is not None:
        spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Secret", **bound_to}
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}


CREDENTIAL_SECRET_TYPE = "tenant-gateway.io/credential"
"""The type of the Secrets issued tokens are bound to; admission.yaml lets
the gateway create (without data) and delete only these, and nobody else
touch them."""
CREDENTIAL_LABEL = "tenant-gateway.io/credential-id"


def credential_secret_name(credential_id: object) -> str:
    return f"credential-{credential_id}"


def credential_secret(ns: str, workspace_id: str, credential_id: str) -> Manifest:
    """The data-less Secret one issuance's token is bound to: deleting it
    revokes the token at the API server."""
    meta = _metadata(credential_secret_name(credential_id), workspace_id, ns)
    meta["labels"][CREDENTIAL_LABEL] = credential_id
    return {"apiVersion": "v1", "kind": "Secret", "type": CREDENTIAL_SECRET_TYPE, "metadata": meta}
