"""The gateway installed inside the local cluster the way operators install
it: `make image`'s image imported into the node's containerd, the Helm
chart installed with deploy/helm/local-cluster.values.yaml, three replicas
on the real node, reached through their Service (kube-proxy) at a fixed
cluster IP with a serving certificate from the cluster's CA, and their own
credential from in-cluster configuration (the `kubernetes` Service).

Used by the in-cluster test ring (tests/integration/test_in_cluster.py)
and by `tenant-gateway dev --in-cluster`. The database is one the pods can
reach over the network (devstack.podpostgres).
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from devstack import chart
from devstack.cluster import LocalCluster
from devstack.image import ensure_image
from devstack.processes import ClusterStartError

NAMESPACE = chart.NAMESPACE
VALUES = chart.REPO_ROOT / "deploy" / "helm" / "local-cluster.values.yaml"
SERVICE_IP = "10.96.0.11"
"""In the static band of the Service range (devstack.services.SERVICE_CIDR), beside CoreDNS's."""
SERVICE_NAME = f"tenant-gateway.{NAMESPACE}.svc"
_READY_SECONDS = 240


@dataclass
class InClusterGateway:
    cluster: LocalCluster
    helm: Path
    work_dir: Path
    database_url: str
    session_secret: str
    settings: dict[str, str] = field(default_factory=dict)
    """GATEWAY_* settings beyond the chart's values (its `settings` map)."""

    @property
    def url(self) -> str:
        """Where clients on the node reach the Service (kube-proxy's rules hold for the host too)."""
        return f"https://{SERVICE_IP}"

    @property
    def ca_file(self) -> Path:
        return self.cluster.ca_file

    @property
    def values_file(self) -> Path:
        return self.work_dir / "in-cluster.values.yaml"

    def install(self) -> None:
        """Image, Secrets and `helm upgrade --install`; returns once every replica is ready."""
        node = self.cluster.node
        if node is None:
            raise ClusterStartError("the gateway runs in-cluster only on a cluster with its node")
        node.import_image(ensure_image(chart.REPO_ROOT))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._apply_namespace_and_secrets()
        self.upgrade()

    def upgrade(self, settings: Mapping[str, str] | None = None) -> None:
        """`helm upgrade --install` with these GATEWAY_* settings (the chart's
        `settings` map) replacing the last ones: a change rolls the replicas."""
        if settings is not None:
            self.settings = dict(settings)
        self.values_file.write_text(yaml.safe_dump(self._values()))
        self._helm("upgrade", "--install", chart.RELEASE, str(chart.CHART), "--values", str(VALUES),
                   "--values", str(self.values_file), "--wait", f"--timeout={_READY_SECONDS}s")

    def restart(self) -> None:
        """`kubectl rollout restart`, and wait until the new replicas all serve."""
        self.cluster.kubectl_run("-n", NAMESPACE, "rollout", "restart", "deployment/tenant-gateway")
        self.wait_rolled_out()

    def wait_rolled_out(self) -> None:
        # Longer than kubectl_run's minute.
        waited = subprocess.run([str(self.cluster.kubectl), f"--kubeconfig={self.cluster.admin_kubeconfig}", "-n",
                                 NAMESPACE, "rollout", "status", "deployment/tenant-gateway",
                                 f"--timeout={_READY_SECONDS}s"], capture_output=True, text=True,
                                timeout=_READY_SECONDS + 30)
        if waited.returncode != 0:
            raise ClusterStartError(f"the gateway's rollout did not finish: {waited.stderr.strip()}")
        # `rollout status` is done before the old replicas have stopped
        # (preStop, then the drain): wait for them too.
        deadline = time.monotonic() + _READY_SECONDS
        while any(pod["metadata"].get("deletionTimestamp") for pod in self.pods()):
            if time.monotonic() > deadline:
                raise ClusterStartError("the gateway's old replicas did not stop")
            time.sleep(0.5)

    def uninstall(self) -> None:
        self._helm("uninstall", chart.RELEASE, "--wait", "--timeout=120s", check=False)
        for secret in ("tenant-gateway", "tenant-gateway-tls"):
            self.cluster.kubectl_run("-n", NAMESPACE, "delete", "secret", secret, "--ignore-not-found", check=False)

    def pods(self) -> list[dict[str, Any]]:
        listed = self.cluster.kubectl_run("-n", NAMESPACE, "get", "pods", "-l", "app.kubernetes.io/name=tenant-gateway",
                                          "-o", "json")
        return list(json.loads(listed.stdout)["items"])

    def exec(self, *argv: str, input: str | None = None) -> str:
        """A command in one of the gateway's containers (its output); raises on failure."""
        return self.cluster.kubectl_run("-n", NAMESPACE, "exec", "-i", "deploy/tenant-gateway", "-c", "gateway",
                                        "--", *argv, input=input).stdout

    def _values(self) -> dict[str, object]:
        assert self.cluster.node is not None
        api_port = int(self.cluster.server.rsplit(":", 1)[1])
        return {
            "publicUrl": f"https://{SERVICE_NAME}",
            # Issued kubeconfigs go straight to the API server, at the address
            # users on the host reach it; its CA is the in-cluster one.
            "publicServer": self.cluster.server,
            "service": {"port": 443, "clusterIP": SERVICE_IP},
            "settings": self.settings,
            # The database listens on the node; the API server's endpoint port
            # is the local one (with the Service's 443).
            "networkPolicy": {"databasePort": int(self.database_url.rsplit(":", 1)[1].split("/")[0]),
                              "apiServerPorts": [443, api_port]},
        }

    def _apply_namespace_and_secrets(self) -> None:
        """The namespace, and what the values name in it: the database and
        session secret, and the Service's serving certificate (its DNS names
        and fixed cluster IP)."""
        cert, key = self.cluster.serving_certificate(
            "in-cluster-gateway", (SERVICE_NAME, f"{SERVICE_NAME}.cluster.local", SERVICE_IP))
        # helm needs the namespace first; restricted, as README's install makes it.
        enforced = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn", "audit")}
        objects = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": enforced}},
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tenant-gateway", "namespace": NAMESPACE},
             "stringData": {"database-url": self.database_url, "session-secret": self.session_secret}},
            {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
             "metadata": {"name": "tenant-gateway-tls", "namespace": NAMESPACE},
             "data": {"tls.crt": _b64(cert.read_bytes()), "tls.key": _b64(key.read_bytes())}},
        ]
        self.cluster.kubectl_run("apply", "-f", "-", input=yaml.safe_dump_all(objects))

    def _helm(self, *args: str, check: bool = True) -> None:
        result = chart.helm(self.helm, *args, "--namespace", NAMESPACE, f"--kubeconfig={self.cluster.admin_kubeconfig}",
                            check=False, timeout=_READY_SECONDS + 30)
        if check and result.returncode != 0:
            raise ClusterStartError(f"helm {args[0]} failed: {result.stderr.strip()}")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
