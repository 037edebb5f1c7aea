"""Render the contract's kubeconfig, and the fleet's (one file, one
context per workspace: `?all=true`). Pure.

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
from dataclasses import dataclass, field
from typing import Iterable

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


def _trust(ca_base64: str, tls_server_name: str | None) -> str:
    """A cluster entry's lines after `server`: its CA, and the name its
    certificate is checked against when one front end serves several."""
    ca = f"    certificate-authority-data: {_scalar(ca_base64)}\n" if ca_base64 else ""
    return ca + (f"    tls-server-name: {_scalar(tls_server_name)}\n" if tls_server_name else "")


def _render(server: str, ca_base64: str, namespace: str, credential: str, user: str,
            tls_server_name: str | None = None) -> str:
    return _TEMPLATE.format(server=_scalar(server), ca=_trust(ca_base64, tls_server_name),
                            namespace=_scalar(namespace), user=_scalar(user), credential=credential)


def token_credential(token: str) -> str:
    """A user entry's body holding `token`."""
    return f"    token: {_scalar(token)}\n"


def exec_credential(gateway: str, workspace_id: str) -> str:
    """A user entry's body that runs `tenant-gateway credential` for the workspace."""
    return _EXEC_USER.format(gateway=_scalar(gateway), workspace=_scalar(workspace_id))


def render_kubeconfig(*, server: str, ca_base64: str, namespace: str, token: str,
                      user: str = TENANT_SERVICE_ACCOUNT, tls_server_name: str | None = None) -> str:
    """`user`: the member's ServiceAccount the token is of (users[0].name)."""
    return _render(server, ca_base64, namespace, token_credential(token), user, tls_server_name)


def render_exec_kubeconfig(*, server: str, ca_base64: str, namespace: str, gateway: str, workspace_id: str,
                           user: str = TENANT_SERVICE_ACCOUNT, tls_server_name: str | None = None) -> str:
    """The same cluster and context; the user runs `tenant-gateway credential`
    (the contract's `format=exec`), so the file holds no token at all.
    kubectl tells it the cluster it is about to call (provideClusterInfo), and
    it hands a token only to the workspace's own (proxy.cli.client.cached)."""
    return _render(server, ca_base64, namespace, exec_credential(gateway, workspace_id), user, tls_server_name)


@dataclass(frozen=True)
class FleetContext:
    """One workspace in the fleet's file: its cluster's public endpoint and
    the caller's credential there (`token_credential` or `exec_credential`)."""

    cluster: str
    namespace: str
    server: str
    ca_base64: str
    credential: str = field(repr=False)
    tls_server_name: str | None = None

    @property
    def name(self) -> str:
        """`<cluster>/<namespace>`: stable (neither ever changes) and never
        colliding (a namespace is unique on its cluster), so files
        downloaded at different times merge without duplicates."""
        return f"{self.cluster}/{self.namespace}"


def render_fleet_kubeconfig(contexts: Iterable[FleetContext]) -> str:
    """One context per workspace, each with a cluster entry and a user
    entry of the same name as the context, in name order; the first is
    current. No context at all is a valid, empty file."""
    ordered = sorted(contexts, key=lambda context: context.name)
    clusters, named, users = [], [], []
    for context in ordered:
        name = _scalar(context.name)
        clusters.append(f"- name: {name}\n  cluster:\n    server: {_scalar(context.server)}\n"
                        + _trust(context.ca_base64, context.tls_server_name))
        named.append(f"- name: {name}\n  context:\n    cluster: {name}\n"
                     f"    namespace: {_scalar(context.namespace)}\n    user: {name}\n")
        users.append(f"- name: {name}\n  user:\n{context.credential}")
    current = _scalar(ordered[0].name) if ordered else '""'
    return ("apiVersion: v1\nkind: Config\n"
            f"clusters:{_items(clusters)}contexts:{_items(named)}current-context: {current}\nusers:{_items(users)}")


def _items(entries: list[str]) -> str:
    return "\n" + "".join(entries) if entries else " []\n"
