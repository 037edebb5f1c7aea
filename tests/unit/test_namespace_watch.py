"""A watch of every namespace, through the proxy, is the watch of the
tenant's own (proxy.passthrough.routing._own_namespace_watch): kopf, k9s
and dashboards watch namespaces."""

from __future__ import annotations

import pytest

from proxy.passthrough.routing import classify

OWN = "tenant-a"


@pytest.mark.parametrize(("path", "query", "target"), [
    ("/api/v1/namespaces", "watch=true", f"/api/v1/watch/namespaces/{OWN}"),
    ("/api/v1/namespaces", "watch=1&resourceVersion=5&timeoutSeconds=30&allowWatchBookmarks=true",
     f"/api/v1/watch/namespaces/{OWN}?resourceVersion=5&timeoutSeconds=30&allowWatchBookmarks=true"),
    ("/api/v1/namespaces", f"watch=true&fieldSelector=metadata.name%3D{OWN}", f"/api/v1/watch/namespaces/{OWN}"),
    ("/api/v1/namespaces", "watch&&labelSelector=a%3Db&limit=5", f"/api/v1/watch/namespaces/{OWN}?labelSelector=a%3Db"),
    ("/api/v1/watch/namespaces", "", f"/api/v1/watch/namespaces/{OWN}"),
])
def test_a_watch_of_every_namespace_is_the_watch_of_the_tenants_own(path: str, query: str, target: str) -> None:
    decision = classify("GET", path, query, OWN)
    assert (decision.action, decision.target, decision.long_running) == ("forward", target, True)


@pytest.mark.parametrize(("method", "path", "query"), [
    ("GET", "/api/v1/namespaces", "watch=true&fieldSelector=metadata.name%3Dtenant-b"),
    ("GET", "/api/v1/namespaces", "watch=true&fieldSelector=metadata.name%21%3Dx"),
    ("POST", "/api/v1/namespaces", "watch=true"),
    ("GET", "/apis/apps/v1/namespaces", "watch=true"),
])
def test_no_other_namespace_is_watched(method: str, path: str, query: str) -> None:
    assert classify(method, path, query, OWN).action == "deny"


def test_the_listing_itself_is_still_answered_by_the_gateway() -> None:
    assert classify("GET", "/api/v1/namespaces", "watch=false", OWN).action == "own_namespace_list"
