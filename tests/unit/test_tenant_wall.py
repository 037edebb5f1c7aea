"""The proxy's tenant wall, as a table. Pure: no loop, no network."""

from __future__ import annotations

import pytest

from proxy.passthrough.routing import classify

OWN = "tenant-aaaa"
OTHER = "tenant-bbbb"


@pytest.mark.parametrize("method, path, query, upstream, long_running, is_exec", [
    ("GET", "/version", "", "/version", False, False),
    ("GET", "/api", "", "/api", False, False),
    ("GET", "/apis", "", "/apis", False, False),
    ("GET", "/api/v1", "", "/api/v1", False, False),
    ("GET", "/apis/apps/v1", "", "/apis/apps/v1", False, False),
    ("GET", "/openapi/v3/apis/apps/v1", "hash=abc", "/openapi/v3/apis/apps/v1", False, False),
    ("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", "", "/apis/authentication.k8s.io/v1/selfsubjectreviews", False, False),
    ("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", False, False),
    ("GET", f"/api/v1/namespaces/{OWN}", "", f"/api/v1/namespaces/{OWN}", False, False),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps", "", f"/api/v1/namespaces/{OWN}/configmaps", False, False),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps", "watch=true", f"/api/v1/namespaces/{OWN}/configmaps", True, False),
    ("GET", f"/api/v1/watch/namespaces/{OWN}/pods", "", f"/api/v1/watch/namespaces/{OWN}/pods", True, False),
    ("GET", f"/api/v1/namespaces/{OWN}/pods/p/log", "follow=true", f"/api/v1/namespaces/{OWN}/pods/p/log", True, False),
    ("GET", f"/api/v1/namespaces/{OWN}/pods/p/log", "follow=false", f"/api/v1/namespaces/{OWN}/pods/p/log", False, False),
    ("GET", f"/api/v1/namespaces/{OWN}/pods/p/exec", "command=sh", f"/api/v1/namespaces/{OWN}/pods/p/exec", True, True),
    ("POST", f"/api/v1/namespaces/{OWN}/pods/p/portforward", "", f"/api/v1/namespaces/{OWN}/pods/p/portforward", True, True),
    ("PATCH", f"/apis/apps/v1/namespaces/{OWN}/deployments/web", "", f"/apis/apps/v1/namespaces/{OWN}/deployments/web", False, False),
    ("DELETE", f"/api/v1/namespaces/{OWN}/configmaps/x/", "", f"/api/v1/namespaces/{OWN}/configmaps/x", False, False),
])
def test_allowed(method: str, path: str, query: str, upstream: str, long_running: bool, is_exec: bool) -> None:
    decision = classify(method, path, query, OWN)
    assert decision.action == "forward", decision.reason
    assert (decision.upstream_path, decision.long_running, decision.is_exec) == (upstream, long_running, is_exec)
    assert decision.is_write == (method in ("POST", "PUT", "PATCH", "DELETE"))


def test_namespace_list_is_answered_by_the_gateway() -> None:
    assert classify("GET", "/api/v1/namespaces", "", OWN).action == "own_namespace_list"
    assert classify("GET", "/api/v1/namespaces", "watch=1", OWN).action == "deny"
    assert classify("POST", "/api/v1/namespaces", "", OWN).action == "deny"


@pytest.mark.parametrize("method, path", [
    # another tenant, in every spelling
    ("GET", f"/api/v1/namespaces/{OTHER}/configmaps"),
    ("GET", f"/api/v1/namespaces/{OTHER}"),
    ("GET", f"/apis/apps/v1/namespaces/{OTHER}/deployments"),
    ("GET", f"/api/v1/watch/namespaces/{OTHER}/secrets"),
    ("GET", f"/api/v1/namespaces/{OWN}/../{OTHER}/pods"),
    ("GET", f"/api/v1/namespaces/{OWN}/./configmaps"),
    ("GET", f"/api/v1/namespaces/{OWN}%2F..%2F{OTHER}/pods"),
    ("GET", f"/api/v1/namespaces/{OWN}%2f..%2f{OTHER}/pods"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/%2e%2e/%2e%2e/{OTHER}"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/%252e%252e"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/a%5cb"),
    ("GET", f"/api/v1/namespaces/{OWN}\\..\\{OTHER}/pods"),
    ("GET", f"//api/v1/namespaces/{OWN}/configmaps"),
    ("GET", f"/api/v1//namespaces/{OWN}/configmaps"),
    ("GET", f"/api/v1/namespaces/{OWN};x=y/configmaps"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/%00"),
    ("GET", f"/api/v1/namespaces/{OWN}/configmaps/é"),
    ("GET", "http://evil.example/api/v1/nodes"),
    ("GET", f"api/v1/namespaces/{OWN}/configmaps"),
    # cluster-scoped and all-namespace
    ("GET", "/api/v1/nodes"), ("GET", "/api/v1/nodes/n1/proxy/"), ("GET", "/api/v1/pods"),
    ("GET", "/apis/apps/v1/deployments"), ("GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles"),
    ("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"),
    ("GET", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"),
    ("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews"),
    ("POST", "/api/v1/namespaces"), ("PUT", "/version"), ("POST", "/api"),
    # the namespace object itself is read-only
    ("DELETE", f"/api/v1/namespaces/{OWN}"), ("PUT", f"/api/v1/namespaces/{OWN}"),
    ("PATCH", f"/api/v1/namespaces/{OWN}"),
    # server internals
    ("GET", "/"), ("GET", "/logs/"), ("GET", "/metrics"), ("GET", "/debug/pprof/"), ("GET", "/healthz"),
    ("GET", "/readyz"), ("GET", "/livez"),
    # methods
    ("OPTIONS", f"/api/v1/namespaces/{OWN}/configmaps"), ("TRACE", f"/api/v1/namespaces/{OWN}/configmaps"),
    ("CONNECT", f"/api/v1/namespaces/{OWN}/configmaps"),
])
def test_refused(method: str, path: str) -> None:
    decision = classify(method, path, "", OWN)
    assert decision.action == "deny", decision
    assert decision.reason


def test_namespace_must_match_exactly() -> None:
    assert classify("GET", f"/api/v1/namespaces/{OWN}x/configmaps", "", OWN).action == "deny"
    assert classify("GET", f"/api/v1/namespaces/{OWN.upper()}/configmaps", "", OWN).action == "deny"
