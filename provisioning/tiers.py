"""Tiers: what ResourceQuota and LimitRange a tenant gets.

A tier file (GATEWAY_TIERS_FILE) maps a tier name to either the quota's
`hard` map itself or to `{hard, defaultLimits, defaultRequests}`:

    basic:                          # the hard map itself
      requests.cpu: "4"
      limits.memory: 8Gi
    standard:
      hard: {requests.cpu: "8", limits.memory: 16Gi, pods: "100"}
      defaultLimits: {cpu: 500m, memory: 512Mi}    # LimitRange `default`
      defaultRequests: {cpu: 100m, memory: 128Mi}  # LimitRange `defaultRequest`
                                                   # (ephemeral-storage: 1Gi / 100Mi
                                                   # when left out)

`hard` takes any ResourceQuota key. Every tier bounds what tenants share, so
each of these keys a tier leaves out gets the value in SHARED_BOUNDS:
- `pods`, `services`, `secrets`, `configmaps`, `persistentvolumeclaims`,
  `replicationcontrollers`: how many such objects the namespace may hold
  (each one lives in etcd and is watched by controllers); the
  `count/<resource>` spelling counts as naming the key;
- `count/<resource>.<group>` for every other kind tenant-admin may create
  (Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs, CronJobs,
  HorizontalPodAutoscalers, Ingresses, PodDisruptionBudgets, Leases, Roles,
  ServiceAccounts, RoleBindings, NetworkPolicies). Onboarding makes one
  ServiceAccount, RoleBinding and NetworkPolicy itself and Kubernetes the
  `default` ServiceAccount, so those counts leave room for them beside the
  tenant's own; quota admission refuses a kind the quota names until the
  quota controller has counted the namespace, and onboarding waits that
  moment out (provisioning/onboarding.py);
- `requests.storage`: the sum of all volume claims' requested storage;
- `requests.ephemeral-storage` (or `ephemeral-storage`) and
  `limits.ephemeral-storage`: node disk taken by containers' writable
  layers, logs and emptyDir volumes. Every tier's LimitRange gives a
  container that states none `ephemeral-storage` 100Mi requested and a 1Gi
  limit (unless the tier's defaults name it), so plain pods still run;
- `services.nodeports`: Services of type NodePort (or LoadBalancer, which
  allocates node ports too); a node port opens on every node, so 0 unless
  the tier says otherwise;
- `services.loadbalancers`: Services of type LoadBalancer, each a billed
  cloud load balancer; 0 unless the tier says otherwise.
The long form also takes `objectBytes`, `podSecurity` and `sharedImages`:
per-object byte caps, the Pod Security level and the images pods may run
from the node's cache (provisioning.workload_rules); and `members` (50) and
`liveCredentials` (30): how many members a workspace may have and how
many issued credentials it may hold at once. The quota gets room for what
the gateway makes for those (`Tier.quota`) on top of the counts above.
Where its workspaces go (provisioning.placement): `clusters` (a list of
configured cluster names) or `cluster_selector` (`{label: value}`, all
required), and `dedicated: true` for a cluster of their own each.
A changed tier reaches existing workspaces on resume and with
`tenant-gateway reconcile` (the quota's `hard`, the LimitRange's defaults,
and the namespace's Pod Security level and caps).

Quantities are kept as the strings Kubernetes accepts; the API server
validates them, and `parse_tiers` catches the obvious mistakes at start-up so
a typo never surfaces as a failed onboarding. `quantity_value` compares them
as the API server does (it writes `1000m` back as `1`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any, Mapping

import yaml

from provisioning.clusters import ClusterConfigError, is_cluster_name, parse_labels
from provisioning.secrets import yaml_mistake
from provisioning.workload_rules import WorkloadRules, parse_rules, with_images

# Kubernetes' own suffixes exactly: binary Ki..Ei, decimal n u m k M..E, or an exponent.
_QUANTITY = re.compile(r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$")
_EXPONENT = re.compile(r"^[eE][+-]?[0-9]+$")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")

# Pods that state no resources get these, so they still fit a quota that
# demands requests/limits for cpu, memory and ephemeral storage.
_DEFAULT_LIMITS = {"cpu": "500m", "memory": "512Mi", "ephemeral-storage": "1Gi"}
_DEFAULT_REQUESTS = {"cpu": "100m", "memory": "128Mi", "ephemeral-storage": "100Mi"}
# Every tier's quota bounds ephemeral storage (SHARED_BOUNDS), so every
# tier's LimitRange must give a container that states none an amount: a tier
# whose defaults leave it out gets these.
_EPHEMERAL = "ephemeral-storage"


# What every tier bounds unless it names the key itself (see the module
# docstring). Generous for one person's workloads, small next to what one
# etcd and one set of nodes can carry for many tenants.
SHARED_BOUNDS: Mapping[str, str] = {
    "pods": "50",
    "services": "20",
    "secrets": "50",
    "configmaps": "50",
    "persistentvolumeclaims": "10",
    "replicationcontrollers": "10",
    "requests.storage": "50Gi",
    "services.nodeports": "0",
    "services.loadbalancers": "0",
    "count/deployments.apps": "20",
    # Each Deployment keeps up to 10 old ReplicaSets (revisionHistoryLimit)
    # beside its current one, and a rollout adds one before it prunes: 20 x 12
    # and a margin, so no rollout stalls before the Deployment count is reached.
    "count/replicasets.apps": "250",
    "count/statefulsets.apps": "10",
    "count/daemonsets.apps": "5",
    # Not created by tenants but for them: each StatefulSet and DaemonSet
    # update keeps a revision (10 old ones by default, or as many as its
    # revisionHistoryLimit says: unbounded by anything else). 15 x 11 and a
    # margin.
    "count/controllerrevisions.apps": "200",
    "count/jobs.batch": "50",
    "count/cronjobs.batch": "10",
    "count/horizontalpodautoscalers.autoscaling": "20",
    "count/ingresses.networking.k8s.io": "20",
    "count/poddisruptionbudgets.policy": "20",
    "count/leases.coordination.k8s.io": "50",
    "count/roles.rbac.authorization.k8s.io": "20",
    # Each up to ~1.5 MB in etcd, and tenant-admin may create them. The
    # namespace's own `default` account and onboarding's account, binding and
    # isolation policy count too: 2 + 18, 1 + 19, 1 + 19 for the tenant.
    "count/serviceaccounts": "20",
    "count/rolebindings.rbac.authorization.k8s.io": "20",
    "count/networkpolicies.networking.k8s.io": "20",
    # Node disk: containers' writable layers, logs and emptyDir volumes. The
    # kubelet evicts a pod past its limit; the LimitRange gives every
    # container that states none 100Mi requested and a 1Gi limit.
    "requests.ephemeral-storage": "20Gi",
    "limits.ephemeral-storage": "40Gi",
}
# Other spellings the quota takes for a key in SHARED_BOUNDS.
_ALIASES = {"requests.ephemeral-storage": "ephemeral-storage"}
# The object counts the quota also knows by a short name.
_OBJECT_COUNTS = ("pods", "services", "secrets", "configmaps", "persistentvolumeclaims", "replicationcontrollers")
_SUFFIXES = {
    "": Decimal(1), "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9, "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
}


def quantity_value(text: str) -> Decimal:
    """The amount a Kubernetes quantity stands for, so `1Gi` equals
    `1073741824` and `0.5` equals `500m`. ValueError if it is not one."""
    match = _QUANTITY.match(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a Kubernetes quantity")
    number, suffix = match.group(1), match.group(3) or ""
    if _EXPONENT.match(suffix):
        return Decimal(number) * Decimal(10) ** int(suffix[1:])
    if suffix not in _SUFFIXES:
        raise ValueError(f"{text!r} is not a Kubernetes quantity")
    return Decimal(number) * _SUFFIXES[suffix]


def with_shared_bounds(hard: Mapping[str, str]) -> dict[str, str]:
    """`hard` plus SHARED_BOUNDS for every key it does not name."""
    bounded = dict(hard)
    for key, value in SHARED_BOUNDS.items():
        named = (key in hard or (key in _OBJECT_COUNTS and f"count/{key}" in hard)
                 or _ALIASES.get(key, key) in hard)
        if not named:
            bounded[key] = value
    return bounded


DEFAULT_MEMBERS = 50
"""How many members a workspace of a tier may have (invitations pending included)."""
DEFAULT_LIVE_CREDENTIALS = 30
"""How many issued credentials (each bound to a Secret) a workspace may hold at once."""
_MAX_ALLOWANCE = 10_000
# The quota keys that count what the gateway itself makes in a namespace:
# a ServiceAccount and a RoleBinding per member, a Secret per live credential.
_MEMBER_OBJECT_KEYS = ("count/serviceaccounts", "serviceaccounts", "count/rolebindings.rbac.authorization.k8s.io")
_SECRET_KEYS = ("secrets", "count/secrets")


@dataclass(frozen=True)
class Tier:
    name: str
    hard: Mapping[str, str]
    default_limits: Mapping[str, str] = field(default_factory=lambda: dict(_DEFAULT_LIMITS))
    default_requests: Mapping[str, str] = field(default_factory=lambda: dict(_DEFAULT_REQUESTS))
    rules: WorkloadRules = field(default_factory=WorkloadRules)
    """Bytes per object, Pod Security level and cached images
    (provisioning.workload_rules): what admission holds the namespace to."""
    members: int = DEFAULT_MEMBERS
    live_credentials: int = DEFAULT_LIVE_CREDENTIALS
    clusters: tuple[str, ...] = ()
    """The clusters its workspaces may be placed on (provisioning.placement);
    empty with no `cluster_selector`: any cluster of its kind."""
    cluster_selector: Mapping[str, str] = field(default_factory=dict)
    """Labels a cluster must carry, all of them, for its workspaces."""
    dedicated: bool = False
    """Each workspace takes a dedicated cluster of its own (hard tenancy)."""

    @property
    def quota(self) -> dict[str, str]:
        """`hard` as the namespace's ResourceQuota holds it: with room for
        what the gateway makes there itself (each member's ServiceAccount
        and RoleBinding, each live credential's binding Secret) beside the
        tenant's own, so none of it uses up what the tier gives the tenant.
        The gateway keeps within that room: it refuses a member or a
        credential past `members` or `live_credentials`."""
        quota = dict(self.hard)
        for keys, room in ((_MEMBER_OBJECT_KEYS, self.members), (_SECRET_KEYS, self.live_credentials)):
            for key in keys:
                if key in quota:
                    quota[key] = str(int(quantity_value(quota[key])) + room)
        return quota

    def summary(self) -> dict[str, str]:
        """The contract's `quota: {cpu, memory}` view of `hard`."""
        return {
            "cpu": self.hard.get("requests.cpu") or self.hard.get("cpu") or self.hard.get("limits.cpu", ""),
            "memory": self.hard.get("limits.memory") or self.hard.get("memory") or self.hard.get("requests.memory", ""),
        }


DEFAULT_TIERS: Mapping[str, Tier] = {
    "basic": Tier("basic", with_shared_bounds({"requests.cpu": "4", "limits.memory": "8Gi"})),
}


def _is_count(key: str) -> bool:
    """Object counts, node ports and load balancers: the API server takes only whole numbers."""
    return key in _OBJECT_COUNTS or key.startswith(("count/", "services."))


def _quantities(where: str, value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not value:
        raise ValueError(f"{where} must be a non-empty mapping of resource to quantity")
    out: dict[str, str] = {}
    for key, quantity in value.items():
        text = str(quantity)
        if not _QUANTITY.match(text):
            raise ValueError(f"{where}.{key}: {text!r} is not a Kubernetes quantity")
        if _is_count(str(key)) and quantity_value(text) != quantity_value(text).to_integral_value():
            raise ValueError(f"{where}.{key}: {text!r} is not a whole number")
        out[str(key)] = text
    return out


def _requests_within_limits(name: str, limits: Mapping[str, str], requests: Mapping[str, str]) -> None:
    """A LimitRange whose default request exceeds its default limit is
    refused by the API server: at every onboarding, not at start-up."""
    for resource in sorted(limits.keys() & requests.keys()):
        if quantity_value(requests[resource]) > quantity_value(limits[resource]):
            raise ValueError(f"tier {name}: defaultRequests.{resource} ({requests[resource]}) exceeds "
                             f"defaultLimits.{resource} ({limits[resource]})")


def _without_ephemeral(defaults: Mapping[str, str]) -> dict[str, str]:
    return {key: value for key, value in defaults.items() if key != _EPHEMERAL}


def _with_ephemeral_defaults(limits: Mapping[str, str],
                             requests: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The tier's LimitRange defaults, with ephemeral storage filled in where
    the tier left it out: never a default request above the default limit."""
    limits, requests = dict(limits), dict(requests)
    if _EPHEMERAL not in limits:
        named = requests.get(_EPHEMERAL)
        bigger = named is not None and quantity_value(named) > quantity_value(_DEFAULT_LIMITS[_EPHEMERAL])
        limits[_EPHEMERAL] = named if bigger and named is not None else _DEFAULT_LIMITS[_EPHEMERAL]
    if _EPHEMERAL not in requests:
        smaller = quantity_value(limits[_EPHEMERAL]) < quantity_value(_DEFAULT_REQUESTS[_EPHEMERAL])
        requests[_EPHEMERAL] = limits[_EPHEMERAL] if smaller else _DEFAULT_REQUESTS[_EPHEMERAL]
    return limits, requests


def _bytes(where: str, text: str) -> Decimal:
    """A quantity of bytes: whole, as `64Ki` or `65536`."""
    if not _QUANTITY.match(text):
        raise ValueError(f"{where}: {text!r} is not a Kubernetes quantity")
    value = quantity_value(text)
    if value != value.to_integral_value():
        raise ValueError(f"{where}: {text!r} is not a whole number of bytes")
    return value


def _allowance(where: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX_ALLOWANCE:
        raise ValueError(f"{where} must be a whole number from 1 to {_MAX_ALLOWANCE}")
    return value


def _placement(name: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """Where a tier's workspaces may go: `clusters` (names; that they are
    configured is checked with the settings), `cluster_selector` (labels)
    and `dedicated`."""
    names = body.get("clusters", [])
    if not isinstance(names, list) or not all(isinstance(n, str) and is_cluster_name(n) for n in names):
        raise ValueError(f"tier {name}: clusters must be a list of cluster names")
    dedicated = body.get("dedicated", False)
    if not isinstance(dedicated, bool):
        raise ValueError(f"tier {name}: dedicated must be true or false")
    try:
        selector = parse_labels(f"tier {name}: cluster_selector", body.get("cluster_selector"))
    except ClusterConfigError as error:
        raise ValueError(str(error)) from None
    return {"clusters": tuple(dict.fromkeys(names)), "cluster_selector": selector, "dedicated": dedicated}


def with_cluster_images(tiers: Mapping[str, Tier], images: tuple[str, ...]) -> dict[str, Tier]:
    """Every tier with the cluster's own shared images (GATEWAY_SHARED_IMAGES)
    added to its allow-list."""
    return {name: replace(tier, rules=with_images(tier.rules, images)) for name, tier in tiers.items()}


def parse_tiers(text: str) -> dict[str, Tier]:
    """Parse a tiers file. Each entry is either the `hard` map itself, or a
    mapping with `hard` and optional `defaultLimits` / `defaultRequests`;
    every `hard` is completed with SHARED_BOUNDS."""
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ValueError(yaml_mistake(error)) from None
    if not isinstance(loaded, dict) or not loaded:
        raise ValueError("must be a non-empty mapping of tier name to quota")
    tiers: dict[str, Tier] = {}
    for name, body in loaded.items():
        name = str(name)
        if not _NAME.match(name):
            raise ValueError(f"tier name {name!r} must be a lowercase DNS label")
        if isinstance(body, dict) and "hard" in body:
            unknown = set(body) - {"hard", "defaultLimits", "defaultRequests", "objectBytes", "podSecurity",
                                   "sharedImages", "members", "liveCredentials", "clusters", "cluster_selector",
                                   "dedicated"}
            if unknown:
                raise ValueError(f"tier {name}: unknown keys {sorted(unknown)}")
            # Left out, cpu and memory take the defaults; ephemeral storage is
            # filled in below, to fit whatever the tier does name.
            limits = _quantities(f"{name}.defaultLimits", body.get("defaultLimits", _without_ephemeral(_DEFAULT_LIMITS)))
            requests = _quantities(f"{name}.defaultRequests",
                                   body.get("defaultRequests", _without_ephemeral(_DEFAULT_REQUESTS)))
            _requests_within_limits(name, limits, requests)
            limits, requests = _with_ephemeral_defaults(limits, requests)
            rules = parse_rules(name, body, _bytes)
            tiers[name] = Tier(name, with_shared_bounds(_quantities(f"{name}.hard", body["hard"])), limits, requests,
                               rules, members=_allowance(f"{name}.members", body.get("members", DEFAULT_MEMBERS)),
                               live_credentials=_allowance(f"{name}.liveCredentials",
                                                           body.get("liveCredentials", DEFAULT_LIVE_CREDENTIALS)),
                               **_placement(name, body))
        else:
            tiers[name] = Tier(name, with_shared_bounds(_quantities(f"{name}", body)))
    return tiers
