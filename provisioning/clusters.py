"""The cluster registry as configured: which clusters the gateway serves (pure).

`GATEWAY_CLUSTERS` names a YAML list (the GATEWAY_CONFIG file may hold the
same list under `clusters`); each entry:

    - name: eu-1                 # a DNS label: it is in context names and the database
      kubeconfig: /etc/gw/eu-1   # the gateway's restricted credential there (none: in-cluster / ~/.kube/config)
      public_server: https://eu-1.example.com:6443   # into kubeconfigs (none: the credential's)
      public_ca_file: /etc/gw/eu-1-ca.crt            # into kubeconfigs (none: the credential's)
      tls_server_name: eu-1.example.com              # optional: one front end serving several by SNI
      labels: {region: eu, environment: prod}
      kind: shared               # or dedicated: one workspace at a time (hard tenancy)

The registry lives in configuration, never in the database: the gateway's
own cluster credentials are files or mounted Secrets, never rows. Without a
list, today's single-cluster settings mean one shared cluster named
DEFAULT_CLUSTER (proxy.settings.model's `clusters` decides which).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping
from urllib.parse import urlsplit

ClusterKind = Literal["shared", "dedicated"]
DEFAULT_CLUSTER = "default"
"""The one cluster of a gateway configured without a list; existing workspaces are on it."""
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# Kubernetes' label rules, kept to what a selector in a tier file can name.
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_KNOWN = frozenset({"name", "kubeconfig", "public_server", "public_ca_file", "tls_server_name", "labels", "kind"})
_KINDS = ("shared", "dedicated")


class ClusterConfigError(ValueError):
    """A cluster entry the gateway must not start with."""


@dataclass(frozen=True)
class ClusterSettings:
    name: str
    kubeconfig: Path | None = None
    """The gateway's own restricted credential for it. None: in-cluster
    config when running in a pod, else ~/.kube/config."""
    public_server: str | None = None
    """The API server URL written into kubeconfigs. None: the credential's."""
    public_ca_file: Path | None = None
    """The CA written into kubeconfigs. None: the credential's."""
    tls_server_name: str | None = None
    """Written into kubeconfigs as `tls-server-name` when set."""
    labels: Mapping[str, str] = field(default_factory=dict)
    kind: ClusterKind = "shared"

    @property
    def dedicated(self) -> bool:
        return self.kind == "dedicated"


def is_cluster_name(text: str) -> bool:
    return bool(_NAME.match(text))


def parse_labels(where: str, value: Any) -> dict[str, str]:
    """A `{label: value}` mapping as Kubernetes spells labels; ClusterConfigError if not."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ClusterConfigError(f"{where} must be a mapping of label to value")
    labels: dict[str, str] = {}
    for key, text in value.items():
        if not isinstance(key, str) or not _LABEL_KEY.match(key):
            raise ClusterConfigError(f"{where}: {key!r} is not a label name")
        if isinstance(text, bool) or not isinstance(text, (str, int)) or not _LABEL_VALUE.match(str(text)):
            raise ClusterConfigError(f"{where}.{key}: {text!r} is not a label value")
        labels[key] = str(text)
    return labels


def _text(entry: Mapping[str, Any], key: str, where: str) -> str | None:
    value = entry.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ClusterConfigError(f"{where}: {key} must be a non-empty string")
    return value


def _server(where: str, text: str | None) -> str | None:
    if text is None:
        return None
    parts = urlsplit(text)
    if parts.scheme != "https" or not parts.hostname or parts.query or parts.fragment:
        raise ClusterConfigError(f"{where}: public_server must be an https:// URL")
    return text.rstrip("/")


def parse_clusters(loaded: Any) -> tuple[ClusterSettings, ...]:
    """The list as YAML loaded it. Names are unique DNS labels, kinds are
    `shared` or `dedicated`; None (nothing given) is an empty tuple."""
    if loaded is None:
        return ()
    if not isinstance(loaded, list) or not loaded:
        raise ClusterConfigError("must be a non-empty YAML list of clusters")
    clusters: list[ClusterSettings] = []
    for index, entry in enumerate(loaded):
        if not isinstance(entry, dict):
            raise ClusterConfigError(f"entry {index + 1} must be a mapping")
        name = entry.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise ClusterConfigError(f"entry {index + 1}: name must be a lowercase DNS label (a-z, 0-9, '-')")
        where = f"cluster {name!r}"
        unknown = sorted(set(map(str, entry)) - _KNOWN)
        if unknown:
            raise ClusterConfigError(f"{where}: unknown keys {', '.join(unknown)}")
        if any(existing.name == name for existing in clusters):
            raise ClusterConfigError(f"{where} is listed twice")
        kind = entry.get("kind", "shared")
        if kind not in _KINDS:
            raise ClusterConfigError(f"{where}: kind must be shared or dedicated")
        kubeconfig, ca = _text(entry, "kubeconfig", where), _text(entry, "public_ca_file", where)
        clusters.append(ClusterSettings(
            name=name, kubeconfig=Path(kubeconfig).expanduser() if kubeconfig else None,
            public_server=_server(where, _text(entry, "public_server", where)),
            public_ca_file=Path(ca).expanduser() if ca else None,
            tls_server_name=_text(entry, "tls_server_name", where),
            labels=parse_labels(f"{where}: labels", entry.get("labels")), kind=kind))
    return tuple(clusters)
