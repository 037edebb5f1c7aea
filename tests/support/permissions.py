"""The shipped RBAC and admission policies as a real API server (1.34)
answers them, for the permission checks' tests (tests/unit/test_permissions.py
and the start-up self-check's, tests/unit/test_self_check.py)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from provisioning.permissions import EVERYONE_READS

CLUSTERROLES = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "clusterroles.yaml"
ADMISSION = CLUSTERROLES.with_name("admission.yaml")


def shipped_review() -> dict[str, Any]:
    """A SelfSubjectRulesReview's status for the shipped credential, as the
    local cluster (Kubernetes 1.34) answers it: the ClusterRole, and what
    the bootstrap roles grant every authenticated user."""
    role = next(d for d in yaml.safe_load_all(CLUSTERROLES.read_text()) if d["metadata"]["name"] == "tenant-gateway")
    everyone = [{"apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                 "verbs": ["create"]},
                {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]}]
    return {"incomplete": False, "resourceRules": everyone + role["rules"],
            "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": sorted(EVERYONE_READS)}]}


def as_installed(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A shipped policy as the API server (1.34) answers it: its defaults filled in."""
    spec = copy.deepcopy(spec)
    match = spec["matchConstraints"]
    match.update({"matchPolicy": "Equivalent", "namespaceSelector": {}, "objectSelector": {}})
    for rule in match["resourceRules"]:
        rule.setdefault("scope", "*")
    return {"metadata": {"name": name}, "spec": spec}
