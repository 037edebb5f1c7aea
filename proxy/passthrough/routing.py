"""The tenant wall: which proxied paths may reach the API server at all.

Defence in depth before Kubernetes RBAC, so that a mistake in a tenant's
role (or in the shipped ClusterRole) still cannot reach another tenant or
the cluster itself.

The path is taken raw, as it came off the wire and still percent-encoded.
Every trick a path can play on the distance between "what was checked" and
"what the API server routes" is refused outright rather than repaired: dot
segments, empty segments, encoded slashes, backslashes or dots, double
encoding, path parameters, control and non-ASCII characters, absolute-form
targets. Escapes are decoded once, only to inspect them and to compare
segments; the path sent upstream keeps the client's encoding (hex digits
upper-cased), so the string that was judged is the string that is
forwarded, and the API server's single decode yields exactly the segments
that were compared. The query string is treated the same way: judged as
sent (decoded once, as the API server decodes it) and forwarded as sent.

Allowed: the tenant's own namespace (namespaced resources, core or grouped,
watch forms included), reading its own Namespace object, discovery (`/api`,
`/api/v1`, `/apis`, group and version documents), `/version`, `/openapi/v2`,
`/openapi/v3/...`, and the self-review endpoints. `GET /api/v1/namespaces` is
answered by the gateway with the tenant's namespace only, and its watch is
the watch of the tenant's namespace alone. Everything else is refused.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qsl, unquote

Action = Literal["forward", "own_namespace_list", "deny"]

_READS = frozenset({"GET", "HEAD"})
_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_METHODS = _READS | _WRITES

_SAFE_CHARS = "A-Za-z0-9_~:@!$&'()*+,=-"
_RAW_SEGMENT = re.compile(rf"(?:[.{_SAFE_CHARS}]|%[0-9A-Fa-f]{{2}})+")
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_SAFE_DECODED = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_~:@!$&'()*+,=-"
)

_EXEC_SUBRESOURCES = frozenset({"exec", "attach", "portforward"})
_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
_SELF_REVIEWS = frozenset({
    ("authentication.k8s.io", "selfsubjectreviews"),
    ("authorization.k8s.io", "selfsubjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectrulesreviews"),
})
_REVIEW_VERSIONS = frozenset({"v1", "v1beta1", "v1alpha1"})


@dataclass(frozen=True)
class Decision:
    """What to do with one proxied request.

    `upstream_path` and `upstream_query` are the client's own bytes (hex
    digits upper-cased in the path), never decoded and re-encoded.
    """

    action: Action
    upstream_path: str = ""
    upstream_query: str = ""
    long_running: bool = False
    is_write: bool = False
    is_exec: bool = False
    reason: str = ""

    @property
    def target(self) -> str:
        """The path and query sent upstream: what was judged, byte for byte."""
        return f"{self.upstream_path}?{self.upstream_query}" if self.upstream_query else self.upstream_path


@dataclass(frozen=True)
class _Path:
    raw: list[str]
    """Segments as sent (escapes kept, hex upper-cased): what goes upstream."""
    decoded: list[str]
    """The same segments decoded once: what the API server will route on."""


def _decode_segment(raw: str) -> str | None:
    """Decode a segment's escapes once; None if any escape hides a character
    that could change routing after the API server decodes it (`/`, `\\`,
    `.`, `%`, `;`, controls, non-ASCII, ...)."""
    decoded: list[str] = []
    position = 0
    for match in _ESCAPE.finditer(raw):
        decoded.append(raw[position:match.start()])
        char = chr(int(match.group(1), 16))
        if char not in _SAFE_DECODED:
            return None
        decoded.append(char)
        position = match.end()
    decoded.append(raw[position:])
    return "".join(decoded)


def _parse_path(raw_path: str) -> _Path | None:
    """Split a raw path into checked segments, or None if it holds any trick."""
    if raw_path in ("", "/"):
        return _Path([], [])
    if not raw_path.isascii() or not raw_path.startswith("/"):
        return None
    parts = raw_path[1:].split("/")
    if parts[-1] == "":
        parts.pop()  # one trailing slash (`/apis/`) names the same resource
    raw: list[str] = []
    decoded: list[str] = []
    for part in parts:
        if part in (".", "..") or not _RAW_SEGMENT.fullmatch(part):
            return None
        plain = _decode_segment(part)
        if plain is None:
            return None
        raw.append(_ESCAPE.sub(lambda m: "%" + m.group(1).upper(), part))
        decoded.append(plain)
    return _Path(raw, decoded)


def _query_flag(query: list[tuple[str, str]], name: str) -> bool:
    """Read a boolean exactly as the API server will (metav1's
    Convert_Slice_string_To_bool): the key's first value, false only for "0"
    or "false" in any case, so `?watch`, `?watch=` and `?watch=yes` are all
    watches. Reading fewer values as true would relay a real watch as a
    short request: untracked by suspension, and cut by the short timeout."""
    for key, value in query:
        if key == name:
            return not (value == "0" or value.lower() == "false")
    return False


def _is_discovery(parts: list[str]) -> bool:
    if parts in (["version"], ["api"], ["api", "v1"], ["apis"], ["openapi", "v2"], ["openapi", "v3"]):
        return True
    return (parts[0] == "apis" and len(parts) in (2, 3)) or parts[:2] == ["openapi", "v3"]


def _is_self_review(parts: list[str]) -> bool:
    return (len(parts) == 4 and parts[0] == "apis" and parts[2] in _REVIEW_VERSIONS
            and (parts[1], parts[3]) in _SELF_REVIEWS)


_NAMESPACE_WATCH_PARAMETERS = frozenset({"resourceVersion", "resourceVersionMatch", "timeoutSeconds",
                                         "allowWatchBookmarks", "sendInitialEvents", "labelSelector"})


def _own_namespace_watch(raw_query: str, namespace: str) -> Decision:
    """A watch of every namespace (kopf, k9s and dashboards watch them),
    served as the watch of the tenant's own: the API server's watch of one
    Namespace by name (`/api/v1/watch/namespaces/{name}`), which a
    RoleBinding in that namespace authorises, as the listing is answered
    with the tenant's namespace alone. The client's watch parameters go
    with it, as sent; a field selector may only name that namespace (and is
    then what the path says already)."""
    kept = []
    for pair in raw_query.split("&"):
        parsed = parse_qsl(pair, keep_blank_values=True)
        if not parsed:
            continue
        key, value = parsed[0]
        if key == "fieldSelector":
            if value != f"metadata.name={namespace}":
                return _deny("GET", "tenants may only watch their own namespace")
        elif key in _NAMESPACE_WATCH_PARAMETERS:
            kept.append(pair)
    return Decision("forward", f"/api/v1/watch/namespaces/{namespace}", "&".join(kept), long_running=True)


def _deny(method: str, reason: str) -> Decision:
    return Decision("deny", is_write=method in _WRITES, reason=reason)


# UIs poll the same few paths. Small on purpose: a key can be a 16 KiB request
# line, so 256 entries bound the cache at a few MiB even under hostile URLs.
@functools.lru_cache(maxsize=256)
def classify(method: str, raw_path: str, raw_query: str, namespace: str) -> Decision:
    """Decide one request. `raw_path` and `raw_query` are what follows
    `/k8s/{workspace_id}` on the wire, split at the first `?`; `namespace` is
    the tenant's own. Pure, so every rule is a row in a test table."""
    if method not in _METHODS:
        return _deny(method, "this method is not proxied")
    path = _parse_path(raw_path)
    if path is None:
        return _deny(method, "the path is not in canonical form")
    if not raw_query.isascii() or "#" in raw_query or ";" in raw_query or _BAD_ESCAPE.search(raw_query):
        # Go's url.ParseQuery drops a pair holding ";" or a broken escape,
        # where Python's parse_qsl keeps it: the API server and the tenant
        # wall (and an exec's audit row) would read different queries.
        return _deny(method, "the query is not in canonical form")
    parts = path.decoded
    upstream = "/" + "/".join(path.raw)
    is_write = method in _WRITES
    query = parse_qsl(raw_query, keep_blank_values=True)

    def forward(long_running: bool = False, is_exec: bool = False) -> Decision:
        # `watch` makes only a read a watch; on a write the API server ignores
        # it, and the write keeps the upstream timeout (a body trickled in
        # must not hold a connection for ever).
        watch = method in _READS and _query_flag(query, "watch")
        return Decision("forward", upstream, raw_query, long_running or watch, is_write, is_exec)

    if not parts:
        return _deny(method, "the root path is not proxied")
    if method in _READS and _is_discovery(parts):
        return forward()
    if method == "POST" and _is_self_review(parts):
        return forward()

    core = parts[:2] == ["api", "v1"]
    if core:
        tail = parts[2:]
    elif parts[0] == "apis" and len(parts) >= 4:
        tail = parts[3:]
    else:
        return _deny(method, "this path is outside the tenant")

    watch_path = tail[:1] == ["watch"]
    if watch_path:
        if method not in _READS:
            return _deny(method, "watches are read-only")
        tail = tail[1:]
    if tail[:1] != ["namespaces"]:
        return _deny(method, "cluster-scoped resources are outside the tenant")
    if len(tail) == 1:
        if core and method == "GET" and not watch_path and not _query_flag(query, "watch"):
            return Decision("own_namespace_list", upstream)
        if core and method == "GET" and namespace:
            return _own_namespace_watch(raw_query, namespace)
        return _deny(method, "tenants may only read their own namespace")
    if not namespace or tail[1] != namespace:
        return _deny(method, "that namespace belongs to someone else")

    rest = tail[2:]
    if not rest or (core and len(rest) == 1 and rest[0] in _NAMESPACE_SUBRESOURCES):
        # The Namespace object itself (or its status/finalize): core only, read-only.
        if core and method in _READS:
            return forward(long_running=watch_path)
        return _deny(method, "tenants may not create, change or delete namespaces")

    if core and len(rest) >= 3 and rest[0] in ("pods", "services") and rest[2] == "proxy":
        # The API server would dial an address the tenant controls (it can
        # write Endpoints): no role should ever make that reachable from here.
        return _deny(method, "the API server's proxy subresources are not proxied")
    subresource = rest[2] if len(rest) == 3 else ""
    pods = core and rest[0] == "pods"
    is_exec = pods and subresource in _EXEC_SUBRESOURCES
    follow = pods and subresource == "log" and _query_flag(query, "follow")
    # Only a GET streams here: the WebSocket upgrade's method, and the one a
    # log follow is read with. Any other method is answered at once (the API
    # server refuses a write here; a HEAD has no body), so, like a write with
    # `watch`, it keeps the upstream timeout and takes no stream slot.
    streams = method == "GET" and (is_exec or follow)
    return forward(long_running=watch_path or streams, is_exec=is_exec)


def stream_target(decision: Decision) -> dict[str, object]:
    """What an exec, attach or port-forward reaches, for its audit row: the
    pod, the subresource, and the container, command and ports the client
    asked for (the API server reads the same query keys)."""
    segments = decision.upstream_path.rsplit("/", 3)[-3:]
    query = parse_qsl(decision.upstream_query, keep_blank_values=True)
    target: dict[str, object] = {"pod": unquote(segments[1]), "subresource": segments[2]}
    for key, name in (("container", "container"), ("command", "command"), ("ports", "ports")):
        values = [value for k, value in query if k == key]
        if values:
            target[name] = values if key != "container" else values[0]
    return target
