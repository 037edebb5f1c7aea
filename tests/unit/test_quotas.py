"""Tiers bound every shared resource, and an existing quota converges to its
tier: pure tier parsing, quantity arithmetic and the quota merge patch."""

from __future__ import annotations

from decimal import Decimal

import pytest

from provisioning import manifests
from provisioning.tiers import DEFAULT_TIERS, SHARED_BOUNDS, parse_tiers, quantity_value

SHARED_KEYS = ("pods", "services", "secrets", "configmaps", "persistentvolumeclaims", "replicationcontrollers",
               "requests.storage", "services.nodeports", "services.loadbalancers",
               "count/deployments.apps", "count/replicasets.apps", "count/statefulsets.apps",
               "count/daemonsets.apps", "count/controllerrevisions.apps", "count/jobs.batch", "count/cronjobs.batch",
               "count/horizontalpodautoscalers.autoscaling", "count/ingresses.networking.k8s.io",
               "count/poddisruptionbudgets.policy", "count/leases.coordination.k8s.io",
               "count/roles.rbac.authorization.k8s.io", "count/serviceaccounts",
               "count/rolebindings.rbac.authorization.k8s.io", "count/networkpolicies.networking.k8s.io")


def test_the_basic_tier_bounds_every_shared_resource_and_allows_no_node_port_or_load_balancer() -> None:
    hard = DEFAULT_TIERS["basic"].hard
    assert set(SHARED_KEYS) <= set(hard)
    assert hard["services.nodeports"] == "0" and hard["services.loadbalancers"] == "0"
    assert all(quantity_value(hard[key]) > 0 for key in SHARED_KEYS if not key.startswith("services."))
    assert (hard["requests.cpu"], hard["limits.memory"]) == ("4", "8Gi")


@pytest.mark.parametrize("text, expected", [
    # A tier naming nothing shared gets every bound ...
    ("t: {requests.cpu: '1'}", {"requests.cpu": "1", **SHARED_BOUNDS}),
    # ... a tier may raise any of them, node ports and load balancers included ...
    ("t: {hard: {services.loadbalancers: '2', services.nodeports: '3', requests.storage: 1Ti}}",
     {**SHARED_BOUNDS, "services.loadbalancers": "2", "services.nodeports": "3", "requests.storage": "1Ti"}),
    # ... and the count/ spelling of an object count replaces the default, never doubles it.
    ("t: {count/pods: '7', count/configmaps: '9'}",
     {**{k: v for k, v in SHARED_BOUNDS.items() if k not in ("pods", "configmaps")},
      "count/pods": "7", "count/configmaps": "9"}),
])
def test_tiers_file_keys_override_the_shared_bounds(text: str, expected: dict[str, str]) -> None:
    assert dict(parse_tiers(text)["t"].hard) == expected


@pytest.mark.parametrize("text, value", [
    ("4", Decimal(4)), ("500m", Decimal("0.5")), ("0.5", Decimal("0.5")), ("1Gi", Decimal(2 ** 30)),
    ("1G", Decimal(10 ** 9)), ("1e3", Decimal(1000)), ("1E", Decimal(10 ** 18)), ("2Ei", Decimal(2 * 2 ** 60)),
    (".5k", Decimal(500)),
])
def test_quantities_compare_by_value(text: str, value: Decimal) -> None:
    assert quantity_value(text) == value


@pytest.mark.parametrize("bad", ["", "lots", "1mi", "1 Gi", "-1"])
def test_what_is_not_a_quantity_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        quantity_value(bad)


# The shared bounds' counts with room for what the gateway makes in a
# namespace (Tier.quota): 50 members' accounts and bindings, 30 credentials' Secrets.
WITH_ROOM = {"count/serviceaccounts": "70", "count/rolebindings.rbac.authorization.k8s.io": "70", "secrets": "80"}


def test_the_quota_has_room_for_what_the_gateway_makes_beside_the_tenants_own() -> None:
    tier = parse_tiers("t: {hard: {requests.cpu: '2', count/serviceaccounts: '5'}, members: 3, liveCredentials: 7}")["t"]
    assert tier.hard["count/serviceaccounts"] == "5" and tier.quota["count/serviceaccounts"] == "8"
    assert tier.quota["count/rolebindings.rbac.authorization.k8s.io"] == "23"
    assert tier.quota["secrets"] == "57" and tier.hard["secrets"] == "50"


@pytest.mark.parametrize("bad", ["0", "-1", "x", "1.5", "true", "10001"])
def test_a_tier_allows_a_whole_number_of_members_and_credentials(bad: str) -> None:
    for key in ("members", "liveCredentials"):
        with pytest.raises(ValueError, match=key):
            parse_tiers(f"t: {{hard: {{requests.cpu: '2'}}, {key}: {bad}}}")


def quota(hard: dict[str, str]) -> dict[str, object]:
    return {"metadata": {"name": manifests.QUOTA_NAME}, "spec": {"hard": hard}}


def test_an_old_quota_gets_the_missing_bounds_and_loses_what_the_tier_dropped() -> None:
    tier = parse_tiers("t: {requests.cpu: '2', limits.memory: 4Gi}")["t"]
    old = quota({"requests.cpu": "4", "limits.memory": "8Gi", "count/widgets.example.com": "5"})
    change = manifests.quota_convergence(old, tier)
    assert change is not None
    assert change.patch == {"spec": {"hard": {
        "requests.cpu": "2", "limits.memory": "4Gi", "count/widgets.example.com": None, **SHARED_BOUNDS,
        **WITH_ROOM}}}
    assert "requests.cpu 4 -> 2" in change.described and "count/widgets.example.com 5 -> unset" in change.described
    assert "services.nodeports unset -> 0" in change.described


def test_a_quota_as_the_api_server_wrote_it_back_needs_nothing() -> None:
    tier = parse_tiers("t: {requests.cpu: 1000m, limits.memory: 1024Mi, requests.storage: 50Gi}")["t"]
    stored = {**SHARED_BOUNDS, "requests.cpu": "1", "limits.memory": "1Gi", "requests.storage": "50Gi", **WITH_ROOM}
    assert manifests.quota_convergence(quota(stored), tier) is None


def test_the_quota_and_limit_range_steps_converge_to_the_tiers() -> None:
    tier = DEFAULT_TIERS["basic"]
    steps = {step.kind: step for step in manifests.bounds_steps("tenant-u", "wid", tier)}
    assert list(steps) == ["ResourceQuota", "LimitRange", "NetworkPolicy"]
    assert steps["ResourceQuota"].body["spec"]["hard"] == tier.quota
    assert steps["NetworkPolicy"].converge is None
    quota_converge, limits_converge = steps["ResourceQuota"].converge, steps["LimitRange"].converge
    assert quota_converge is not None and limits_converge is not None
    assert quota_converge(quota(tier.quota)) is None
    assert limits_converge(steps["LimitRange"].body) is None


def test_every_tier_bounds_node_disk_and_plain_containers_get_ephemeral_storage_defaults() -> None:
    basic = DEFAULT_TIERS["basic"]
    assert (basic.hard["requests.ephemeral-storage"], basic.hard["limits.ephemeral-storage"]) == ("20Gi", "40Gi")
    assert (basic.default_limits["ephemeral-storage"], basic.default_requests["ephemeral-storage"]) == ("1Gi", "100Mi")
    # A tier naming only cpu and memory defaults still gets ephemeral storage's.
    named = parse_tiers("t: {hard: {requests.cpu: '1'}, defaultLimits: {cpu: '1', memory: 1Gi}}")["t"]
    assert named.default_limits == {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "1Gi"}
    assert named.default_requests == {"cpu": "100m", "memory": "128Mi", "ephemeral-storage": "100Mi"}
    # Filled in to fit what the tier names: never a request above the limit.
    small = parse_tiers("t: {hard: {requests.cpu: '1'}, defaultLimits: {ephemeral-storage: 50Mi}}")["t"]
    assert small.default_requests["ephemeral-storage"] == "50Mi"
    big = parse_tiers("t: {hard: {requests.cpu: '1'}, defaultRequests: {ephemeral-storage: 2Gi}}")["t"]
    assert big.default_limits["ephemeral-storage"] == "2Gi"
    # `ephemeral-storage` is the quota's other spelling of the requests key.
    short = parse_tiers("t: {ephemeral-storage: 5Gi}")["t"].hard
    assert short["ephemeral-storage"] == "5Gi" and "requests.ephemeral-storage" not in short
    assert short["limits.ephemeral-storage"] == "40Gi"


def test_an_old_limit_range_gets_the_tiers_defaults_and_keeps_other_entries() -> None:
    tier = DEFAULT_TIERS["basic"]
    old = {"spec": {"limits": [
        {"type": "Container", "default": {"cpu": "500m", "memory": "512Mi"},
         "defaultRequest": {"cpu": "100m", "memory": "128Mi"}},
        {"type": "PersistentVolumeClaim", "max": {"storage": "10Gi"}},
    ]}}
    change = manifests.limit_range_convergence(old, tier)
    assert change is not None and "ephemeral-storage" in change.described
    assert change.patch == {"spec": {"limits": [
        {"type": "PersistentVolumeClaim", "max": {"storage": "10Gi"}},
        {"type": "Container", "default": dict(tier.default_limits), "defaultRequest": dict(tier.default_requests)},
    ]}}
    # As the API server writes it back (1Gi as 1Gi, 100m as 100m): nothing to do.
    assert manifests.limit_range_convergence(change.patch, tier) is None
    # One that lost its Container entry altogether gets it back.
    assert manifests.limit_range_convergence({"spec": {}}, tier) is not None


@pytest.mark.parametrize("text, words", [
    ("t: {limits.memory: 512mi}", "not a Kubernetes quantity"),  # k8s knows Mi and m, not mi
    ("t: {requests.cpu: 1ki}", "not a Kubernetes quantity"),
    ("t: {pods: '0.5'}", "not a whole number"),
    ("t: {count/jobs.batch: 1500m}", "not a whole number"),
    ("t: {hard: {requests.cpu: '1'}, defaultLimits: {cpu: 50m, memory: 64Mi}}", "exceeds defaultLimits.cpu"),
    ("t: {hard: {requests.cpu: '1'}, defaultLimits: {cpu: '1', memory: 1Gi}, defaultRequests: {memory: 2Gi}}",
     "defaultRequests.memory (2Gi) exceeds"),
    ("t: [unclosed", "not YAML"),
])
def test_a_tier_the_api_server_would_refuse_at_every_onboarding_is_refused_at_start_up(text: str, words: str) -> None:
    with pytest.raises(ValueError) as refused:
        parse_tiers(text)
    assert words in str(refused.value)


def test_whole_counts_in_any_spelling_are_taken() -> None:
    assert parse_tiers("t: {pods: 1k, services.nodeports: '0', count/jobs.batch: 2e1}")["t"].hard["pods"] == "1k"
