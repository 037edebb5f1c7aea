"""The gateway's image (`make image`, devstack/image.py) as a Deployment runs
it: imported into the real node's containerd and run as pods under the
restricted securityContext of deploy/kubernetes/deployment.yaml (user 10001,
read-only root filesystem, no capabilities).

The API server listens on 127.0.0.1 only, so the `check` pod uses the host's
network and the restricted credential's kubeconfig from a Secret; the
in-cluster path (the `kubernetes` Service) needs kube-proxy, which the local
cluster does not run yet."""

from __future__ import annotations

import base64
import copy
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devstack.cluster import LocalCluster
from devstack.image import archive_config, archive_name, ensure_image, image_name
from tests.support.environment import SESSION_SECRET

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
DEPLOYMENT = ROOT / "deploy" / "kubernetes" / "deployment.yaml"


@pytest.fixture(scope="module")
def image_archive() -> Path:
    """Built once per machine and source tree; `make test` builds it before this ring."""
    return ensure_image(ROOT)


@pytest.fixture(scope="module")
def imported(cluster: LocalCluster, image_archive: Path) -> str:
    """The image's name on the node (pods may run it with `imagePullPolicy: Never`)."""
    assert cluster.node is not None
    cluster.node.import_image(image_archive)
    return archive_name(image_archive)


@pytest.fixture
def namespace(cluster: LocalCluster) -> Iterator[str]:
    name = f"image-{uuid.uuid4().hex[:8]}"
    cluster.kubectl_run("create", "namespace", name)
    try:
        yield name
    finally:
        cluster.kubectl_run("delete", "namespace", name, "--wait=false", check=False)


def deployed_container() -> tuple[dict[str, Any], dict[str, Any]]:
    """The pod spec and gateway container the shipped Deployment runs."""
    spec = yaml.safe_load(DEPLOYMENT.read_text())["spec"]["template"]["spec"]
    return spec, spec["containers"][0]


def gateway_pod(name: str, image: str, args: list[str], **extra: Any) -> dict[str, Any]:
    """A one-shot pod of the image with the Deployment's security contexts and
    its writable /tmp, and nothing else writable."""
    spec, container = deployed_container()
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": copy.deepcopy(spec["securityContext"]),
            "containers": [{
                "name": "gateway", "image": image, "imagePullPolicy": "Never", "args": args,
                "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
                "securityContext": copy.deepcopy(container["securityContext"]),
                "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
            }],
            "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}],
        },
    }
    pod["spec"].update(extra.pop("spec", {}))
    pod["spec"]["containers"][0].update(extra)
    return pod


def run_to_completion(cluster: LocalCluster, namespace: str, pod: dict[str, Any]) -> tuple[str, str]:
    """The pod's final phase and its log."""
    cluster.kubectl_run("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(pod))
    name = pod["metadata"]["name"]
    deadline = time.monotonic() + 90
    phase = ""
    while time.monotonic() < deadline:
        phase = cluster.kubectl_run("-n", namespace, "get", "pod", name, "-o", "jsonpath={.status.phase}").stdout
        if phase in ("Succeeded", "Failed"):
            break
        time.sleep(0.5)
    logs = cluster.kubectl_run("-n", namespace, "logs", name, check=False)
    described = "" if phase in ("Succeeded", "Failed") else cluster.kubectl_run(
        "-n", namespace, "describe", "pod", name, check=False).stdout
    return phase, logs.stdout + logs.stderr + described


def test_the_image_runs_the_console_script_as_user_10001(image_archive: Path) -> None:
    config = archive_config(image_archive)["config"]
    assert config["User"] == "10001"
    assert config["Entrypoint"] == ["tenant-gateway"]
    assert config["Cmd"] == ["serve"]
    assert "PYTHONDONTWRITEBYTECODE=1" in config["Env"]


def test_the_archive_carries_the_name_the_deployment_runs(image_archive: Path) -> None:
    _, container = deployed_container()
    assert archive_name(image_archive) == image_name(ROOT) == container["image"]


def test_help_runs_read_only_and_unprivileged(cluster: LocalCluster, imported: str, namespace: str) -> None:
    _, container = deployed_container()
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    phase, log = run_to_completion(cluster, namespace, gateway_pod("help", imported, ["--help"]))
    assert phase == "Succeeded", log
    assert "usage: tenant-gateway" in log
    assert "check" in log and "serve" in log


def test_check_passes_with_the_restricted_credential(cluster: LocalCluster, imported: str, namespace: str) -> None:
    kubeconfig = base64.b64encode(cluster.gateway_kubeconfig.read_bytes()).decode()
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "gateway-kubeconfig"},
              "data": {"kubeconfig": kubeconfig}, "stringData": {"session-secret": SESSION_SECRET}}
    cluster.kubectl_run("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(secret))
    pod = gateway_pod(
        "check", imported, ["check"],
        # As the Deployment sets it: without a session secret the gateway
        # would keep a dev-mode key under its data dir, on a read-only root.
        env=[{"name": "GATEWAY_KUBECONFIG", "value": "/etc/tenant-gateway-kube/kubeconfig"},
             {"name": "GATEWAY_SESSION_SECRET",
              "valueFrom": {"secretKeyRef": {"name": "gateway-kubeconfig", "key": "session-secret"}}}],
        volumeMounts=[{"name": "tmp", "mountPath": "/tmp"},
                      {"name": "kube", "mountPath": "/etc/tenant-gateway-kube", "readOnly": True}],
        # The API server listens on the host's loopback only (see the module docstring).
        spec={"hostNetwork": True,
              "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
                          {"name": "kube", "secret": {"secretName": "gateway-kubeconfig"}}]},
    )
    phase, log = run_to_completion(cluster, namespace, pod)
    assert phase == "Succeeded", log
    assert log.startswith("ok:"), log
