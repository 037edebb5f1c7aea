"""Render the contract's kubeconfig. Pure; yaml.safe_dump does the quoting, so
no namespace, server or token value can inject YAML structure."""

from __future__ import annotations

import yaml

from provisioning.manifests import TENANT_SERVICE_ACCOUNT

# libyaml's safe dumper when PyYAML was built with it: same output, ~10x faster.
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def render_kubeconfig(*, server: str, ca_base64: str, namespace: str, token: str) -> str:
    cluster: dict[str, str] = {"server": server}
    if ca_base64:
        cluster["certificate-authority-data"] = ca_base64
    return yaml.dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "internal-cluster", "cluster": cluster}],
            "contexts": [{
                "name": "tenant-context",
                "context": {"cluster": "internal-cluster", "namespace": namespace, "user": TENANT_SERVICE_ACCOUNT},
            }],
            "current-context": "tenant-context",
            "users": [{"name": TENANT_SERVICE_ACCOUNT, "user": {"token": token}}],
        },
        Dumper=_DUMPER,
        sort_keys=False,
    )
