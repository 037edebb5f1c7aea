"""What a tier lets a tenant keep and run beyond its quota's counts.

The quota counts objects, but etcd is bounded in bytes: each object may be
up to ~1.5 MiB, so counts alone let one tenant store a good part of etcd's
2 GiB default quota (and then no write succeeds anywhere). A tier therefore
also caps, per object, the parts of it that can be large (`ObjectBytes`);
the admission policies in deploy/kubernetes/admission.yaml enforce them. A
tier also says how strict Pod Security is (`restricted` unless it says
`baseline`) and which shared public images its pods may run from the
node's image cache without pulling them with their own credentials.

Admission reads these from the tenant's Namespace, which onboarding (and
`reconcile`) annotates and labels from the tier and tenants cannot write:
`namespace_annotations(rules)` and `pod_security_labels(rules)` say how.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Callable, Mapping

KIB = 1024

# The namespace annotations admission reads the tier's caps from. The
# gateway may change these (and only these, with the suspension label and
# the Pod Security level) on a namespace it made: tenant-gateway-confined.
ANNOTATION_PREFIX = "tier.tenant-gateway.io/"
CONFIG_MAP_BYTES = ANNOTATION_PREFIX + "configmap-bytes"
SECRET_BYTES = ANNOTATION_PREFIX + "secret-bytes"
POD_TEMPLATE_BYTES = ANNOTATION_PREFIX + "pod-template-bytes"
METADATA_BYTES = ANNOTATION_PREFIX + "metadata-bytes"
SHARED_IMAGES = ANNOTATION_PREFIX + "shared-images"

POD_SECURITY_ENFORCE = "pod-security.kubernetes.io/enforce"
POD_SECURITY_LEVELS = ("restricted", "baseline")
# kubectl apply keeps a copy of the object as applied in this annotation;
# it is bounded apart from the rest of the metadata (see ObjectBytes).
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


@dataclass(frozen=True)
class ObjectBytes:
    """Per-object byte caps, as admission measures them (admission.yaml):

    - `config_map`: a ConfigMap's keys and values (data and binaryData);
    - `secret`: a Secret's keys and values (data and stringData);
    - `pod_template`: a pod's, or a workload's pod template's, free text
      (images, commands, arguments, probes' and hooks' exec commands,
      environment, envFrom, volume mounts, working directories, volumes'
      item paths, host aliases, tolerations, each item counted with its JSON
      punctuation) and its template's labels and annotations;
    - `metadata`: the labels and annotations of any object in the
      namespace, but kubectl's last-applied copy, which may be at most the
      object's own cap plus this one (it copies the object as applied).

    All in UTF-8 bytes, objects being deleted included. Other fields are
    not measured (README, Tiers).

    The defaults leave room for ordinary configuration, certificates and
    Helm releases, and keep the basic tier's worst case near 46 MiB
    (README, Tiers)."""

    config_map: int = 64 * KIB
    secret: int = 64 * KIB
    pod_template: int = 16 * KIB
    metadata: int = 8 * KIB


@dataclass(frozen=True)
class WorkloadRules:
    object_bytes: ObjectBytes = field(default_factory=ObjectBytes)
    pod_security: str = "restricted"
    shared_images: tuple[str, ...] = ()
    """Images (or repositories, or prefixes ending in `/`) this tier's pods
    may take from the node's cache: public ones every tenant may pull. Any
    other image must be pulled with `imagePullPolicy: Always`, so the
    registry checks the tenant's own right to it."""


# A Docker reference, loosely: what a container's `image` may hold. No
# commas (the list is kept comma-separated) or whitespace.
_IMAGE_ENTRY = re.compile(r"^[a-z0-9][a-z0-9._:/@+-]*$", re.IGNORECASE)
# A registry (or a Docker Hub namespace) and at least one path segment
# after it. Admission matches an entry as a prefix followed by `:` or `@`;
# without a `/` in it, `registry` would also match `registry:5000/victim/app`
# (admission.yaml, tenant-gateway-confined, holds the gateway to the same).
_QUALIFIED_ENTRY = re.compile(r"/[^/]")

# The API server refuses any object over ~1.5 MiB (etcd's request limit):
# a larger cap would be no cap at all, and tenant-gateway-confined refuses it.
MAX_CAP = 1572864


def image_entry_problem(entry: str) -> str | None:
    """Why `entry` cannot be on an allow-list, or None. An entry must name
    a registry and one path segment at least: `busybox` would also match
    `busybox:5000/victim/app` (a registry called busybox), and a prefix
    `docker.io/` would let any tenant run any other's private Docker Hub
    image from the cache."""
    if not _IMAGE_ENTRY.match(entry):
        return f"{entry!r} is not an image reference"
    if entry.endswith("/") and not _QUALIFIED_ENTRY.search(entry):
        return f"{entry!r} is a prefix shorter than a registry and a repository path (e.g. registry.example/team/)"
    if not _QUALIFIED_ENTRY.search(entry):
        return (f"{entry!r} names no registry: write it in full (e.g. docker.io/library/{entry}), "
                "or it would also match images of a registry of that name")
    return None


def with_images(rules: WorkloadRules, images: tuple[str, ...]) -> WorkloadRules:
    """`rules` with `images` added to its allow-list (the cluster-wide ones)."""
    merged = tuple(dict.fromkeys([*rules.shared_images, *images]))
    return WorkloadRules(rules.object_bytes, rules.pod_security, merged)


def namespace_annotations(rules: WorkloadRules) -> dict[str, str]:
    """The namespace annotations admission reads the tier's caps and image
    allow-list from."""
    caps = rules.object_bytes
    return {
        CONFIG_MAP_BYTES: str(caps.config_map),
        SECRET_BYTES: str(caps.secret),
        POD_TEMPLATE_BYTES: str(caps.pod_template),
        METADATA_BYTES: str(caps.metadata),
        SHARED_IMAGES: ",".join(rules.shared_images),
    }


def pod_security_labels(rules: WorkloadRules) -> dict[str, str]:
    """Pod Security admission on the tenant's namespace: enforced at the
    tier's level, and warned and audited at `restricted` either way."""
    return {
        POD_SECURITY_ENFORCE: rules.pod_security,
        "pod-security.kubernetes.io/warn": "restricted",
        "pod-security.kubernetes.io/audit": "restricted",
    }


# The quota keys that count objects holding a pod template (pods, the
# workloads tenants make, and the ControllerRevisions StatefulSets and
# DaemonSets keep, each a copy of a template), ConfigMaps and Secrets.
_TEMPLATE_COUNTS = ("pods", "replicationcontrollers", "count/deployments.apps", "count/replicasets.apps",
                    "count/statefulsets.apps", "count/daemonsets.apps", "count/controllerrevisions.apps",
                    "count/jobs.batch", "count/cronjobs.batch")


@dataclass(frozen=True)
class BudgetLine:
    """One quota key's share of the worst case: `count` objects of at most
    `per_object` bytes each (content, metadata, and kubectl's copy of both)."""

    key: str
    count: int
    per_object: int

    @property
    def total(self) -> int:
        return self.count * self.per_object


def etcd_budget(hard: Mapping[str, str], caps: ObjectBytes) -> list[BudgetLine]:
    """The most a tenant of this quota can keep in etcd, by quota key: each
    counted object at its caps (content + metadata, and kubectl's
    last-applied copy of both). What admission does not measure (an
    object's fixed fields, managedFields) comes on top; see README, Tiers."""
    lines = []
    for key, value in hard.items():
        if not (key.startswith("count/") or key in ("pods", "services", "secrets", "configmaps",
                                                     "persistentvolumeclaims", "replicationcontrollers")):
            continue
        content = (caps.config_map if key.removeprefix("count/") == "configmaps"
                   else caps.secret if key.removeprefix("count/") == "secrets"
                   else caps.pod_template if key in _TEMPLATE_COUNTS or f"count/{key}" in _TEMPLATE_COUNTS
                   else 0)
        lines.append(BudgetLine(key, int(value), 2 * (content + caps.metadata)))
    return lines


def parse_rules(where: str, body: Mapping[str, Any], quantity: Callable[[str, str], Decimal]) -> WorkloadRules:
    """A tier's `objectBytes`, `podSecurity` and `sharedImages` (each
    optional). `quantity` turns a Kubernetes quantity into bytes."""
    defaults = ObjectBytes()
    given = body.get("objectBytes") or {}
    if not isinstance(given, dict):
        raise ValueError(f"{where}.objectBytes must be a mapping")
    names = {"configMap": "config_map", "secret": "secret", "podTemplate": "pod_template", "metadata": "metadata"}
    unknown = set(given) - set(names)
    if unknown:
        raise ValueError(f"{where}.objectBytes: unknown keys {sorted(unknown)}; known: {sorted(names)}")
    caps = {}
    for key, attribute in names.items():
        if key in given:
            amount = int(quantity(f"{where}.objectBytes.{key}", str(given[key])))
            if amount < KIB:
                raise ValueError(f"{where}.objectBytes.{key}: {given[key]} is under 1Ki: "
                                 "Kubernetes' own objects (kube-root-ca.crt, events) would be refused")
            if amount > MAX_CAP:
                raise ValueError(f"{where}.objectBytes.{key}: {given[key]} is over 1.5Mi ({MAX_CAP}), "
                                 "the API server's own limit for a whole object")
            caps[attribute] = amount
        else:
            caps[attribute] = getattr(defaults, attribute)
    level = str(body.get("podSecurity", "restricted"))
    if level not in POD_SECURITY_LEVELS:
        raise ValueError(f"{where}.podSecurity must be one of {', '.join(POD_SECURITY_LEVELS)}, not {level!r}")
    images = body.get("sharedImages") or []
    if not isinstance(images, list):
        raise ValueError(f"{where}.sharedImages must be a list of images")
    for image in images:
        problem = image_entry_problem(str(image))
        if problem:
            raise ValueError(f"{where}.sharedImages: {problem}")
    return WorkloadRules(ObjectBytes(**caps), level, tuple(str(image) for image in images))
