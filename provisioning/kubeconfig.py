"""Render the contract's kubeconfig. Pure.

The document is fixed but for four values (and which credential it holds), so it is a template: every value
goes in as a JSON string, which is also a YAML double-quoted scalar, so no
namespace, server, CA or token can end its scalar early or add structure.
Values must be printable ASCII (a URL, a DNS label, base64 and a JWT always
are), which keeps to the escapes every YAML parser reads the same way.
(PyYAML's emitter gave the same guarantee at about thirty times the cost, a
tenth of what issuing a kubeconfig cost the gateway.)
"""

from __future__ import annotations

import json

from provisioning.manifests import TENANT_SERVICE_ACCOUNT

_TEMPLATE = """\
apiVersion: v1
kind: Config
clusters:
- name: internal-cluster
  cluster:
    server: {server}
{ca}contexts:
- name: tenant-context
  context:
    cluster: internal-cluster
    namespace: {namespace}
    user: {user}
current-context: tenant-context
users:
- name: {user}
  user:
{credential}"""


_EXEC_USER = """\
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: tenant-gateway
      args: [credential, --gateway, {gateway}, --workspace, {workspace}]
      interactiveMode: IfAvailable
      provideClusterInfo: true
"""


def _scalar(value: str) -> str:
    if not (value.isascii() and value.isprintable()):
        raise ValueError("kubeconfig values must be printable ASCII")
    return json.dumps(value)


def _render(server: str, ca_base64: str, namespace: str, credential: str, user: str) -> str:
    ca = f"    certificate-authority-data: {_scalar(ca_base64)}\n" if ca_base64 else ""
    return _TEMPLATE.format(server=_scalar(server), ca=ca, namespace=_scalar(namespace),
                            user=_scalar(user), credential=credential)


def render_kubeconfig(*, server: str, ca_base64: str, namespace: str, token: str,
                      user: str = TENANT_SERVICE_ACCOUNT) -> str:
    """`user`: the member's ServiceAccount the token is of (users[0].name)."""
    return _render(server, ca_base64, namespace, f"    token: {_scalar(token)}\n", user)


def render_exec_kubeconfig(*, server: str, ca_base64: str, namespace: str, gateway: str, workspace_id: str,
                           user: str = TENANT_SERVICE_ACCOUNT) -> str:
    """The same cluster and context; the user runs `tenant-gateway credential`
    (the contract's `format=exec`), so the file holds no token at all.
    kubectl tells it the cluster it is about to call (provideClusterInfo), and
    it hands a token only to the workspace's own (proxy.cli.client.cached)."""
    return _render(server, ca_base64, namespace,
                   _EXEC_USER.format(gateway=_scalar(gateway), workspace=_scalar(workspace_id)), user)
