"""The gateway's self-check: does its own credential hold exactly what it needs,
and do the admission policies that hold the walls stand?

Each probe is a SelfSubjectAccessReview, which asks the real authorizer
(RBAC, webhooks, whatever the cluster runs), so the answer is the cluster's,
not our reading of Role objects. `required_permissions` is exactly
deploy/kubernetes's ClusterRole `tenant-gateway`; `FORBIDDEN` is what a
compromised gateway must not be able to do. Beyond those fixed questions,
SelfSubjectRulesReviews (in kube-system and a tenant namespace) list what
RBAC grants; every grant neither required, forbidden nor held by every
authenticated user is noted (not refused). The comparisons are pure; the
I/O is `probe_permissions`'s (the cluster) and `shipped_policies`'s (the
packaged admission.yaml).

RBAC cannot keep the gateway's cluster-wide grants out of kube-system, nor
stop it handing a tenant namespace to the garbage collector through
ownerReferences or finalizers; the admission policy `tenant-gateway-confined`
does. Dry-run writes show whether it is in force for this credential:
admission runs for dry runs, nothing is stored. A dry run answered NotFound
never reached admission: it proves nothing, and is reported `unproven`.

The walls between tenants are admission policies the gateway's credential is
never subject to, so no dry run of its own can prove them. `check` reads them
instead: every policy in `POLICIES` must be installed, fail closed, and be
bound with `Deny` to exactly the namespaces it guards. A missing policy, a
binding in `Warn`/`Audit` only or one narrowed to fewer namespaces is a
bypass, and refused like an excessive permission. Each installed policy's
spec must also be the shipped one (admission.yaml, shipped in this package as
provisioning/admission.yaml and read at every check): a policy narrowed by an
excludeResourceRules, a matchCondition or an edited expression is a bypass too.
"""

from __future__ import annotations

import asyncio
import copy
import importlib.resources
import uuid
from dataclasses import dataclass, replace
from typing import Any, Mapping

import yaml

from provisioning import manifests
from provisioning.errors import GatewayError
from provisioning.kube.client import KubeApi
from provisioning.kube.errors import KubeAPIError, KubeForbidden, KubeNotFound
from provisioning.roles import ClusterRoles


@dataclass(frozen=True)
class Permission:
    verb: str
    resource: str
    group: str = ""
    subresource: str = ""
    name: str = ""
    namespace: str = ""

    @property
    def action(self) -> str:
        """What it allows, wherever: `get pods/exec`, `bind clusterroles.rbac.authorization.k8s.io named x`."""
        what = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        if self.group:
            what = f"{what}.{self.group}"
        where = f" named {self.name}" if self.name else ""
        return f"{self.verb} {what}{where}"

    def covers(self, other: "Permission") -> bool:
        """This grant (held without a name: every name) allows `other`, in any namespace."""
        return ((self.verb, self.resource, self.group, self.subresource)
                == (other.verb, other.resource, other.group, other.subresource)
                and self.name in ("", other.name))

    def __str__(self) -> str:
        scope = f" in namespace {self.namespace}" if self.namespace else " cluster-wide"
        return f"{self.action}{scope}"

    def review(self) -> dict[str, object]:
        attributes = {"verb": self.verb, "resource": self.resource, "group": self.group}
        for key, value in (("subresource", self.subresource), ("name", self.name), ("namespace", self.namespace)):
            if value:
                attributes[key] = value
        return {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }


_RBAC = "rbac.authorization.k8s.io"
_ADMISSION = "admissionregistration.k8s.io"


def rule_grants(rule: Mapping[str, Any], namespace: str = "") -> tuple[Permission, ...]:
    """Each (verb, resource, name) an RBAC PolicyRule grants, as a ClusterRole
    or a SelfSubjectRulesReview spells it ("*" stays "*")."""
    return tuple(Permission(verb, base, group, sub, name, namespace)
                 for group in rule.get("apiGroups") or []
                 for base, _, sub in (resource.partition("/") for resource in rule.get("resources") or [])
                 for verb in rule.get("verbs") or []
                 for name in rule.get("resourceNames") or [""])


def required_permissions(tenant_cluster_role: str) -> tuple[Permission, ...]:
    """Every request the code makes with the gateway's credential, and
    nothing more (the ClusterRole `tenant-gateway` grants exactly these).
    `create` is onboarding's (onboarding.converge_object, and resume and
    reconcile through it); `get` is its adoption of an object an earlier
    attempt made (the same function, on AlreadyExists)."""
    # list (namespaces): check's own search for a tenant namespace to probe;
    # patch: the suspension label (suspension.suspend / resume).
    needed = [Permission(v, "namespaces") for v in ("create", "get", "list", "patch")]
    # patch: the quota follows its tier (resume, reconcile: quota_convergence).
    needed += [Permission(v, "resourcequotas") for v in ("create", "get", "patch")]
    # patch: the container defaults follow the tier (limit_range_convergence).
    needed += [Permission(v, "limitranges") for v in ("create", "get", "patch")]
    # delete, patch (serviceaccounts, rolebindings): suspension deletes them
    # and lets go of one a finalizer holds (suspension._delete_now); list
    # (rolebindings): suspension deletes every binding in the namespace.
    needed += [Permission(v, "serviceaccounts") for v in ("create", "get", "delete", "patch")]
    needed += [Permission("create", "serviceaccounts", subresource="token")]  # kube.tokens.request_token
    # Issued tokens' binding Secrets (credentials.issue_token, revocation.unbind);
    # tenant-gateway-confined holds both to data-less Secrets of the gateway's type.
    needed += [Permission(v, "secrets") for v in ("create", "delete")]
    needed += [Permission(v, "networkpolicies", "networking.k8s.io") for v in ("create", "get")]
    needed += [Permission(v, "rolebindings", _RBAC) for v in ("create", "get", "list", "delete", "patch")]
    # bind: each member role's ClusterRole (members.seat, change_role), by name.
    needed += [Permission("bind", "clusterroles", _RBAC, name=name)
               for name in ClusterRoles(admin=tenant_cluster_role).names()]
    needed += [Permission("list", r, "admissionregistration.k8s.io")  # check reads the tenant policies
               for r in ("validatingadmissionpolicies", "validatingadmissionpolicybindings")]
    return tuple(needed)


def _verbs(verbs: str, resource: str, group: str = "", **where: str) -> tuple[Permission, ...]:
    return tuple(Permission(verb, resource, group, **where) for verb in verbs.split())


# What a compromised gateway must not be able to do, asked of the real
# authorizer (webhooks included) one by one. Cluster-wide reviews see only
# ClusterRoleBindings; the rules reviews below see RoleBindings too.
FORBIDDEN: tuple[Permission, ...] = (
    Permission("*", "*", "*"),
    # Secrets hold tokens and passwords. create and delete are held, for
    # issued tokens' binding Secrets only (the confinement policy, proven by
    # `confinement_probes`); reading them any other way must stay impossible.
    *_verbs("get list watch update patch deletecollection", "secrets"),
    *_verbs("get list watch", "secrets", namespace="kube-system"),
    # A pod runs as any ServiceAccount of its namespace and can mount the
    # node; exec/attach/portforward are `create` (and `get` over WebSockets).
    *_verbs("get list watch create", "pods"),
    *(Permission(verb, "pods", subresource=sub) for sub in ("exec", "attach", "portforward") for verb in ("create", "get")),
    Permission("patch", "pods", subresource="ephemeralcontainers"),
    Permission("get", "pods", subresource="log"),
    *_verbs("get list watch create patch", "deployments", "apps"),
    # Whatever makes pods makes them with any account of its namespace.
    *(Permission("create", resource, group) for resource, group in (
        ("daemonsets", "apps"), ("statefulsets", "apps"), ("replicasets", "apps"), ("jobs", "batch"),
        ("cronjobs", "batch"), ("replicationcontrollers", ""))),
    Permission("get", "nodes", subresource="proxy"), Permission("create", "nodes", subresource="proxy"),
    *(Permission("impersonate", resource) for resource in ("users", "groups", "serviceaccounts")),
    Permission("impersonate", "uids", "authentication.k8s.io"),
    # RBAC: grant what it does not hold. Bind is held for the three member roles only.
    Permission("escalate", "clusterroles", _RBAC), Permission("escalate", "roles", _RBAC),
    Permission("bind", "clusterroles", _RBAC), Permission("bind", "roles", _RBAC),
    *(Permission("bind", "clusterroles", _RBAC, name=role) for role in ("cluster-admin", "admin", "edit", "view")),
    *_verbs("create update patch", "clusterroles", _RBAC),
    *_verbs("create update patch", "clusterrolebindings", _RBAC),
    *_verbs("delete deletecollection", "namespaces"),
    # The walls themselves: a credential that can change admission can lift them.
    *(Permission(verb, resource, _ADMISSION) for resource in (
        "validatingadmissionpolicies", "validatingadmissionpolicybindings",
        "validatingwebhookconfigurations", "mutatingwebhookconfigurations")
      for verb in ("create", "update", "patch", "delete")),
    Permission("update", "certificatesigningrequests", "certificates.k8s.io", subresource="approval"),
)

# Held by every authenticated user through Kubernetes' bootstrap roles
# (system:basic-user, system:discovery, system:public-info-viewer,
# system:service-account-issuer-discovery), the gateway included; `check`
# itself needs the first two. Not excessive when a rules review shows them.
EVERYONE_HOLDS: tuple[Permission, ...] = (
    Permission("create", "selfsubjectaccessreviews", "authorization.k8s.io"),
    Permission("create", "selfsubjectrulesreviews", "authorization.k8s.io"),
    Permission("create", "selfsubjectreviews", "authentication.k8s.io"),
)
EVERYONE_READS: frozenset[str] = frozenset({
    "/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*", "/healthz", "/livez", "/readyz", "/version",
    "/version/", "/.well-known/openid-configuration", "/.well-known/openid-configuration/", "/openid/v1/jwks",
    "/openid/v1/jwks/"})
BEYOND_NEEDS = "not a permission the gateway needs"


def rules_beyond(reviews: Mapping[str, Mapping[str, Any]], needed: tuple[Permission, ...],
                 named: tuple[Permission, ...] = ()) -> tuple[str, ...]:
    """Every grant the SelfSubjectRulesReviews (status, by namespace) show
    that neither `needed` nor `EVERYONE_HOLDS` covers: one line each, saying
    where it was seen. `named`: forbidden permissions already reported, not
    repeated. A review an authorizer could not complete (`incomplete`, e.g.
    a webhook) shows what RBAC grants; the access reviews ask the rest."""
    allowed = needed + EVERYONE_HOLDS
    seen: dict[str, list[str]] = {}
    reads: dict[str, None] = {}
    for namespace, status in reviews.items():
        for rule in status.get("resourceRules") or []:
            for grant in rule_grants(rule, namespace):
                if any(p.covers(grant) for p in allowed) or any(p.action == grant.action for p in named):
                    continue
                where = seen.setdefault(grant.action, [])
                if namespace not in where:
                    where.append(namespace)
        for rule in status.get("nonResourceRules") or []:
            for verb in rule.get("verbs") or []:
                for url in rule.get("nonResourceURLs") or []:
                    if verb != "get" or url not in EVERYONE_READS:
                        reads[f"{verb} non-resource URL {url}"] = None
    return (tuple(f"{action} in namespace{'s' if len(where) > 1 else ''} {', '.join(where)}: {BEYOND_NEEDS}"
                  for action, where in seen.items())
            + tuple(f"{read}: {BEYOND_NEEDS}" for read in reads))


GRANTS_ROLES = "lets the credential grant what it does not hold"


def role_grants_beyond(reviews: Mapping[str, Mapping[str, Any]], needed: tuple[Permission, ...],
                       named: tuple[Permission, ...] = ()) -> dict[Permission, list[str]]:
    """Grants the rules reviews show that are refused, not noted: binding or
    escalating a role the gateway need not bind (any ClusterRole but the
    member roles'), or impersonating. The FORBIDDEN probes ask about the
    well-known roles by name; a grant naming any other is as bad. Each
    (without its namespace) with where it was seen."""
    seen: dict[Permission, list[str]] = {}
    for namespace, status in reviews.items():
        for rule in status.get("resourceRules") or []:
            for grant in rule_grants(rule, namespace):
                if grant.verb not in ("bind", "escalate", "impersonate") \
                        or any(p.covers(grant) for p in needed + EVERYONE_HOLDS) \
                        or any(p.action == grant.action for p in named):
                    continue
                where = seen.setdefault(replace(grant, namespace=""), [])
                if namespace not in where:
                    where.append(namespace)
    return seen


_POLICY_FILE = "deploy/kubernetes/admission.yaml"
_CONFINED = f"ValidatingAdmissionPolicy tenant-gateway-confined ({_POLICY_FILE}) is not in force for this credential"
UNCONFINED = f"writes outside tenant namespaces are admitted: {_CONFINED}"


@dataclass(frozen=True)
class WriteProbe:
    """A dry-run write the confinement policy must refuse; `admitted` says
    what it means when the API server lets it through."""

    method: str
    path: str
    body: dict[str, Any]
    admitted: str

    def unproven(self, why: str) -> str:
        """The line for a probe that could not be made: admission never ran."""
        return _unproven(why, self.admitted)


def _unproven(why: str, admitted: str) -> str:
    return f"not shown refused, the probe could not be made ({why}): {admitted}"


_OWNER = {"apiVersion": "v1", "kind": "ConfigMap", "name": "tenant-gateway-probe",
          "uid": "00000000-0000-0000-0000-000000000000"}


def confinement_probes(tenant_namespace: str | None, *, rolebinding: bool = True) -> tuple[WriteProbe, ...]:
    """What a stolen gateway credential would try. The namespace probes need
    a tenant namespace to aim at; before the first onboarding there is none
    to lose, and creation is probed instead. `rolebinding`: the namespace
    holds the tenant RoleBinding the last probe patches (see
    `rolebinding_unproven` when none does)."""
    owned_namespace = manifests.namespace("tenant-gateway-confinement-probe", "probe")
    owned_namespace["metadata"]["ownerReferences"] = [_OWNER]
    undeletable_namespace = manifests.namespace("tenant-gateway-confinement-probe", "probe")
    undeletable_namespace["spec"] = {"finalizers": ["tenant-gateway.io/probe"]}
    probes = [
        WriteProbe("POST", "/api/v1/namespaces/kube-system/serviceaccounts",
                   {"metadata": {"name": "tenant-gateway-confinement-probe"}}, UNCONFINED),
        WriteProbe("POST", "/api/v1/namespaces", owned_namespace,
                   f"namespaces with ownerReferences can be created (the garbage collector would delete them): {_CONFINED}"),
        WriteProbe("POST", "/api/v1/namespaces", undeletable_namespace,
                   f"namespaces with finalizers of their own can be created (they could never finish deleting): {_CONFINED}"),
    ]
    if tenant_namespace is not None:
        path = f"/api/v1/namespaces/{tenant_namespace}"
        probes += [
            WriteProbe("PATCH", path, {"metadata": {"ownerReferences": [_OWNER]}},
                       f"tenant namespaces can be re-parented (ownerReferences): {_CONFINED}"),
            WriteProbe("PATCH", path, {"metadata": {"finalizers": ["tenant-gateway.io/probe"]}},
                       f"tenant namespaces can be given finalizers: {_CONFINED}"),
        ]
        secrets = f"{path}/secrets"
        probes += [
            WriteProbe("POST", secrets, {"apiVersion": "v1", "kind": "Secret",
                                         "type": "kubernetes.io/service-account-token", "metadata": {
                                             "name": "tenant-gateway-confinement-probe",
                                             "annotations": {"kubernetes.io/service-account.name": "default"}}},
                       f"service-account-token Secrets can be created (filled with a token for any account): "
                       f"{_CONFINED}"),
            WriteProbe("POST", secrets, {"apiVersion": "v1", "kind": "Secret", "type": manifests.CREDENTIAL_SECRET_TYPE,
                                         "metadata": {"name": "tenant-gateway-confinement-probe"},
                                         "data": {"probe": "cHJvYmU="}},
                       f"Secrets with data can be created in tenant namespaces: {_CONFINED}"),
        ]
        if rolebinding:
            probes.append(_rolebinding_probe(tenant_namespace))
    return tuple(probes)


_ROLEBINDING_OPENED = f"tenant RoleBindings can be changed (opened to everyone): {_CONFINED}"
_SECRET_READ = f"a Secret can be read through delete ({{how}} answers with the whole object): {_CONFINED}"


def secret_delete_probes(path: str) -> tuple[WriteProbe, ...]:
    """The deletes that would answer with a whole Secret (`path`), each a
    dry run: an orphaning one, a foreground one, and a plain one (the dry
    run alone reads it without deleting it)."""
    # The dry run is in the body too: the API server takes a DELETE's
    # options from its body when it has one, the query's dryRun with them.
    dry = {"apiVersion": "v1", "kind": "DeleteOptions", "dryRun": ["All"]}
    return tuple(WriteProbe("DELETE", path, body, _SECRET_READ.format(how=how)) for body, how in (
        ({**dry, "propagationPolicy": "Orphan"}, "an orphaning delete"),
        ({**dry, "propagationPolicy": "Foreground"}, "a foreground delete"),
        (dry, "a dry-run delete")))


async def _secret_delete_outcomes(kube: KubeApi, tenant: str | None) -> list[tuple[WriteProbe, bool | str]]:
    """The delete probes, aimed at a Secret that exists (one that does not
    answers NotFound before admission runs): a binding Secret of the
    gateway's own, made for the check in the tenant namespace probed and
    deleted after it. A Secret that is not the gateway's is refused by the
    same rule's type test first; the attack tests show it
    (tests/attacks/test_credential_secrets.py)."""
    if tenant is None:
        return []
    name = manifests.credential_secret_name(f"check-{uuid.uuid4().hex[:12]}")
    secrets = f"/api/v1/namespaces/{tenant}/secrets"
    body = {"apiVersion": "v1", "kind": "Secret", "type": manifests.CREDENTIAL_SECRET_TYPE,
            "metadata": {"name": name, "labels": {**manifests.MANAGED_BY}}}
    probes = secret_delete_probes(f"{secrets}/{name}")
    try:
        await kube.create(secrets, body)
    except KubeAPIError as error:  # `create secrets` missing is reported as such
        return [(probe, f"no Secret to aim at ({error.message})") for probe in probes]
    try:
        return [(probe, await _admitted(kube, probe)) for probe in probes]
    finally:
        try:
            await kube.delete(f"{secrets}/{name}")
        except KubeAPIError:
            pass


def _rolebinding_probe(tenant_namespace: str) -> WriteProbe:
    # patch is held to let go of a binding being deleted, nothing more.
    return WriteProbe("PATCH", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{tenant_namespace}/rolebindings/"
                               f"{manifests.TENANT_ROLEBINDING}",
                      {"subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                                     "name": "system:authenticated"}]},
                      _ROLEBINDING_OPENED)


def rolebinding_unproven(sampled: int, cluster_role: str) -> str:
    """Tenant namespaces exist, but none sampled holds the RoleBinding to
    patch: a missing one answers NotFound before admission runs, which
    proves nothing (and a tenant can delete its own)."""
    return _unproven(f"none of the {sampled} tenant namespaces sampled holds RoleBinding "
                     f"{manifests.TENANT_ROLEBINDING} of ClusterRole {cluster_role}", _ROLEBINDING_OPENED)


# The admission policies in deploy/kubernetes/admission.yaml and the
# namespaces each must be bound to (None: every request, no selector).
_TENANT_NAMESPACES = {"matchExpressions": [{"key": manifests.WORKSPACE_LABEL, "operator": "Exists"}]}
POLICIES: Mapping[str, Mapping[str, Any] | None] = {
    "tenant-gateway-no-long-lived-tokens": _TENANT_NAMESPACES,
    "tenant-gateway-no-external-ips": _TENANT_NAMESPACES,
    "tenant-gateway-rolebinding-subjects": _TENANT_NAMESPACES,
    "tenant-gateway-no-gateway-grade-tokens": _TENANT_NAMESPACES,
    "tenant-gateway-credential-secrets": _TENANT_NAMESPACES,
    "tenant-gateway-member-accounts": _TENANT_NAMESPACES,
    "tenant-gateway-no-external-names": _TENANT_NAMESPACES,
    "tenant-gateway-volume-sources": _TENANT_NAMESPACES,
    "tenant-gateway-node-placement": _TENANT_NAMESPACES,
    "tenant-gateway-pod-priority": _TENANT_NAMESPACES,
    "tenant-gateway-pod-finalizers": _TENANT_NAMESPACES,
    "tenant-gateway-metadata-bytes": _TENANT_NAMESPACES,
    "tenant-gateway-object-bytes": _TENANT_NAMESPACES,
    "tenant-gateway-pod-template-bytes": _TENANT_NAMESPACES,
    "tenant-gateway-image-pulls": _TENANT_NAMESPACES,
    "tenant-gateway-disruption-budgets": _TENANT_NAMESPACES,
    "tenant-gateway-suspended": {"matchLabels": {manifests.SUSPENDED_LABEL: "true"}},
    "tenant-gateway-confined": None,
}


def _binds_fully(binding: Mapping[str, Any], selector: Mapping[str, Any] | None) -> bool:
    """Denies, and matches every request the shipped binding matches: the
    expected namespace selector and nothing that narrows it further."""
    spec = binding.get("spec") or {}
    match = spec.get("matchResources") or {}
    return ("Deny" in (spec.get("validationActions") or [])
            and (match.get("namespaceSelector") or {}) == (selector or {})
            and not (match.get("objectSelector") or {})
            and not match.get("excludeResourceRules")
            and not match.get("resourceRules")
            and not spec.get("paramRef"))


def shipped_policies() -> dict[str, dict[str, Any]]:
    """The ValidatingAdmissionPolicies' specs in admission.yaml as this
    package ships it, by name; read now, so the file is the reference."""
    try:
        text = importlib.resources.files("provisioning").joinpath("admission.yaml").read_text()
        documents = list(yaml.safe_load_all(text))
    except (OSError, yaml.YAMLError) as error:
        raise GatewayError(f"the shipped admission policies ({_POLICY_FILE}) cannot be read: {error}") from None
    return {d["metadata"]["name"]: dict(d.get("spec") or {}) for d in documents
            if isinstance(d, dict) and d.get("kind") == "ValidatingAdmissionPolicy"}


def _without_empty(value: Any) -> Any:
    if isinstance(value, dict):
        kept = {key: _without_empty(item) for key, item in value.items()}
        return {key: item for key, item in kept.items() if item not in (None, {}, [])}
    if isinstance(value, list):
        return [_without_empty(item) for item in value]
    return value


def _policy_spec(spec: Mapping[str, Any]) -> Any:
    """A policy spec as the API server stores it: its defaults filled in
    (as Kubernetes 1.34 fills them), empty values dropped."""
    filled: dict[str, Any] = copy.deepcopy(dict(spec))
    filled.setdefault("failurePolicy", "Fail")
    match = filled.setdefault("matchConstraints", {})
    match.setdefault("matchPolicy", "Equivalent")
    for key in ("resourceRules", "excludeResourceRules"):
        for rule in match.get(key) or []:
            rule.setdefault("scope", "*")
    return _without_empty(filled)


# Fields that narrow what a policy holds when the installed one has them
# and the shipped one does not. Any other field only the installed policy
# has is a default a newer API server fills in: not a difference, or every
# cluster upgrade could stop the gateway from starting.
_NARROWING = frozenset({"excludeResourceRules", "matchConditions", "namespaceSelector", "objectSelector",
                        "paramKind"})


def _differences(shipped: Any, installed: Any, path: str) -> list[str]:
    if isinstance(shipped, dict) and isinstance(installed, dict):
        keys = [*shipped, *(key for key in installed if key in _NARROWING and key not in shipped)]
        return [found for key in keys
                for found in _differences(shipped.get(key), installed.get(key), f"{path}.{key}")]
    return [] if shipped == installed else [path]


def policy_gaps(policies: list[dict[str, Any]], bindings: list[dict[str, Any]],
                shipped: Mapping[str, Mapping[str, Any]] | None = None) -> tuple[str, ...]:
    """Each shipped policy that is missing, fails open or is not bound in
    full; and, given the `shipped` specs, each installed policy that is not
    the shipped one (a shipped policy `POLICIES` does not know is checked
    for that alone)."""
    installed = {p["metadata"]["name"]: p for p in policies}
    gaps: list[str] = []
    for name in dict.fromkeys([*POLICIES, *(shipped or {})]):
        where = f"ValidatingAdmissionPolicy {name} ({_POLICY_FILE})"
        policy = installed.get(name)
        spec = (policy or {}).get("spec") or {}
        if policy is None:
            gaps.append(f"{where} is not installed")
        elif spec.get("failurePolicy", "Fail") != "Fail":
            gaps.append(f"{where} fails open (failurePolicy is not Fail)")
        elif name in POLICIES and not any((b.get("spec") or {}).get("policyName") == name
                                          and _binds_fully(b, POLICIES[name]) for b in bindings):
            gaps.append(f"{where} has no binding that denies in every namespace it guards")
        if policy is not None and shipped is not None and name in shipped:
            changed = _differences(_policy_spec(shipped[name]), _policy_spec(spec), "spec")
            if changed and changed != ["spec.failurePolicy"]:  # failing open: said above
                gaps.append(f"{where} is not the shipped one: {', '.join(changed)} differ"
                            f"{'s' if len(changed) == 1 else ''}")
    return tuple(gaps)


@dataclass(frozen=True)
class PermissionReport:
    missing: tuple[Permission, ...]
    excessive: tuple[Permission | str, ...]
    """Forbidden permissions, and bypasses of the walls: refused."""
    beyond_needs: tuple[str, ...] = ()
    """Grants neither needed nor forbidden: said, not refused. Managed
    clusters grant every account some, and an upgrade may apply the new
    ClusterRole after the new image or before it."""
    unproven: tuple[str, ...] = ()
    """Probes that could not be made: said, not refused (a tenant can make
    one impossible by deleting its own RoleBinding)."""

    @property
    def ok(self) -> bool:
        """The contract's pass: every permission needed, nothing forbidden."""
        return not self.missing and not self.excessive

    def lines(self) -> list[str]:
        out = [f"missing: {p}" for p in self.missing] + [f"excessive: {p}" for p in self.excessive]
        out += [f"note: {line}" for line in self.beyond_needs] + [f"unproven: {line}" for line in self.unproven]
        if self.ok:
            out.append("ok: the gateway's credential holds every permission it needs and nothing forbidden")
        return out


def evaluate(required: tuple[Permission, ...], allowed: dict[Permission, bool], *,
             reviews: Mapping[str, Mapping[str, Any]] | None = None,
             bypasses: tuple[str, ...] = (), unproven: tuple[str, ...] = ()) -> PermissionReport:
    """`reviews`: SelfSubjectRulesReview statuses by namespace, whose grants
    beyond `required` (and not forbidden) are noted. `bypasses`: admitted
    confinement probes and policy gaps, reported as excessive: each lets the
    credential or a tenant do what it must not."""
    forbidden = tuple(p for p in FORBIDDEN if allowed[p])
    granting = role_grants_beyond(reviews or {}, required, forbidden)
    return PermissionReport(
        missing=tuple(p for p in required if not allowed[p]),
        excessive=forbidden + tuple(f"{p.action} in namespace{'s' if len(where) > 1 else ''} {', '.join(where)}: "
                                    f"{GRANTS_ROLES}" for p, where in granting.items()) + bypasses,
        beyond_needs=rules_beyond(reviews or {}, required, forbidden + tuple(granting)),
        unproven=unproven,
    )


async def _admitted(kube: KubeApi, probe: WriteProbe) -> bool | str:
    """False: refused. True: admitted. A string: why it could not be made."""
    content_type = "application/merge-patch+json" if probe.method == "PATCH" else "application/json"
    try:
        await kube.request(probe.method, probe.path, probe.body, query={"dryRun": "All"}, content_type=content_type)
    except KubeForbidden:
        return False
    except KubeNotFound as error:  # nothing there to try it on: the read comes before admission
        return error.message
    except KubeAPIError:  # e.g. AlreadyExists: the write got past admission
        pass
    return True


async def _policy_gaps(kube: KubeApi) -> tuple[str, ...]:
    base = "/apis/admissionregistration.k8s.io/v1"
    try:
        policies = await kube.list_items(f"{base}/validatingadmissionpolicies")
        bindings = await kube.list_items(f"{base}/validatingadmissionpolicybindings")
    except KubeForbidden:  # reported as a missing permission
        return ()
    return policy_gaps(policies, bindings, shipped_policies())


# Tenant namespaces looked at for one holding its RoleBinding (a tenant can
# delete its own; the others keep theirs).
_SAMPLE = 20
_CONCURRENCY = 8


async def _probe_target(kube: KubeApi, cluster_role: str) -> tuple[list[str], str | None]:
    """Tenant namespaces to aim the probes at (sampled), and the first that
    holds its RoleBinding of `cluster_role`. Active ones: the policy lets a
    namespace being deleted finish; not suspended: the suspension policy
    would refuse the probes for reasons of its own. The RoleBinding probe
    patches that binding: a missing one answers NotFound before admission
    runs, and one of another role is refused by RBAC first (no `bind` on
    it); neither proves the policy."""
    try:
        listed = await kube.request(
            "GET", "/api/v1/namespaces",
            query={"labelSelector": f"{manifests.WORKSPACE_LABEL},{manifests.SUSPENDED_LABEL}!=true",
                   "fieldSelector": "status.phase=Active", "limit": str(_SAMPLE)})
    except KubeForbidden:  # reported as a missing permission
        return [], None
    names = [n["metadata"]["name"] for n in listed.get("items") or []]
    wanted = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role}
    for name in names:
        try:
            binding = await kube.get(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{name}/rolebindings/"
                                     f"{manifests.TENANT_ROLEBINDING}")
        except (KubeNotFound, KubeForbidden):  # gone, or `get` missing (reported as such)
            continue
        if {k: (binding.get("roleRef") or {}).get(k) for k in wanted} == wanted:
            return names, name
    return names, None


async def probe_permissions(kube: KubeApi, tenant_cluster_role: str) -> PermissionReport:
    required = required_permissions(tenant_cluster_role)
    probes = required + FORBIDDEN
    sampled, bound = await _probe_target(kube, tenant_cluster_role)
    tenant = bound or next(iter(sampled), None)
    writes = confinement_probes(tenant, rolebinding=bound is not None)
    unproven: tuple[str, ...] = (
        (rolebinding_unproven(len(sampled), tenant_cluster_role),) if sampled and bound is None else ())

    # Where RoleBindings could add to the ClusterRole: kube-system, and the
    # tenant namespace probed.
    namespaces = ("kube-system", *((tenant,) if tenant else ()))
    # Some hundred reviews: a few at a time, well inside the API server's
    # share for the gateway (a 429 would stop the start).
    limit = asyncio.Semaphore(_CONCURRENCY)

    async def allowed(permission: Permission) -> bool:
        async with limit:
            answer = await kube.create("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", permission.review())
        return bool((answer.get("status") or {}).get("allowed"))

    async def rules(namespace: str) -> dict[str, Any]:
        async with limit:
            answer = await kube.create("/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
                                       {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
                                        "spec": {"namespace": namespace}})
        return dict(answer.get("status") or {})

    async def outcome(write: WriteProbe) -> bool | str:
        async with limit:
            return await _admitted(kube, write)

    answers, admitted, gaps, reviews, deletes = await asyncio.gather(
        asyncio.gather(*(allowed(p) for p in probes)),
        asyncio.gather(*(outcome(w) for w in writes)),
        _policy_gaps(kube),
        asyncio.gather(*(rules(n) for n in namespaces)),
        _secret_delete_outcomes(kube, tenant))
    bypasses = tuple(w.admitted for w, was in zip(writes, admitted) if was is True) + gaps
    unproven += tuple(w.unproven(was) for w, was in zip(writes, admitted) if isinstance(was, str))
    bypasses += tuple(w.admitted for w, was in deletes if was is True)
    unproven += tuple(w.unproven(was) for w, was in deletes if isinstance(was, str))
    return evaluate(required, dict(zip(probes, answers)), reviews=dict(zip(namespaces, reviews)),
                    bypasses=bypasses, unproven=unproven)
