"""Given a self-registered tenant holding the kubeconfig the gateway issued
it, when it tries to hurt the cluster every tenant shares (etcd's bytes, node
drains, other tenants' images in a node's cache, the node itself through a
root pod), then the API server's admission refuses it, and what an ordinary
workload needs still passes:

- every object's labels and annotations, ConfigMaps' and Secrets' data and
  pod templates are capped per object by the tier, so objects x caps bounds
  what a tenant keeps in etcd (tenant-gateway-metadata-bytes,
  -object-bytes, -pod-template-bytes), in UTF-8 bytes, every field of a
  template a tenant can fill with text counted, and an object a finalizer
  holds after its deletion no less;
- PodDisruptionBudgets must let at least one pod go
  (tenant-gateway-disruption-budgets);
- images not on the tier's shared list are pulled with the pod's own right
  (tenant-gateway-image-pulls);
- Pod Security is `restricted` unless the tier says `baseline`.
"""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any, Callable

import pytest
from kubernetes import client

from devstack.cluster import LocalCluster
from devstack.nodeparts import BUSYBOX_IMAGE, LOCAL_IMAGES
from provisioning import manifests, workload_rules
from provisioning.tiers import DEFAULT_TIERS
from provisioning.workload_rules import KIB, ObjectBytes
from tests.support import kubeclients
from tests.support.gatewayclient import admin_session
from tests.support.pods import restricted
from tests.support.tenants import BASELINE_TIERS, onboard, quota_enforced, refusal

pytestmark = pytest.mark.cluster
CAPS = ObjectBytes()  # the basic tier's
BASIC = DEFAULT_TIERS["basic"]
TIER_SAYS = "tier allows"


def config_map(name: str, value_bytes: int, **metadata: Any) -> dict[str, Any]:
    """A ConfigMap whose one key (`v`) and value take `value_bytes` + 1 bytes."""
    return {"metadata": {"name": name, **metadata}, "data": {"v": "x" * value_bytes}}


def refused_for_size(call: Callable[[], object]) -> str:
    status, message = refusal(call)
    assert status == 403 and TIER_SAYS in message, (status, message)
    return message


async def test_a_configmap_or_secret_past_the_tiers_cap_is_refused(gateway: Any, tmp_path: Path) -> None:
    alice = await onboard(gateway, tmp_path)
    ns, core = alice.namespace, alice.core
    refused_for_size(lambda: core.create_namespaced_config_map(ns, config_map("huge", CAPS.config_map)))
    refused_for_size(lambda: core.create_namespaced_config_map(ns, {
        "metadata": {"name": "binary"}, "binaryData": {"b": base64.b64encode(b"\0" * CAPS.config_map).decode()}}))
    refused_for_size(lambda: core.create_namespaced_secret(ns, {
        "metadata": {"name": "huge"}, "stringData": {"v": "x" * CAPS.secret}}))
    refused_for_size(lambda: core.create_namespaced_secret(ns, {
        "metadata": {"name": "huge-data"}, "data": {"v": base64.b64encode(b"x" * CAPS.secret).decode()}}))
    # Exactly at the cap is kept; growing it past is refused.
    core.create_namespaced_config_map(ns, config_map("at-cap", CAPS.config_map - 1))
    refused_for_size(lambda: core.patch_namespaced_config_map("at-cap", ns, {"data": {"w": "y"}}))
    core.create_namespaced_secret(ns, {"metadata": {"name": "at-cap"}, "stringData": {"v": "x" * (CAPS.secret - 1)}})


async def test_the_byte_budget_is_the_count_times_the_cap(gateway: Any, tmp_path: Path) -> None:
    """A tenant filling every ConfigMap it may have to the cap keeps no more
    than count x cap: the next one is refused by the quota, a bigger one by
    the cap, and the arithmetic in README's Tiers is what the cluster holds to."""
    alice = await onboard(gateway, tmp_path)
    ns, core = alice.namespace, alice.core
    count = int(BASIC.hard["configmaps"])
    (line,) = [line for line in workload_rules.etcd_budget(BASIC.hard, CAPS) if line.key == "configmaps"]
    assert (line.count, line.per_object) == (count, 2 * (CAPS.config_map + CAPS.metadata))
    await quota_enforced(core, ns)
    made = 0
    while True:
        status, message = refusal(lambda: core.create_namespaced_config_map(
            ns, config_map(f"full-{made}", CAPS.config_map - 1)))
        if status != 200:
            assert status == 403 and "exceeded quota" in message, message
            break
        made += 1
    # kube-root-ca.crt counts too, once the quota controller has seen it: its
    # first count can miss it (the root CA publisher races the quota's
    # creation) until its next full sync, and then the tenant gets all 50.
    assert 0 < made <= count
    stored = [item for item in core.list_namespaced_config_map(ns).items if item.metadata.name.startswith("full-")]
    kept = sum(len(key) + len(value) for item in stored for key, value in (item.data or {}).items())
    assert kept <= line.count * CAPS.config_map
    refused_for_size(lambda: core.patch_namespaced_config_map("full-0", ns, {"data": {"more": "z" * 10}}))


async def test_oversized_labels_and_annotations_are_refused_on_any_object(gateway: Any, tmp_path: Path) -> None:
    alice = await onboard(gateway, tmp_path)
    ns, core = alice.namespace, alice.core
    big = {"note": "n" * CAPS.metadata}
    refused_for_size(lambda: core.create_namespaced_config_map(ns, config_map("noted", 1, annotations=big)))
    refused_for_size(lambda: core.create_namespaced_service(ns, {
        "metadata": {"name": "noted", "annotations": big}, "spec": {"ports": [{"port": 80}]}}))
    many_labels = {f"l{number}": "v" * 60 for number in range(CAPS.metadata // 60)}
    refused_for_size(lambda: client.RbacAuthorizationV1Api(alice.api).create_namespaced_role(ns, {
        "metadata": {"name": "labelled", "labels": many_labels}, "rules": []}))
    # kubectl's copy of the object may hold the object's own cap besides.
    applied = {workload_rules.LAST_APPLIED: "a" * (CAPS.metadata + CAPS.config_map + 1)}
    refused_for_size(lambda: core.create_namespaced_config_map(ns, config_map("applied", 1, annotations=applied)))
    fits = {workload_rules.LAST_APPLIED: "a" * CAPS.config_map, "note": "n" * (CAPS.metadata // 2)}
    core.create_namespaced_config_map(ns, config_map("fits", 1, annotations=fits))
    # Adding to an object's metadata past the cap is refused as well.
    refused_for_size(lambda: core.patch_namespaced_config_map("fits", ns, {"metadata": {"annotations": big}}))


def container(name: str = "c", image: str = "registry.invalid/none", **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": image, **fields}


def pod(name: str, *containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return restricted({"metadata": {"name": name}, "spec": {"containers": list(containers or [container()]), **spec}})


def deployment(name: str, template: dict[str, Any]) -> dict[str, Any]:
    labels = {"app": name}
    body = copy.deepcopy(template)
    body.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
    return {"metadata": {"name": name}, "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": body}}


def cron_job(name: str, template: dict[str, Any]) -> dict[str, Any]:
    body = copy.deepcopy(template)
    body["spec"]["restartPolicy"] = "Never"
    return {"metadata": {"name": name}, "spec": {"schedule": "0 0 1 1 *", "suspend": True,
                                                 "jobTemplate": {"spec": {"template": body}}}}


async def test_pod_templates_past_the_tiers_cap_are_refused_by_kind(gateway: Any, tmp_path: Path) -> None:
    alice = await onboard(gateway, tmp_path)
    ns, core = alice.namespace, alice.core
    apps, batch = client.AppsV1Api(alice.api), client.BatchV1Api(alice.api)
    env = [{"name": "BLOB", "value": "x" * CAPS.pod_template}]
    many_args = [""] * (CAPS.pod_template // 3)  # empty strings are not free
    for fat in (container(env=env), container(args=many_args), container(command=["x" * CAPS.pod_template])):
        refused_for_size(lambda: core.create_namespaced_pod(ns, pod("fat", fat)))
        template = {"spec": pod("t", fat)["spec"]}
        refused_for_size(lambda: apps.create_namespaced_deployment(ns, deployment("fat", template)))
        refused_for_size(lambda: batch.create_namespaced_cron_job(ns, cron_job("fat", template)))
    noted = {"metadata": {"annotations": {"n": "n" * CAPS.pod_template}}, "spec": pod("t")["spec"]}
    refused_for_size(lambda: apps.create_namespaced_stateful_set(ns, {
        **deployment("noted", noted), "spec": {**deployment("noted", noted)["spec"], "serviceName": "noted"}}))
    # Ordinary ones pass.
    core.create_namespaced_pod(ns, pod("plain", container(env=[{"name": "A", "value": "b"}], args=["x"])))
    apps.create_namespaced_deployment(ns, deployment("plain", {"spec": pod("t")["spec"]}))
    batch.create_namespaced_cron_job(ns, cron_job("plain", {"spec": pod("t")["spec"]}))


def stuffed_templates() -> dict[str, dict[str, Any]]:
    """Pod specs over the basic tier's template cap, each through a field
    other than image, command, arguments and environment."""
    big = "x" * (200 * KIB)
    many = CAPS.pod_template // 8
    probe = {"exec": {"command": [big]}}
    items = [{"key": "k", "path": f"p{number}"} for number in range(many)]
    return {
        "livenessProbe": pod("t", container(livenessProbe=probe))["spec"],
        "readinessProbe": pod("t", container(readinessProbe=probe))["spec"],
        "startupProbe": pod("t", container(startupProbe=probe))["spec"],
        "preStop": pod("t", container(lifecycle={"preStop": probe}))["spec"],
        "postStart": pod("t", container(lifecycle={"postStart": probe}))["spec"],
        "envFrom": pod("t", container(envFrom=[{"configMapRef": {"name": "c"}}] * many))["spec"],
        "hostAliases": pod("t", hostAliases=[{"ip": "10.0.0.1", "hostnames": [
            f"host-{number}" for number in range(many)]}])["spec"],
        "tolerations": pod("t", tolerations=[{"key": f"k{number}", "operator": "Exists"}
                                             for number in range(many)])["spec"],
        "configMap items": pod("t", volumes=[{"name": "v", "configMap": {"name": "c", "items": items}}])["spec"],
        "projected items": pod("t", volumes=[{"name": "v", "projected": {"sources": [
            {"secret": {"name": "s", "items": items}}]}}])["spec"],
    }


async def test_every_field_a_tenant_can_fill_counts_against_the_template_cap(gateway: Any, tmp_path: Path) -> None:
    alice = await onboard(gateway, tmp_path)
    ns, core = alice.namespace, alice.core
    apps = client.AppsV1Api(alice.api)
    for field_name, spec in stuffed_templates().items():
        status, message = refusal(lambda: apps.create_namespaced_deployment(ns, deployment("fat", {"spec": spec})))
        assert status == 403 and TIER_SAYS in message, (field_name, status, message)
    refused_for_size(lambda: core.create_namespaced_pod(ns, {"metadata": {"name": "fat"},
                                                             "spec": stuffed_templates()["livenessProbe"]}))
    # A template using each of them in earnest passes.
    probe = {"exec": {"command": ["true"]}}
    earnest = pod("t", container(livenessProbe=probe, readinessProbe=probe, startupProbe=probe,
                                 lifecycle={"preStop": probe, "postStart": probe},
                                 envFrom=[{"configMapRef": {"name": "c"}, "prefix": "C_"}],
                                 env=[{"name": "K", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}],
                                 volumeMounts=[{"name": "v", "mountPath": "/etc/v"}]),
                  hostAliases=[{"ip": "10.0.0.1", "hostnames": ["db.local"]}],
                  tolerations=[{"key": "gpu", "operator": "Exists"}],
                  volumes=[{"name": "v", "projected": {"sources": [
                      {"configMap": {"name": "c", "items": [{"key": "k", "path": "k"}]}}]}}])
    apps.create_namespaced_deployment(ns, deployment("earnest", {"spec": earnest["spec"]}))
    core.create_namespaced_pod(ns, {**earnest, "metadata": {"name": "earnest"}})


async def test_a_pod_over_a_lowered_cap_may_change_but_not_grow(
        cluster: LocalCluster, gateway: Any, tmp_path: Path) -> None:
    alice = await onboard(gateway, tmp_path)
    ns, core = alice.namespace, alice.core
    core.create_namespaced_pod(ns, pod("made", container(env=[{"name": "A", "value": "a" * (4 * KIB)}])))
    admin = client.CoreV1Api(kubeclients.from_kubeconfig(cluster.admin_kubeconfig))
    admin.patch_namespace(ns, {"metadata": {"annotations": {workload_rules.POD_TEMPLATE_BYTES: str(KIB)}}})
    core.patch_namespaced_pod("made", ns, {"metadata": {"labels": {"relabelled": "yes"}}})
    refused_for_size(lambda: core.patch_namespaced_pod("made", ns, {"spec": {"tolerations": [
        {"key": "gpu", "operator": "Exists"}]}}))


HOLD = "example.test/hold"


async def test_an_object_being_deleted_cannot_be_grown(gateway: Any, tmp_path: Path) -> None:
    """A finalizer of the tenant's own keeps a deleted object stored; it is
    held to its caps all the same, and can still be let go."""
    alice = await onboard(gateway, tmp_path)
    ns, core = alice.namespace, alice.core
    apps = client.AppsV1Api(alice.api)
    core.create_namespaced_config_map(ns, config_map("held", 10, finalizers=[HOLD]))
    apps.create_namespaced_deployment(ns, {**deployment("held", {"spec": pod("t")["spec"]}),
                                           "metadata": {"name": "held", "finalizers": [HOLD]}})
    core.delete_namespaced_config_map("held", ns)
    apps.delete_namespaced_deployment("held", ns)
    assert core.read_namespaced_config_map("held", ns).metadata.deletion_timestamp is not None
    assert apps.read_namespaced_deployment("held", ns).metadata.deletion_timestamp is not None
    refused_for_size(lambda: core.patch_namespaced_config_map("held", ns, {"data": {"v": "x" * CAPS.config_map}}))
    refused_for_size(lambda: core.patch_namespaced_config_map("held", ns, {"metadata": {
        "annotations": {"note": "n" * CAPS.metadata}}}))
    refused_for_size(lambda: core.patch_namespaced_config_map("held", ns, {"metadata": {
        "labels": {f"l{number}": "v" * 60 for number in range(CAPS.metadata // 60)}}}))
    fat_env = [{"name": "BLOB", "value": "x" * CAPS.pod_template}]
    refused_for_size(lambda: apps.patch_namespaced_deployment("held", ns, {"spec": {"template": {"spec": {
        "containers": [container(env=fat_env)]}}}}))
    # Letting go still works: removing the finalizer grows nothing.
    core.patch_namespaced_config_map("held", ns, {"metadata": {"finalizers": None}})
    apps.patch_namespaced_deployment("held", ns, {"metadata": {"finalizers": None}})
    assert refusal(lambda: core.read_namespaced_config_map("held", ns))[0] == 404
    assert refusal(lambda: apps.read_namespaced_deployment("held", ns))[0] == 404


FOUR_BYTES = "\U0001F600"  # one code point, four UTF-8 bytes


async def test_text_is_measured_in_bytes_not_characters(gateway: Any, tmp_path: Path) -> None:
    alice = await onboard(gateway, tmp_path)
    ns, core = alice.namespace, alice.core
    wide = FOUR_BYTES * (CAPS.config_map // 3)  # fewer characters than the cap, more bytes
    assert len(wide) < CAPS.config_map < len(wide.encode())
    refused_for_size(lambda: core.create_namespaced_config_map(ns, {"metadata": {"name": "wide"}, "data": {"v": wide}}))
    refused_for_size(lambda: core.create_namespaced_config_map(ns, config_map("noted", 1, annotations={
        "note": FOUR_BYTES * (CAPS.metadata // 3)})))
    refused_for_size(lambda: core.create_namespaced_pod(ns, pod("wide", container(env=[
        {"name": "W", "value": FOUR_BYTES * (CAPS.pod_template // 3)}]))))
    refused_for_size(lambda: core.create_namespaced_pod(ns, pod("wide", container(args=[
        FOUR_BYTES * (CAPS.pod_template // 3)]))))
    core.create_namespaced_config_map(ns, {"metadata": {"name": "fits"}, "data": {"v": FOUR_BYTES * 100}})


def budget(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"selector": {"matchLabels": {"app": name}}, **spec}}


async def test_a_disruption_budget_must_let_a_pod_go(gateway: Any, tmp_path: Path) -> None:
    alice = await onboard(gateway, tmp_path)
    policy = client.PolicyV1Api(alice.api)
    for spec in ({"maxUnavailable": 0}, {"maxUnavailable": "0%"}, {"minAvailable": 1}, {"minAvailable": "50%"},
                 {"minAvailable": "100%"}, {}):
        status, message = refusal(lambda: policy.create_namespaced_pod_disruption_budget(
            alice.namespace, budget("stuck", **spec)))
        assert status == 403 and "node drains" in message, (spec, status, message)
    for name, spec in (("one", {"maxUnavailable": 1}), ("share", {"maxUnavailable": "10%"})):
        policy.create_namespaced_pod_disruption_budget(alice.namespace, budget(name, **spec))
    status, message = refusal(lambda: policy.patch_namespaced_pod_disruption_budget(
        "one", alice.namespace, {"spec": {"maxUnavailable": 0}}))
    assert status == 403 and "node drains" in message, message


PULL_ALWAYS = "imagePullPolicy: Always"


async def test_images_off_the_shared_list_are_pulled_with_the_tenants_own_right(
        gateway: Any, tmp_path: Path) -> None:
    alice = await onboard(gateway, tmp_path)
    ns, core = alice.namespace, alice.core
    apps = client.AppsV1Api(alice.api)
    # A tagged image defaults to IfNotPresent: another tenant's private image,
    # once on the node, would run without its registry being asked.
    private = "registry.invalid/victim/secret-app:v1"
    for policy in (None, "IfNotPresent", "Never"):
        fields = {"imagePullPolicy": policy} if policy else {}
        status, message = refusal(lambda: core.create_namespaced_pod(ns, pod("cached", container(image=private, **fields))))
        assert status == 403 and PULL_ALWAYS in message and private in message, (policy, status, message)
    init = pod("init-cached", container(image=private, imagePullPolicy="Always"))
    init["spec"]["initContainers"] = [container("init", image=private)]
    assert refusal(lambda: core.create_namespaced_pod(ns, init))[0] == 403
    status, message = refusal(lambda: apps.create_namespaced_deployment(
        ns, deployment("cached", {"spec": pod("t", container(image=private))["spec"]})))
    assert status == 403 and PULL_ALWAYS in message, message
    # Always: the registry checks the pod's own credentials.
    core.create_namespaced_pod(ns, pod("pulled", container(image=private, imagePullPolicy="Always")))
    apps.create_namespaced_deployment(ns, deployment("pulled", {"spec": pod(
        "t", container(image=private, imagePullPolicy="Always"))["spec"]}))
    # The shared list (here the cluster's own images, GATEWAY_SHARED_IMAGES) may come from the cache ...
    shared = core.create_namespaced_pod(ns, pod("shared", container(image=BUSYBOX_IMAGE, imagePullPolicy="IfNotPresent")))
    assert shared.spec.containers[0].image_pull_policy == "IfNotPresent"
    # ... and only what is on it: a look-alike outside the prefix is not.
    look_alike = "localhost/tenant-gateway-not/busybox:v1"
    assert refusal(lambda: core.create_namespaced_pod(ns, pod("alike", container(image=look_alike))))[0] == 403


async def test_a_tiers_own_shared_images_come_from_the_cache(make_gateway: Any, tmp_path: Path) -> None:
    gateway = await make_gateway(tiers="basic: {hard: {requests.cpu: '4'}, sharedImages: [docker.io/library/nginx]}")
    alice = await onboard(gateway, tmp_path)
    ns, core = alice.namespace, alice.core
    core.create_namespaced_pod(ns, pod("nginx", container(image="docker.io/library/nginx:1.27")))
    core.create_namespaced_pod(ns, pod("pinned", container(image="docker.io/library/nginx@sha256:" + "0" * 64)))
    status, message = refusal(lambda: core.create_namespaced_pod(
        ns, pod("other", container(image="docker.io/library/nginx-private:1"))))
    assert status == 403 and PULL_ALWAYS in message, message


async def test_a_shared_entry_matches_no_registry_of_the_same_name(
        cluster: LocalCluster, gateway: Any, tmp_path: Path) -> None:
    """An entry without a `/` (which no tier may have any more, and the
    gateway may not write) still names one repository, not a registry."""
    alice = await onboard(gateway, tmp_path)
    ns, core = alice.namespace, alice.core
    admin = client.CoreV1Api(kubeclients.from_kubeconfig(cluster.admin_kubeconfig))
    admin.patch_namespace(ns, {"metadata": {"annotations": {workload_rules.SHARED_IMAGES: "registry"}}})
    victim = "registry:5000/victim/app:1"
    status, message = refusal(lambda: core.create_namespaced_pod(ns, pod("victim", container(image=victim))))
    assert status == 403 and PULL_ALWAYS in message and victim in message, (status, message)
    core.create_namespaced_pod(ns, pod("tagged", container(image="registry:1")))


def root_pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"containers": [container(imagePullPolicy="Always")]}}


def privileged_pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"containers": [
        container(imagePullPolicy="Always", securityContext={"privileged": True})]}}


async def test_pod_security_is_restricted_unless_the_tier_says_baseline(make_gateway: Any, tmp_path: Path) -> None:
    gateway = await make_gateway(tiers=BASELINE_TIERS)
    strict = await onboard(gateway, tmp_path)
    for make in (root_pod, privileged_pod):
        status, message = refusal(lambda: strict.core.create_namespaced_pod(strict.namespace, make("escape")))
        assert status == 403 and "violates PodSecurity" in message and "restricted:latest" in message, message
    strict.core.create_namespaced_pod(strict.namespace, pod("compliant"))

    relaxed = await onboard(gateway, tmp_path, tier="relaxed")
    relaxed.core.create_namespaced_pod(relaxed.namespace, root_pod("as-root"))  # baseline runs images as root
    status, message = refusal(lambda: relaxed.core.create_namespaced_pod(relaxed.namespace, privileged_pod("escape")))
    assert status == 403 and "violates PodSecurity" in message and "baseline:latest" in message, message


async def test_a_namespace_from_before_the_tiers_rules_gets_them_on_resume(
        cluster: LocalCluster, gateway: Any, database_url: str, tmp_path: Path) -> None:
    """Onboarded when namespaces enforced baseline and carried no caps."""
    alice = await onboard(gateway, tmp_path)
    admin = client.CoreV1Api(kubeclients.from_kubeconfig(cluster.admin_kubeconfig))
    admin.patch_namespace(alice.namespace, {"metadata": {
        "labels": {workload_rules.POD_SECURITY_ENFORCE: "baseline"},
        "annotations": {key: None for key in workload_rules.namespace_annotations(BASIC.rules)}}})
    # Until then the basic tier's caps hold all the same (the policies' defaults).
    refused_for_size(lambda: alice.core.create_namespaced_config_map(
        alice.namespace, config_map("huge", CAPS.config_map)))
    root = await admin_session(gateway, database_url)
    for move in ("suspend", "resume"):
        answer = await root.call("POST", f"/api/v1/workspaces/{alice.workspace_id}/{move}")
        assert answer.status == 200, await answer.text()
    found = admin.read_namespace(alice.namespace).metadata
    assert found.labels[workload_rules.POD_SECURITY_ENFORCE] == "restricted"
    wanted = workload_rules.namespace_annotations(workload_rules.with_images(BASIC.rules, (LOCAL_IMAGES,)))
    assert {key: found.annotations.get(key) for key in wanted} == wanted
    # Suspension ended the old kubeconfig's token: a new one, as the owner would fetch.
    (tmp_path / "again.kubeconfig").write_text(await alice.session.kubeconfig())
    again = client.CoreV1Api(kubeclients.from_kubeconfig(tmp_path / "again.kubeconfig"))
    status, message = refusal(lambda: again.create_namespaced_pod(alice.namespace, root_pod("as-root")))
    assert status == 403 and "violates PodSecurity" in message and "restricted:latest" in message, message


async def test_a_tenant_cannot_raise_its_own_caps(gateway: Any, tmp_path: Path) -> None:
    alice = await onboard(gateway, tmp_path)
    status, _ = refusal(lambda: alice.core.patch_namespace(alice.namespace, {"metadata": {"annotations": {
        workload_rules.CONFIG_MAP_BYTES: str(10 ** 9)}}}))
    assert status == 403
    assert manifests.WORKSPACE_LABEL in alice.core.read_namespace(alice.namespace).metadata.labels
