"""Tiers: what ResourceQuota and LimitRange a tenant gets.

A tier file maps a name to the quota's `hard` map and, optionally, LimitRange
container defaults. Quantities are kept as the strings Kubernetes accepts; the
API server validates them, and `parse_tiers` catches the obvious mistakes at
start-up so a typo never surfaces as a failed onboarding.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

import yaml

_QUANTITY = re.compile(r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[mkMGTPE]i?|Ki|u|n)?$")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")

# Pods that state no resources get these, so they still fit a quota that
# demands requests/limits for cpu and memory.
_DEFAULT_LIMITS = {"cpu": "500m", "memory": "512Mi"}
_DEFAULT_REQUESTS = {"cpu": "100m", "memory": "128Mi"}


@dataclass(frozen=True)
class Tier:
    name: str
    hard: Mapping[str, str]
    default_limits: Mapping[str, str] = field(default_factory=lambda: dict(_DEFAULT_LIMITS))
    default_requests: Mapping[str, str] = field(default_factory=lambda: dict(_DEFAULT_REQUESTS))

    def summary(self) -> dict[str, str]:
        """The contract's `quota: {cpu, memory}` view of `hard`."""
        return {
            "cpu": self.hard.get("requests.cpu") or self.hard.get("cpu") or self.hard.get("limits.cpu", ""),
            "memory": self.hard.get("limits.memory") or self.hard.get("memory") or self.hard.get("requests.memory", ""),
        }


DEFAULT_TIERS: Mapping[str, Tier] = {
    "basic": Tier("basic", {"requests.cpu": "4", "limits.memory": "8Gi"}),
}


def _quantities(where: str, value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not value:
        raise ValueError(f"{where} must be a non-empty mapping of resource to quantity")
    out: dict[str, str] = {}
    for key, quantity in value.items():
        text = str(quantity)
        if not _QUANTITY.match(text):
            raise ValueError(f"{where}.{key}: {text!r} is not a Kubernetes quantity")
        out[str(key)] = text
    return out


def parse_tiers(text: str) -> dict[str, Tier]:
    """Parse a tiers file. Each entry is either the `hard` map itself, or a
    mapping with `hard` and optional `defaultLimits` / `defaultRequests`."""
    loaded = yaml.safe_load(text)
    if not isinstance(loaded, dict) or not loaded:
        raise ValueError("must be a non-empty mapping of tier name to quota")
    tiers: dict[str, Tier] = {}
    for name, body in loaded.items():
        name = str(name)
        if not _NAME.match(name):
            raise ValueError(f"tier name {name!r} must be a lowercase DNS label")
        if isinstance(body, dict) and "hard" in body:
            unknown = set(body) - {"hard", "defaultLimits", "defaultRequests"}
            if unknown:
                raise ValueError(f"tier {name}: unknown keys {sorted(unknown)}")
            tiers[name] = Tier(
                name,
                _quantities(f"{name}.hard", body["hard"]),
                _quantities(f"{name}.defaultLimits", body.get("defaultLimits", _DEFAULT_LIMITS)),
                _quantities(f"{name}.defaultRequests", body.get("defaultRequests", _DEFAULT_REQUESTS)),
            )
        else:
            tiers[name] = Tier(name, _quantities(f"{name}", body))
    return tiers
