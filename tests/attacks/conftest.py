"""The attack tests need every admission policy in deploy/kubernetes/admission.yaml
enforced before the first move. The API server loads policies through an
informer; the local cluster waits only for `tenant-gateway-confined`, so the
others may still be loading when a session's first test starts. This fixture
waits, once per session, until each policy refuses a dry run with its own
message. (It belongs in devstack's start-up probe; it lives here until then.)
"""

from __future__ import annotations

import time
import uuid
from typing import Iterator

import pytest

from devstack.cluster import LocalCluster

WORKSPACE_LABEL = "tenant-gateway.io/workspace-id"
SUSPENDED_LABEL = "tenant-gateway.io/suspended"
LOAD_DEADLINE_SECONDS = 90.0


def _refused_with(cluster: LocalCluster, message: str, *args: str, manifest: str | None = None) -> bool:
    result = cluster.kubectl_run(*args, "--dry-run=server", *(("-f", "-") if manifest else ()),
                                 input=manifest, check=False)
    return result.returncode != 0 and message in result.stderr


@pytest.fixture(scope="session", autouse=True)
def admission_policies_loaded(cluster: LocalCluster) -> Iterator[None]:
    ns = f"policy-probe-{uuid.uuid4().hex[:8]}"
    cluster.kubectl_run("create", "namespace", ns)
    # An ordinary identity with `edit` there, bound before the namespace is a
    # tenant's (afterwards the subjects policy would refuse the binding).
    cluster.kubectl_run("-n", ns, "create", "serviceaccount", "prober")
    cluster.kubectl_run("-n", ns, "create", "rolebinding", "prober", "--clusterrole=edit", f"--serviceaccount={ns}:prober")
    cluster.kubectl_run("label", "namespace", ns, f"{WORKSPACE_LABEL}=policy-probe", f"{SUSPENDED_LABEL}=true")
    external_name = ("apiVersion: v1\nkind: Service\nmetadata: {name: probe}\n"
                     "spec: {type: ExternalName, externalName: example.invalid}\n")
    user_binding = ("apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: probe}\n"
                    "roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}\n"
                    "subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: probe@example.test}]\n")
    probes = {
        "tenant-gateway-no-external-names": lambda: _refused_with(
            cluster, "may not be of type ExternalName", "-n", ns, "create", manifest=external_name),
        "tenant-gateway-rolebinding-subjects": lambda: _refused_with(
            cluster, "only that namespace's own ServiceAccounts", "-n", ns, "create", manifest=user_binding),
        "tenant-gateway-no-gateway-grade-tokens": lambda: _refused_with(
            cluster, "reserved for the gateway", "-n", ns, "create", "serviceaccount", "tenant-gateway"),
        "tenant-gateway-suspended": lambda: _refused_with(
            cluster, "this workspace is suspended", "-n", ns, "create", "configmap", "probe",
            f"--as=system:serviceaccount:{ns}:prober"),
    }
    deadline = time.monotonic() + LOAD_DEADLINE_SECONDS
    waiting = dict(probes)
    while waiting and time.monotonic() < deadline:
        waiting = {name: probe for name, probe in waiting.items() if not probe()}
        if waiting:
            time.sleep(0.25)
    cluster.kubectl_run("delete", "namespace", ns, "--wait=false", check=False)
    if waiting:
        raise RuntimeError(f"admission policies not enforced after {LOAD_DEADLINE_SECONDS:.0f} s: {sorted(waiting)}")
    yield
