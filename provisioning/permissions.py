"""The gateway's self-check: does its own credential hold exactly what it needs?

Each probe is a SelfSubjectAccessReview, which asks the real authorizer
(RBAC, webhooks, whatever the cluster runs), so the answer is the cluster's,
not our reading of Role objects. `REQUIRED` mirrors deploy/kubernetes's
ClusterRole `tenant-gateway`; `FORBIDDEN` is what a compromised gateway must
not be able to do. The comparison is pure; only `probe_permissions` does I/O.

RBAC cannot keep the gateway's cluster-wide grants out of kube-system; the
admission policy `tenant-gateway-confined` does. A dry-run write there shows
whether it is in force: admission runs for dry runs, nothing is stored.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from provisioning.kube.client import KubeClient
from provisioning.kube.errors import KubeAPIError, KubeForbidden


@dataclass(frozen=True)
class Permission:
    verb: str
    resource: str
    group: str = ""
    subresource: str = ""
    name: str = ""
    namespace: str = ""

    def __str__(self) -> str:
        what = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        if self.group:
            what = f"{what}.{self.group}"
        where = f" named {self.name}" if self.name else ""
        scope = f" in namespace {self.namespace}" if self.namespace else " cluster-wide"
        return f"{self.verb} {what}{where}{scope}"

    def review(self) -> dict[str, object]:
        attributes = {"verb": self.verb, "resource": self.resource, "group": self.group}
        for key, value in (("subresource", self.subresource), ("name", self.name), ("namespace", self.namespace)):
            if value:
                attributes[key] = value
        return {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }


def required_permissions(tenant_cluster_role: str) -> tuple[Permission, ...]:
    rbac = "rbac.authorization.k8s.io"
    needed = [Permission(v, r) for r in ("namespaces", "resourcequotas", "limitranges") for v in ("create", "get", "list")]
    needed += [Permission("patch", "namespaces")]  # the suspension label
    needed += [Permission(v, "serviceaccounts") for v in ("create", "get", "list", "delete")]
    needed += [Permission("create", "serviceaccounts", subresource="token")]
    needed += [Permission(v, "networkpolicies", "networking.k8s.io") for v in ("create", "get", "list")]
    needed += [Permission(v, "rolebindings", rbac) for v in ("create", "get", "list", "delete")]
    needed += [Permission("bind", "clusterroles", rbac, name=tenant_cluster_role)]
    return tuple(needed)


FORBIDDEN: tuple[Permission, ...] = (
    Permission("*", "*", "*"),
    Permission("get", "secrets"),
    Permission("list", "secrets"),
    Permission("get", "secrets", namespace="kube-system"),
    Permission("get", "pods"),
    Permission("list", "pods"),
    Permission("create", "pods", subresource="exec"),
    Permission("get", "deployments", "apps"),
    Permission("list", "deployments", "apps"),
    Permission("impersonate", "users"),
    Permission("impersonate", "groups"),
    Permission("impersonate", "serviceaccounts"),
    Permission("escalate", "clusterroles", "rbac.authorization.k8s.io"),
    Permission("bind", "clusterroles", "rbac.authorization.k8s.io", name="cluster-admin"),
    Permission("create", "clusterrolebindings", "rbac.authorization.k8s.io"),
    Permission("delete", "namespaces"),
)


# Where a confined gateway's write is refused by admission, and what it is.
OUTSIDE_TENANTS_PROBE = ("/api/v1/namespaces/kube-system/serviceaccounts",
                         {"metadata": {"name": "tenant-gateway-confinement-probe"}})
UNCONFINED = ("writes outside tenant namespaces are admitted: ValidatingAdmissionPolicy "
              "tenant-gateway-confined (deploy/kubernetes/admission.yaml) is not in force for this credential")


@dataclass(frozen=True)
class PermissionReport:
    missing: tuple[Permission, ...]
    excessive: tuple[Permission | str, ...]

    @property
    def ok(self) -> bool:
        return not self.missing and not self.excessive

    def lines(self) -> list[str]:
        out = [f"missing: {p}" for p in self.missing] + [f"excessive: {p}" for p in self.excessive]
        return out or ["ok: the gateway's credential holds every permission it needs and nothing forbidden"]


def evaluate(required: tuple[Permission, ...], allowed: dict[Permission, bool], *, confined: bool) -> PermissionReport:
    return PermissionReport(
        missing=tuple(p for p in required if not allowed[p]),
        excessive=tuple(p for p in FORBIDDEN if allowed[p]) + (() if confined else (UNCONFINED,)),
    )


async def probe_permissions(kube: KubeClient, tenant_cluster_role: str) -> PermissionReport:
    required = required_permissions(tenant_cluster_role)
    probes = required + FORBIDDEN

    async def allowed(permission: Permission) -> bool:
        answer = await kube.create("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", permission.review())
        return bool((answer.get("status") or {}).get("allowed"))

    async def confined() -> bool:
        path, body = OUTSIDE_TENANTS_PROBE
        try:
            await kube.request("POST", path, body, query={"dryRun": "All"})
        except KubeForbidden:
            return True
        except KubeAPIError:  # e.g. AlreadyExists: the write got past admission
            pass
        return False

    *results, is_confined = await asyncio.gather(*(allowed(p) for p in probes), confined())
    return evaluate(required, dict(zip(probes, results)), confined=is_confined)
