"""Several local clusters as one gateway's fleet: the first a whole cluster
with its node (devstack.cluster), each further one a control plane of its
own, and the GATEWAY_CLUSTERS file that names them all
(`../shared/api-contract.md`, "Several clusters").

`tenant-gateway dev --clusters N` and the two-cluster tests both write the
file here, so the shape the gateway reads is decided in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Mapping, Sequence

import yaml

from devstack.cluster import LocalCluster, start_further_cluster

Kind = Literal["shared", "dedicated"]

FIRST_CLUSTER = "default"
"""The dev fleet's first cluster: the name today's single-cluster settings
mean, so a dev database's existing workspaces stay where they are."""


def further_name(index: int) -> str:
    """The dev fleet's name for its `index`th cluster (2, 3, ...). Pure."""
    return f"cluster-{index}"


@dataclass(frozen=True)
class Member:
    """One entry of GATEWAY_CLUSTERS: a cluster as the gateway knows it."""

    name: str
    kubeconfig: Path
    """The gateway's restricted credential for it."""
    public_server: str
    public_ca_file: Path
    kind: Kind = "shared"
    labels: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, name: str, cluster: LocalCluster, kind: Kind = "shared",
           labels: Mapping[str, str] | None = None) -> "Member":
        """A local cluster as a member: kubeconfigs reach it directly, as the gateway does."""
        return cls(name, cluster.gateway_kubeconfig, cluster.server, cluster.ca_file, kind, dict(labels or {}))


def clusters_yaml(members: Sequence[Member]) -> str:
    """The GATEWAY_CLUSTERS file's text. Pure."""
    return yaml.safe_dump([{
        "name": member.name, "kubeconfig": str(member.kubeconfig), "public_server": member.public_server,
        "public_ca_file": str(member.public_ca_file), "labels": dict(member.labels), "kind": member.kind,
    } for member in members], sort_keys=False)


def write_clusters_file(path: Path, members: Sequence[Member]) -> Path:
    path.write_text(clusters_yaml(members))
    return path


def start_further_clusters(base_dir: Path, first: LocalCluster, names: Sequence[str]) -> list[LocalCluster]:
    """Start a control plane per name beside `first`, under base_dir/<name>;
    all or none (the ones started are stopped if one fails)."""
    started: list[LocalCluster] = []
    try:
        for name in names:
            started.append(start_further_cluster(base_dir / name, name, first))
    except BaseException:
        for cluster in reversed(started):
            cluster.stop()
        raise
    return started
