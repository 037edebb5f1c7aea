"""The real Kubernetes clients, as tests drive them: the official
(synchronous) Python client, configured from a kubeconfig file or a bare
token, and the real kubectl, pointed at the cluster or at the gateway."""

from __future__ import annotations

import base64
import json
import subprocess
import uuid
from pathlib import Path

import yaml

from kubernetes import client, config

from devstack.cluster import LocalCluster


def from_kubeconfig(path: Path | str) -> client.ApiClient:
    api: client.ApiClient = config.new_client_from_config(config_file=str(path))  # type: ignore[no-untyped-call]
    return api


def from_token(cluster: LocalCluster, token: str, server: str | None = None) -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = server or cluster.server
    configuration.ssl_ca_cert = str(cluster.ca_file)
    configuration.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(configuration)


def through_gateway(server: str, token: str, ca_file: Path) -> client.ApiClient:
    """A client of the gateway's `/k8s/{workspace}` with a gateway session token."""
    configuration = client.Configuration()
    configuration.host = server
    configuration.api_key = {"authorization": f"Bearer {token}"}
    configuration.ssl_ca_cert = str(ca_file)
    return client.ApiClient(configuration)


def kubeconfig_for_proxy(tmp_path: Path, server: str, token: str, namespace: str, ca_file: Path) -> Path:
    path = tmp_path / f"proxy-{uuid.uuid4().hex[:6]}.kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "gw", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": "me", "user": {"token": token}}],
        "contexts": [{"name": "gw", "context": {"cluster": "gw", "user": "me", "namespace": namespace}}],
        "current-context": "gw",
    }))
    return path


def kubectl(cluster: LocalCluster, kubeconfig: Path, *args: str,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`env` replaces the environment (kubectl reads its feature gates there)."""
    return subprocess.run([str(cluster.kubectl), f"--kubeconfig={kubeconfig}", "--request-timeout=15s", *args],
                          capture_output=True, text=True, timeout=60, env=env)


def claims(token: str) -> dict[str, object]:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))  # type: ignore[no-any-return]
