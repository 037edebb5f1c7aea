"""The tenant wall: which proxied paths may reach the API server at all.

Defence in depth before Kubernetes RBAC. The path is taken raw (as sent, still
percent-encoded), checked for every known trick and split into segments
once; the decision is then made on those segments and the very same string
is sent upstream, so what was checked is what is forwarded.

Allowed: the tenant's own namespace (namespaced resources, core or grouped,
watch forms included), `GET` of its own Namespace object, discovery
(`/api`, `/apis`, group and version documents), `/version`, `/openapi/...`,
and the self-review endpoints. `GET /api/v1/namespaces` is answered by the
gateway with the tenant's namespace only. Everything else is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qs

Action = Literal["forward", "own_namespace_list", "deny"]

_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"})
_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_READS = frozenset({"GET", "HEAD"})
_SEGMENT = re.compile(r"^[A-Za-z0-9._~:@!$&'()*+,=-]+$")
_BAD_ESCAPES = re.compile(r"%(2f|5c|2e|25|00)", re.IGNORECASE)
_EXEC_SUBRESOURCES = frozenset({"exec", "attach", "portforward"})
_SELF_REVIEWS = {
    ("authentication.k8s.io", "selfsubjectreviews"),
    ("authorization.k8s.io", "selfsubjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectrulesreviews"),
}
_REVIEW_VERSIONS = frozenset({"v1", "v1beta1", "v1alpha1"})


@dataclass(frozen=True)
class Decision:
    action: Action
    upstream_path: str = ""
    long_running: bool = False
    is_write: bool = False
    is_exec: bool = False
    reason: str = ""


def _deny(reason: str) -> Decision:
    return Decision("deny", reason=reason)


def _segments(raw_path: str) -> list[str] | None:
    """Split a raw path into safe segments, or None if it holds any trick."""
    if not raw_path or raw_path == "/":
        return []
    if not raw_path.startswith("/") or "://" in raw_path or not raw_path.isascii():
        return None
    if _BAD_ESCAPES.search(raw_path) or "\\" in raw_path or ";" in raw_path:
        return None
    parts = raw_path[1:].split("/")
    if parts and parts[-1] == "":
        parts = parts[:-1]  # one trailing slash is harmless (`/logs/`, `/apis/`)
    for part in parts:
        if part in ("", ".", "..") or not _SEGMENT.match(part):
            return None
    return parts


def _flag(query: dict[str, list[str]], name: str) -> bool:
    return any(v.lower() in ("true", "1") for v in query.get(name, []))


def _namespaced(method: str, rest: list[str], query: dict[str, list[str]], watch_path: bool) -> tuple[bool, bool]:
    """(long_running, is_exec) for `<resource>[/<name>[/<subresource>]]` in a namespace."""
    subresource = rest[2] if len(rest) >= 3 else ""
    is_exec = rest[0] == "pods" and subresource in _EXEC_SUBRESOURCES
    follow = rest[0] == "pods" and subresource == "log" and _flag(query, "follow")
    return watch_path or _flag(query, "watch") or follow or is_exec, is_exec


def classify(method: str, raw_path: str, query_string: str, namespace: str) -> Decision:
    method = method.upper()
    if method not in _METHODS:
        return _deny(f"method {method} is not proxied")
    parts = _segments(raw_path)
    if parts is None:
        return _deny("the path is not in canonical form")
    path = "/" + "/".join(parts)
    query = parse_qs(query_string, keep_blank_values=True)
    is_write = method in _WRITES

    def forward(long_running: bool = False, is_exec: bool = False) -> Decision:
        return Decision("forward", path, long_running, is_write, is_exec)

    # Discovery, version, OpenAPI: read-only and cluster-wide by nature.
    if method in _READS and (
        parts in ([], ["version"], ["api"], ["apis"], ["api", "v1"])
        or (parts[:1] == ["apis"] and len(parts) in (2, 3))
        or (parts[:1] == ["openapi"] and len(parts) >= 2 and parts[1] in ("v2", "v3"))
    ):
        if parts == []:
            return _deny("the root path is not proxied")
        if parts[:1] == ["apis"] and len(parts) == 3 and parts[2] == "namespaces":
            return _deny("cluster-wide listing is outside the tenant")
        return forward()

    if method == "POST" and len(parts) == 4 and parts[0] == "apis" and (parts[1], parts[3]) in _SELF_REVIEWS \
            and parts[2] in _REVIEW_VERSIONS:
        return forward()

    # Core group: /api/v1/..., grouped: /apis/<group>/<version>/...
    if parts[:2] == ["api", "v1"]:
        tail = parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        tail = parts[3:]
    else:
        return _deny("this path is outside the tenant")

    watch_path = tail[:1] == ["watch"]
    if watch_path:
        tail = tail[1:]
    if parts[:2] == ["api", "v1"] and tail == ["namespaces"]:
        if method == "GET" and not watch_path and not _flag(query, "watch"):
            return Decision("own_namespace_list", path)
        return _deny("tenants may only read their own namespace")
    if tail[:1] != ["namespaces"] or len(tail) < 2:
        return _deny("cluster-scoped resources are outside the tenant")
    if tail[1] != namespace:
        return _deny("that namespace belongs to someone else")
    rest = tail[2:]
    if not rest:
        # The Namespace object itself: core group only, and read-only.
        if parts[:2] == ["api", "v1"] and method in _READS and not watch_path:
            return forward()
        return _deny("tenants may not change their namespace")
    long_running, is_exec = _namespaced(method, rest, query, watch_path)
    return forward(long_running, is_exec)
