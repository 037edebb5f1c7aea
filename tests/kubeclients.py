"""The official (synchronous) Kubernetes Python client, configured from a
kubeconfig file or a bare token: the tests' way of acting as a real client."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from kubernetes import client, config

from devstack.cluster import LocalCluster


def from_kubeconfig(path: Path | str) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(path))


def from_token(cluster: LocalCluster, token: str, server: str | None = None) -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = server or cluster.server
    configuration.ssl_ca_cert = str(cluster.ca_file)
    configuration.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(configuration)


def claims(token: str) -> dict[str, object]:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))  # type: ignore[no-any-return]
