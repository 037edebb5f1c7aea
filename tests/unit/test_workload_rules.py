"""What a tier lets a tenant keep and run beyond its counts: pure parsing of
the tier's rules, the namespace they are written into, how an existing one
converges, the etcd arithmetic, and the admission policies' own defaults."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from provisioning import manifests, workload_rules
from provisioning.tiers import DEFAULT_TIERS, parse_tiers, with_cluster_images
from provisioning.workload_rules import KIB, ObjectBytes, WorkloadRules, etcd_budget, image_entry_problem
from proxy.settings import load_settings
from proxy.settings.errors import SettingsError

ROOT = Path(__file__).resolve().parents[2]
BASIC = DEFAULT_TIERS["basic"]


def test_a_tier_that_says_nothing_is_restricted_with_the_default_caps_and_no_shared_images() -> None:
    for tier in (BASIC, parse_tiers("t: {requests.cpu: '1'}")["t"], parse_tiers("t: {hard: {pods: '1'}}")["t"]):
        assert tier.rules == WorkloadRules(ObjectBytes(64 * KIB, 64 * KIB, 16 * KIB, 8 * KIB), "restricted", ())


def test_a_tier_may_set_its_caps_pod_security_and_shared_images() -> None:
    tier = parse_tiers("""
        big:
          hard: {pods: "10"}
          objectBytes: {configMap: 1Mi, secret: "131072", metadata: 16Ki}
          podSecurity: baseline
          sharedImages: [docker.io/library/nginx, registry.example/public/, "docker.io/library/busybox:1.36"]
    """)["big"]
    assert tier.rules == WorkloadRules(ObjectBytes(2 ** 20, 131072, 16 * KIB, 16 * KIB), "baseline",
                                       ("docker.io/library/nginx", "registry.example/public/", "docker.io/library/busybox:1.36"))


@pytest.mark.parametrize("body, words", [
    ("{hard: {pods: '1'}, objectBytes: {configmap: 1Ki}}", "unknown keys"),
    ("{hard: {pods: '1'}, objectBytes: {secret: 100}}", "under 1Ki"),
    ("{hard: {pods: '1'}, objectBytes: {secret: 2048.5}}", "whole number"),
    ("{hard: {pods: '1'}, objectBytes: {secret: lots}}", "not a Kubernetes quantity"),
    ("{hard: {pods: '1'}, objectBytes: {configMap: 2Mi}}", "over 1.5Mi"),
    ("{hard: {pods: '1'}, podSecurity: privileged}", "podSecurity must be one of restricted, baseline"),
    # A whole registry's prefix would let any tenant run another's private image from the cache.
    ("{hard: {pods: '1'}, sharedImages: [docker.io/]}", "prefix shorter"),
    ("{hard: {pods: '1'}, sharedImages: ['a, b']}", "not an image reference"),
    # A bare name would also match a registry of that name: registry:5000/victim/app.
    ("{hard: {pods: '1'}, sharedImages: [registry]}", "names no registry"),
    ("{hard: {pods: '1'}, sharedImages: '*'}", "must be a list"),
])
def test_mistakes_in_a_tiers_rules_are_refused_at_start_up(body: str, words: str) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        parse_tiers(f"t: {body}")


@pytest.mark.parametrize("entry, problem", [
    ("localhost/tenant-gateway/", False), ("registry.example:5000/team/app", False), ("busybox", True),
    ("registry", True), ("busybox:1.36", True), ("nginx@sha256:" + "0" * 64, True), ("team/app", False),
    ("docker.io/library/nginx@sha256:" + "0" * 64, False), ("docker.io//", True), ("docker.io/", True), ("/", True), ("", True), ("a b", True),
])
def test_which_entries_an_image_allow_list_takes(entry: str, problem: bool) -> None:
    assert (image_entry_problem(entry) is not None) == problem


def test_the_clusters_shared_images_join_every_tiers_list_once() -> None:
    tiers = parse_tiers("a: {hard: {pods: '1'}, sharedImages: [x.example/one/]}\nb: {pods: '1'}")
    merged = with_cluster_images(tiers, ("x.example/one/", "localhost/tenant-gateway/"))
    assert merged["a"].rules.shared_images == ("x.example/one/", "localhost/tenant-gateway/")
    assert merged["b"].rules.shared_images == ("x.example/one/", "localhost/tenant-gateway/")
    settings = load_settings({"GATEWAY_SHARED_IMAGES": " localhost/tenant-gateway/ , docker.io/library/busybox"})
    assert settings.tiers["basic"].rules.shared_images == ("localhost/tenant-gateway/", "docker.io/library/busybox")
    with pytest.raises(SettingsError, match="GATEWAY_SHARED_IMAGES"):
        load_settings({"GATEWAY_SHARED_IMAGES": "docker.io/"})


def test_the_namespace_carries_the_tiers_pod_security_and_caps() -> None:
    rules = WorkloadRules(ObjectBytes(2 * KIB, 3 * KIB, 4 * KIB, 5 * KIB), "baseline", ("a.example/b/", "c"))
    meta = manifests.namespace("tenant-u", "wid", rules)["metadata"]
    assert {key: meta["labels"][key] for key in meta["labels"] if key.startswith("pod-security")} == {
        "pod-security.kubernetes.io/enforce": "baseline", "pod-security.kubernetes.io/warn": "restricted",
        "pod-security.kubernetes.io/audit": "restricted"}
    assert meta["annotations"] == {
        "tier.tenant-gateway.io/configmap-bytes": "2048", "tier.tenant-gateway.io/secret-bytes": "3072",
        "tier.tenant-gateway.io/pod-template-bytes": "4096", "tier.tenant-gateway.io/metadata-bytes": "5120",
        "tier.tenant-gateway.io/shared-images": "a.example/b/,c"}


def test_a_namespace_from_before_converges_to_its_tier_and_nothing_else_changes() -> None:
    old = manifests.namespace("tenant-u", "wid")
    old["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] = "baseline"
    old["metadata"]["annotations"] = {"tier.tenant-gateway.io/retired": "1", "someone.else/note": "kept"}
    change = manifests.namespace_convergence(old, BASIC.rules)
    assert change is not None
    assert change.patch == {"metadata": {
        "labels": {"pod-security.kubernetes.io/enforce": "restricted"},
        "annotations": {**workload_rules.namespace_annotations(BASIC.rules), "tier.tenant-gateway.io/retired": None}}}
    assert "pod-security.kubernetes.io/enforce baseline -> restricted" in change.described
    assert manifests.namespace_convergence(manifests.namespace("tenant-u", "wid", BASIC.rules), BASIC.rules) is None


def test_the_basic_tiers_worst_case_in_etcd_is_the_readmes() -> None:
    lines = {line.key: line for line in etcd_budget(BASIC.quota, BASIC.rules.object_bytes)}
    caps = BASIC.rules.object_bytes
    assert lines["configmaps"].per_object == 2 * (caps.config_map + caps.metadata)
    assert lines["count/replicasets.apps"].per_object == 2 * (caps.pod_template + caps.metadata)
    assert lines["count/roles.rbac.authorization.k8s.io"].per_object == 2 * caps.metadata
    assert "requests.storage" not in lines and "services.nodeports" not in lines
    total = sum(line.total for line in lines.values())
    assert total == 54_149_120  # 51.6 MiB: the quota's room for members and credentials counted at the caps
    readme = (ROOT / "README.md").read_text()
    assert "54,149,120 bytes" in readme


def test_the_policies_defaults_are_the_basic_tiers_caps() -> None:
    """A namespace without the annotations (onboarded before them) is held
    to the basic tier's caps by the policies themselves."""
    text = (ROOT / "deploy/kubernetes/admission.yaml").read_text()
    found = re.findall(r"'(tier\.tenant-gateway\.io/[a-z-]+)'\]\.orValue\('(\d+)'\)", text)
    caps = workload_rules.namespace_annotations(BASIC.rules)
    assert found and {key for key, _ in found} == set(caps) - {workload_rules.SHARED_IMAGES}
    assert all(caps[key] == value for key, value in found), found
