"""The tenant wall (proxy.passthrough.routing), as tables. Pure: no loop, no network."""

from __future__ import annotations

import pytest

from proxy.passthrough.gate import split_target
from proxy.passthrough.routing import Decision, classify, stream_target

OWN = "tenant-a"
OTHER = "tenant-b"
WRITES = ("POST", "PUT", "PATCH", "DELETE")


def decide(method: str, path: str, query: str = "") -> Decision:
    return classify(method, path, query, OWN)


@pytest.mark.parametrize("method, path, query, upstream", [
    # discovery, version, OpenAPI
    ("GET", "/version", "", "/version"),
    ("GET", "/version/", "", "/version"),
    ("GET", "/api", "", "/api"),
    ("GET", "/api/v1", "", "/api/v1"),
    ("GET", "/apis", "", "/apis"),
    ("GET", "/apis/", "", "/apis"),
    ("HEAD", "/apis", "", "/apis"),
    ("GET", "/apis/apps", "", "/apis/apps"),
    ("GET", "/apis/apps/v1", "", "/apis/apps/v1"),
    ("GET", "/apis/metrics.k8s.io/v1beta1", "", "/apis/metrics.k8s.io/v1beta1"),
    ("GET", "/openapi/v2", "timeout=32s", "/openapi/v2"),
    ("GET", "/openapi/v3", "", "/openapi/v3"),
    ("GET", "/openapi/v3/apis/apps/v1", "hash=abc", "/openapi/v3/apis/apps/v1"),
    # self reviews, every version
    ("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", "",
     "/apis/authentication.k8s.io/v1/selfsubjectreviews"),
    ("POST", "/apis/authentication.k8s.io/v1beta1/selfsubjectreviews", "",
     "/apis/authentication.k8s.io/v1beta1/selfsubjectreviews"),
    ("POST", "/apis/authentication.k8s.io/v1alpha1/selfsubjectreviews", "",
     "/apis/authentication.k8s.io/v1alpha1/selfsubjectreviews"),
    ("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "",
     "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"),
    ("POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", "",
     "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews"),
    ("POST", "/apis/authorization.k8s.io/v1beta1/selfsubjectrulesreviews", "",
     "/apis/authorization.k8s.io/v1beta1/selfsubjectrulesreviews"),
    # the tenant's own Namespace object, read-only
    ("GET", f"/api/v1/namespaces/{OWN}", "", f"/api/v1/namespaces/{OWN}"),
    ("HEAD", f"/api/v1/namespaces/{OWN}", "", f"/api/v1/namespaces/{OWN}"),
    ("GET", f"/api/v1/namespaces/{OWN}/status", "", f"/api/v1/namespaces/{OWN}/status"),
    # inside the tenant's namespace, any verb (RBAC decides)
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps", "labelSelector=a%3Db", f"/api/v1/namespaces/{OWN}/configmaps"),
    ("POST", f"/api/v1/namespaces/{OWN}/configmaps", "", f"/api/v1/namespaces/{OWN}/configmaps"),
    ("PUT", f"/api/v1/namespaces/{OWN}/configmaps/c", "", f"/api/v1/namespaces/{OWN}/configmaps/c"),
    ("PATCH", f"/apis/apps/v1/namespaces/{OWN}/deployments/web", "", f"/apis/apps/v1/namespaces/{OWN}/deployments/web"),
    ("DELETE", f"/api/v1/namespaces/{OWN}/configmaps/x/", "", f"/api/v1/namespaces/{OWN}/configmaps/x"),
    ("GET", f"/apis/apps/v1/namespaces/{OWN}/deployments/web/scale", "", f"/apis/apps/v1/namespaces/{OWN}/deployments/web/scale"),
    ("POST", f"/apis/authorization.k8s.io/v1/namespaces/{OWN}/localsubjectaccessreviews", "",
     f"/apis/authorization.k8s.io/v1/namespaces/{OWN}/localsubjectaccessreviews"),
    # names with dots, and safe characters sent escaped: kept escaped, hex normalised
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/kube-root-ca.crt", "", f"/api/v1/namespaces/{OWN}/configmaps/kube-root-ca.crt"),
    ("GET", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{OWN}/rolebindings/system%3aimage-pullers", "",
     f"/apis/rbac.authorization.k8s.io/v1/namespaces/{OWN}/rolebindings/system%3Aimage-pullers"),
    ("GET", "/api/v1/namespaces/tenant%2Da/pods", "", "/api/v1/namespaces/tenant%2Da/pods"),
])
def test_forwarded(method: str, path: str, query: str, upstream: str) -> None:
    decision = decide(method, path, query)
    assert decision.action == "forward", decision.reason
    assert decision.upstream_path == upstream
    assert decision.is_write == (method in WRITES)
    assert decision.reason == ""
    assert "?" not in decision.upstream_path


@pytest.mark.parametrize("method, path, query, long_running, is_exec", [
    ("GET", f"/api/v1/namespaces/{OWN}/pods", "", False, False),
    ("GET", f"/api/v1/namespaces/{OWN}/pods", "watch=true", True, False),
    ("GET", f"/api/v1/namespaces/{OWN}/pods", "watch=1", True, False),
    ("GET", f"/api/v1/namespaces/{OWN}/pods", "resourceVersion=5&watch=True&timeoutSeconds=300", True, False),
    ("GET", f"/api/v1/namespaces/{OWN}/pods", "watch=false", False, False),
    ("GET", f"/api/v1/namespaces/{OWN}/pods", "watch=0", False, False),
    # Read as the API server reads it: false only for 0/false, first value wins.
    ("GET", f"/api/v1/namespaces/{OWN}/pods", "watch", True, False),
    ("GET", f"/api/v1/namespaces/{OWN}/pods", "watch=", True, False),
    ("GET", f"/api/v1/namespaces/{OWN}/pods", "watch=yes", True, False),
    ("GET", f"/api/v1/namespaces/{OWN}/pods", "watch=FALSE", False, False),
    ("GET", f"/api/v1/namespaces/{OWN}/pods", "watch=1&watch=0", True, False),
    ("GET", f"/api/v1/namespaces/{OWN}/pods", "watch=0&watch=1", False, False),
    ("GET", f"/api/v1/namespaces/{OWN}/pods/p/log", "follow=yes", True, False),
    ("GET", f"/apis/apps/v1/namespaces/{OWN}/deployments", "watch=true", True, False),
    ("GET", f"/api/v1/watch/namespaces/{OWN}/pods", "", True, False),
    ("GET", f"/api/v1/watch/namespaces/{OWN}/pods/p", "", True, False),
    ("GET", f"/apis/apps/v1/watch/namespaces/{OWN}/deployments", "", True, False),
    ("GET", f"/api/v1/watch/namespaces/{OWN}", "", True, False),
    ("GET", f"/api/v1/namespaces/{OWN}/pods/p/log", "follow=true&container=c", True, False),
    ("GET", f"/api/v1/namespaces/{OWN}/pods/p/log", "follow=1", True, False),
    ("GET", f"/api/v1/namespaces/{OWN}/pods/p/log", "follow=false", False, False),
    ("GET", f"/api/v1/namespaces/{OWN}/pods/p/log", "", False, False),
    ("GET", f"/api/v1/namespaces/{OWN}/pods/p/exec", "command=sh&stdin=true&tty=true", True, True),
    ("GET", f"/api/v1/namespaces/{OWN}/pods/p/attach", "stdout=true", True, True),
    ("GET", f"/api/v1/namespaces/{OWN}/pods/p/portforward", "ports=80", True, True),
    # Only GET (the upgrade's method, the log's) streams: any other method is
    # answered at once and keeps the upstream timeout, like a write with `watch`.
    ("POST", f"/api/v1/namespaces/{OWN}/pods/p/exec", "command=sh", False, True),
    ("PUT", f"/api/v1/namespaces/{OWN}/pods/p/attach", "stdout=true", False, True),
    ("PATCH", f"/api/v1/namespaces/{OWN}/pods/p/exec", "command=sh", False, True),
    ("DELETE", f"/api/v1/namespaces/{OWN}/pods/p/attach", "", False, True),
    ("POST", f"/api/v1/namespaces/{OWN}/pods/p/portforward", "ports=80", False, True),
    ("HEAD", f"/api/v1/namespaces/{OWN}/pods/p/exec", "command=sh", False, True),
    ("POST", f"/api/v1/namespaces/{OWN}/pods/p/log", "follow=1", False, False),
    ("DELETE", f"/api/v1/namespaces/{OWN}/pods/p/log", "follow=true", False, False),
    ("HEAD", f"/api/v1/namespaces/{OWN}/pods/p/log", "follow=1", False, False),
    # a custom resource that happens to be called "pods" is not the core exec
    ("GET", f"/apis/example.com/v1/namespaces/{OWN}/pods/p/exec", "", False, False),
    # follow means nothing outside pods/{name}/log
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps", "follow=true", False, False),
    # nor watch on a write: it keeps the upstream timeout
    ("POST", f"/api/v1/namespaces/{OWN}/configmaps", "watch=true", False, False),
    ("PATCH", f"/api/v1/namespaces/{OWN}/configmaps/c", "watch=1", False, False),
    ("DELETE", f"/api/v1/namespaces/{OWN}/configmaps", "watch=true", False, False),
])
def test_long_running_and_exec(method: str, path: str, query: str, long_running: bool, is_exec: bool) -> None:
    decision = decide(method, path, query)
    assert decision.action == "forward", decision.reason
    assert (decision.long_running, decision.is_exec) == (long_running, is_exec)


@pytest.mark.parametrize("method, query, action", [
    ("GET", "", "own_namespace_list"),
    ("GET", "limit=500", "own_namespace_list"),
    ("GET", "labelSelector=team%3Dx", "own_namespace_list"),
    # its watch is the watch of the tenant's own namespace (tests/unit/test_namespace_watch.py)
    ("GET", "watch=1", "forward"),
    ("GET", "watch=true", "forward"),
    ("GET", "watch", "forward"),
    ("HEAD", "", "deny"),
    ("POST", "", "deny"),
    ("PUT", "", "deny"),
    ("PATCH", "", "deny"),
    ("DELETE", "", "deny"),
])
def test_namespace_list_is_answered_by_the_gateway(method: str, query: str, action: str) -> None:
    decision = decide(method, "/api/v1/namespaces", query)
    assert decision.action == action
    if action == "own_namespace_list":
        assert decision.upstream_path == "/api/v1/namespaces"


@pytest.mark.parametrize("method, path", [
    ("PUT", f"/api/v1/namespaces/{OWN}"),
    ("PATCH", f"/api/v1/namespaces/{OWN}"),
    ("DELETE", f"/api/v1/namespaces/{OWN}"),
    ("POST", f"/api/v1/namespaces/{OWN}"),
    ("PUT", f"/api/v1/namespaces/{OWN}/finalize"),
    ("PUT", f"/api/v1/namespaces/{OWN}/status"),
    ("PATCH", f"/api/v1/namespaces/{OWN}/status"),
    ("GET", f"/apis/apps/v1/namespaces/{OWN}"),
    ("GET", f"/apis/apps/v1/watch/namespaces/{OWN}"),
    ("POST", f"/api/v1/watch/namespaces/{OWN}/pods"),
    ("DELETE", f"/api/v1/watch/namespaces/{OWN}/pods/p"),
])
def test_the_namespace_itself_cannot_be_changed(method: str, path: str) -> None:
    decision = decide(method, path)
    assert decision.action == "deny" and decision.reason


ATTACKS = [
    # another tenant, plainly
    ("GET", f"/api/v1/namespaces/{OTHER}"),
    ("GET", f"/api/v1/namespaces/{OTHER}/pods"),
    ("DELETE", f"/api/v1/namespaces/{OTHER}/pods/p"),
    ("GET", f"/apis/apps/v1/namespaces/{OTHER}/deployments"),
    ("GET", f"/api/v1/watch/namespaces/{OTHER}/secrets"),
    ("GET", f"/apis/apps/v1/watch/namespaces/{OTHER}/deployments"),
    ("POST", f"/api/v1/namespaces/{OTHER}/pods/p/exec"),
    ("GET", f"/api/v1/namespaces/{OWN}x/configmaps"),
    ("GET", f"/api/v1/namespaces/{OWN.upper()}/configmaps"),
    ("GET", "/api/v1/namespaces/tenant-/configmaps"),
    ("GET", "/api/v1/namespaces/tenant%2Db/pods"),
    # dot segments, literal and encoded, single and double
    ("GET", f"/api/v1/namespaces/{OWN}/../{OTHER}/pods"),
    ("GET", f"/api/v1/namespaces/{OWN}/./configmaps"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/.."),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/."),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/%2e%2e/%2e%2e/{OTHER}"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/%2E%2E"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/.%2e"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/%2e"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/%252e%252e"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/%252F"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/%25"),
    # encoded slashes and backslashes
    ("GET", f"/api/v1/namespaces/{OTHER}%2Fpods"),
    ("GET", f"/api/v1/namespaces/{OWN}%2F..%2F{OTHER}/pods"),
    ("GET", f"/api/v1/namespaces/{OWN}%2f..%2f{OTHER}/pods"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/a%5cb"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/a%5Cb"),
    ("GET", f"/api/v1/namespaces/{OWN}\\..\\{OTHER}/pods"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps\\x"),
    # empty segments
    ("GET", f"//api/v1/namespaces/{OWN}/configmaps"),
    ("GET", f"/api/v1//namespaces/{OWN}/configmaps"),
    ("GET", f"/api/v1/namespaces/{OWN}//configmaps"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps//"),
    ("GET", "//"),
    # path parameters, controls, non-ASCII, malformed escapes
    ("GET", f"/api/v1/namespaces/{OWN};x=y/configmaps"),
    ("GET", f"/api/v1/namespaces/{OWN}%3b/configmaps"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/%00"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/a\x00b"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/a%0d%0aX-Injected:%20y"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/a\r\nX: y"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/a%7f"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/a\tb"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/a b"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/a%20b"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/é"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/%C3%A9"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/%"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/%2"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/%zz"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/a%3Fwatch=1"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/a%23b"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/a?b"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/a#b"),
    # absolute-form and relative targets
    ("GET", "http://evil/api"),
    ("GET", "http://evil.example/api/v1/nodes"),
    ("GET", f"https://kubernetes.default.svc/api/v1/namespaces/{OWN}/pods"),
    ("GET", f"/http://evil/api/v1/namespaces/{OWN}/pods"),
    ("GET", f"api/v1/namespaces/{OWN}/configmaps"),
    ("GET", "*"),
    # structural words spelled with escapes are not trusted to mean less
    ("GET", f"/api/v1/n%61mespaces/{OTHER}/pods"),
    ("GET", f"/api/v1/w%61tch/namespaces/{OTHER}/pods"),
    # cluster-scoped and all-namespace
    ("GET", "/api/v1/nodes"),
    ("GET", "/api/v1/nodes/n1"),
    ("GET", "/api/v1/nodes/n1/proxy/"),
    ("GET", "/api/v1/nodes/n1/proxy/http/metrics"),
    ("GET", "/api/v1/pods"),
    ("GET", "/api/v1/secrets"),
    ("GET", "/api/v1/watch/pods"),
    ("GET", "/api/v1/persistentvolumes"),
    ("GET", "/apis/apps/v1/deployments"),
    ("GET", "/apis/apps/v1/watch/deployments"),
    ("GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles"),
    ("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"),
    ("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"),
    ("POST", "/apis/certificates.k8s.io/v1/certificatesigningrequests"),
    ("POST", "/apis/authentication.k8s.io/v1/tokenreviews"),
    ("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews"),
    ("POST", "/apis/authorization.k8s.io/v2/selfsubjectaccessreviews"),
    ("GET", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"),
    ("PUT", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"),
    ("POST", "/api/v1/namespaces"),
    ("POST", "/api/v1/namespaces/"),
    ("PUT", "/version"),
    ("POST", "/api"),
    ("POST", "/apis/apps/v1"),
    ("DELETE", "/openapi/v2"),
    ("GET", "/openapi/v2/anything"),
    ("GET", "/openapi"),
    ("GET", "/openapi/v1"),
    ("GET", "/api/v2"),
    ("GET", "/api/v1/proxy/namespaces/x/services/y"),
    # server internals
    ("GET", ""), ("GET", "/"), ("GET", "/logs"), ("GET", "/logs/"), ("GET", "/logs/kube-apiserver.log"),
    ("GET", "/metrics"), ("GET", "/metrics/slis"), ("GET", "/debug/pprof/"), ("GET", "/debug/flags/v"),
    ("PUT", "/debug/flags/v"), ("GET", "/healthz"), ("GET", "/healthz/etcd"), ("GET", "/readyz"),
    ("GET", "/livez"), ("GET", "/.well-known/openid-configuration"), ("GET", "/openid/v1/jwks"),
    ("GET", "/ui"), ("GET", "/swagger.json"),
    # methods
    ("OPTIONS", f"/api/v1/namespaces/{OWN}/configmaps"), ("TRACE", f"/api/v1/namespaces/{OWN}/configmaps"),
    ("CONNECT", f"/api/v1/namespaces/{OWN}/configmaps"), ("PROPFIND", f"/api/v1/namespaces/{OWN}/configmaps"),
    ("get", f"/api/v1/namespaces/{OWN}/configmaps"), ("OPTIONS", "/version"), ("", "/version"),
]


@pytest.mark.parametrize("method, path", ATTACKS)
def test_refused(method: str, path: str) -> None:
    decision = decide(method, path)
    assert decision.action == "deny", decision
    assert decision.reason
    assert decision.upstream_path == ""
    assert not decision.long_running and not decision.is_exec


@pytest.mark.parametrize("method, path", ATTACKS)
def test_a_refusal_never_echoes_the_request(method: str, path: str) -> None:
    reason = decide(method, path).reason
    assert reason.isascii() and reason.isprintable()
    assert OTHER not in reason and "evil" not in reason and "%" not in reason


def test_an_empty_own_namespace_allows_nothing_namespaced() -> None:
    assert classify("GET", "/api/v1/namespaces//pods", "", "").action == "deny"
    assert classify("GET", "/api/v1/namespaces/x/pods", "", "").action == "deny"
    assert classify("GET", "/version", "", "").action == "forward"


def test_decisions_are_frozen() -> None:
    decision = decide("GET", "/version")
    with pytest.raises(AttributeError):
        decision.action = "deny"  # type: ignore[misc]


@pytest.mark.parametrize("path", [
    "/api/v1/namespaces/tenant-a/pods/web/proxy",
    "/api/v1/namespaces/tenant-a/pods/web/proxy/http/metrics",
    "/api/v1/namespaces/tenant-a/services/web:80/proxy/",
    "/api/v1/namespaces/tenant-a/services/https:web:443/proxy/admin",
])
def test_proxy_subresources_are_never_forwarded(path: str) -> None:
    """They make the API server dial addresses a tenant can choose (Endpoints)."""
    assert classify("GET", path, "", "tenant-a").action == "deny"


@pytest.mark.parametrize("query", [
    "labelSelector=v%3D%2574",
    "labelSelector=app%20in%20(a%2Cb)&limit=500",
    "fieldSelector=metadata.name%3Dx%2By&continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ",
])
def test_the_query_is_forwarded_exactly_as_sent(query: str) -> None:
    decision = decide("GET", f"/api/v1/namespaces/{OWN}/configmaps", query)
    assert decision.action == "forward" and decision.upstream_query == query


@pytest.mark.parametrize("query", [
    "labelSelector=caf\u00e9", "limit=5#fragment",
    # pairs Go's url.ParseQuery drops and Python's parse_qsl keeps: the audit
    # row would name the decoy container, the API server run in the real one
    "container=decoy;&container=real&command=sh", "container=%zz&container=real", "limit=5%", "limit=5%2",
])
def test_a_query_that_is_not_canonical_is_refused(query: str) -> None:
    assert decide("GET", f"/api/v1/namespaces/{OWN}/configmaps", query).action == "deny"
    assert decide("GET", f"/api/v1/namespaces/{OWN}/pods/p/exec", query).action == "deny"


def test_watch_is_read_from_the_query_decoded_once_as_the_api_server_does() -> None:
    path = f"/api/v1/namespaces/{OWN}/pods"
    assert not decide("GET", path, "watch=%66alse").long_running
    assert decide("GET", path, "watch=%2566alse").long_running  # the API server sees "%66alse": not false


def test_stream_target_names_what_an_exec_reaches() -> None:
    decision = classify("GET", "/api/v1/namespaces/tenant-a/pods/web-1/exec",
                        "container=main&command=sh&command=-c&command=echo%20hi&stdin=true", "tenant-a")
    assert decision.is_exec
    assert stream_target(decision) == {"pod": "web-1", "subresource": "exec", "container": "main",
                                       "command": ["sh", "-c", "echo hi"]}
    forward = classify("GET", "/api/v1/namespaces/tenant-a/pods/web-1/portforward", "ports=8080&ports=9090",
                       "tenant-a")
    assert stream_target(forward) == {"pod": "web-1", "subresource": "portforward", "ports": ["8080", "9090"]}


WORKSPACE = "0b5e1a2c-3d4e-4f50-8a6b-7c8d9e0f1a2b"


@pytest.mark.parametrize(("target", "parts"), [
    (f"/k8s/{WORKSPACE}/api/v1/namespaces/tenant-1/pods?watch=1",
     (WORKSPACE, "/api/v1/namespaces/tenant-1/pods", "watch=1")),
    (f"/k8s/%30{WORKSPACE[1:]}/api/v1/pods", (f"%30{WORKSPACE[1:]}", "/api/v1/pods", "")),  # longer as sent
    (f"/%6B8s/{WORKSPACE}/api", (WORKSPACE, "/api", "")),
    (f"/k8s/{WORKSPACE}/api%2Fv1?a=%2F", (WORKSPACE, "/api%2Fv1", "a=%2F")),  # an escaped slash stays in the tail
    (f"/k8s/{WORKSPACE}/", (WORKSPACE, "/", "")),
    (f"/k8s/{WORKSPACE}", (WORKSPACE, "", "")),
    (f"/k8s/{WORKSPACE}?x=1", (WORKSPACE, "", "x=1")),
    ("/k8s/", ("", "", "")),
    ("/k8s", ("", "", "")),
])
def test_the_target_is_cut_at_the_slashes_as_sent(target: str, parts: tuple[str, str, str]) -> None:
    """The router decoded the route's segments; the tenant wall reads the rest as sent.
    Both request paths cut the target here (proxy.passthrough.gate.split_target)."""
    assert split_target(target) == parts
