"""Which cluster a new workspace goes on (pure: clusters, tier, request and
counts in, a cluster or a refusal out).

- A tier allows clusters of its kind (`dedicated: true`: dedicated
  clusters; otherwise shared ones), narrowed by its `clusters` names and
  its `cluster_selector` labels.
- The caller may name a `cluster` (it must be one the tier allows: 400 if
  no such cluster is configured, 403 if the tier does not allow it) or ask
  for `labels` (narrowing what the tier allows; 400 if nothing is left).
- Otherwise a shared tier takes the allowed cluster with the fewest
  workspaces (ties: by name, so replicas agree), and a dedicated tier the
  first free dedicated cluster by name, or 409 `no_free_cluster`.

The database has the last word on a dedicated cluster (a unique partial
index, migration 0015): two onboardings racing for the last free one
cannot both take it, whatever they read here.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from provisioning.clusters import ClusterSettings
from provisioning.errors import BadRequest, Conflict, Forbidden
from provisioning.tiers import Tier


def eligible_clusters(tier: Tier, clusters: Iterable[ClusterSettings]) -> list[ClusterSettings]:
    """The clusters `tier`'s workspaces may go on, by name."""
    return sorted((cluster for cluster in clusters
                   if cluster.dedicated == tier.dedicated
                   and (not tier.clusters or cluster.name in tier.clusters)
                   and _carries(cluster, tier.cluster_selector)), key=lambda cluster: cluster.name)


def _carries(cluster: ClusterSettings, labels: Mapping[str, str]) -> bool:
    return all(cluster.labels.get(key) == value for key, value in labels.items())


def place(tier: Tier, clusters: Iterable[ClusterSettings], *, workspaces: Mapping[str, int],
          occupied: Iterable[str] = (), requested: str | None = None,
          labels: Mapping[str, str] | None = None) -> ClusterSettings:
    """The cluster for a new workspace of `tier`. `workspaces`: how many
    workspaces each cluster holds now; `occupied`: the dedicated clusters a
    workspace holds."""
    configured = {cluster.name: cluster for cluster in clusters}
    allowed = eligible_clusters(tier, configured.values())
    if requested is not None:
        chosen = configured.get(requested)
        if chosen is None:
            raise BadRequest(f"unknown cluster {requested!r}; configured: {', '.join(sorted(configured))}",
                             code="unknown_cluster")
        if chosen not in allowed:
            raise Forbidden(f"tier {tier.name} may not use cluster {requested!r}; it may use: "
                            f"{', '.join(c.name for c in allowed) or 'none'}", code="cluster_not_allowed")
        allowed = [chosen]
    if labels:
        allowed = [cluster for cluster in allowed if _carries(cluster, labels)]
        if not allowed:
            wanted = ", ".join(f"{key}={value}" for key, value in sorted(labels.items()))
            raise BadRequest(f"no cluster tier {tier.name} may use has the labels {wanted}",
                             code="no_matching_cluster")
    if tier.dedicated:
        taken = set(occupied)
        free = [cluster for cluster in allowed if cluster.name not in taken]
        if not free:
            raise Conflict(f"no free dedicated cluster for tier {tier.name}: "
                           f"{', '.join(c.name for c in allowed) or 'none'} "
                           f"{'is' if len(allowed) == 1 else 'are'} each held by a workspace; "
                           "ask an administrator for another", code="no_free_cluster")
        return free[0]
    if not allowed:
        raise Conflict(f"tier {tier.name} allows no configured cluster", code="no_free_cluster")
    return min(allowed, key=lambda cluster: (workspaces.get(cluster.name, 0), cluster.name))
