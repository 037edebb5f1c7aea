"""What every answer carries: hardening headers, exact CORS origins, the
console's policy and files, the OpenAPI document, and the shape of
aiohttp's own refusals on /k8s (no cluster)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from proxy import openapi
from proxy.routes.console import CONSOLE_CSP


@pytest.mark.parametrize("method, path, status", [
    ("GET", "/healthz", 200),
    ("GET", "/api/v1/workspaces", 401),
    ("GET", "/no/such/route", 404),
    ("GET", f"/k8s/{uuid.UUID(int=1)}/api/v1/namespaces", 401),
])
async def test_every_answer_is_hardened_and_names_no_versions(gateway: Any, method: str, path: str,
                                                              status: int) -> None:
    answer = await gateway.request(method, path)
    assert answer.status == status
    assert answer.headers["Server"] == "tenant-gateway"
    assert answer.headers["X-Content-Type-Options"] == "nosniff"
    assert answer.headers["X-Frame-Options"] == "DENY"
    assert answer.headers["Referrer-Policy"] == "no-referrer"
    assert answer.headers["Content-Security-Policy"] == "default-src 'none'; frame-ancestors 'none'"
    assert answer.headers["X-Request-Id"]


async def test_cors_allows_exact_origins_only(make_gateway: Any) -> None:
    client = await make_gateway(GATEWAY_CORS_ORIGINS="https://ui.example.test")
    allowed = await client.options("/api/v1/me", headers={"Origin": "https://ui.example.test",
                                                            "Access-Control-Request-Method": "POST"})
    assert allowed.status == 204
    assert allowed.headers["Access-Control-Allow-Origin"] == "https://ui.example.test"
    assert allowed.headers["Access-Control-Allow-Credentials"] == "true"
    refused = await client.options("/api/v1/me", headers={"Origin": "https://evil.example.test",
                                                            "Access-Control-Request-Method": "POST"})
    assert refused.status == 403 and "Access-Control-Allow-Origin" not in refused.headers
    plain = await client.get("/healthz", headers={"Origin": "https://evil.example.test"})
    assert "Access-Control-Allow-Origin" not in plain.headers


async def test_the_page_and_its_scripts_carry_the_console_policy(gateway: Any) -> None:
    for path, content_type in (("/", "text/html"), ("/console/app.js", "text/javascript"),
                               ("/console/app.css", "text/css"), ("/console/terminal.js", "text/javascript")):
        response = await gateway.get(path)
        assert response.status == 200, path
        assert response.content_type == content_type
        assert response.headers["Content-Security-Policy"] == CONSOLE_CSP
        assert response.headers["X-Frame-Options"] == "DENY"
    page = await (await gateway.get("/")).text()
    assert "<script" in page and "<script>" not in page and "style=" not in page  # no inline code to allow


async def test_api_answers_keep_the_data_only_policy(gateway: Any) -> None:
    response = await gateway.get("/api/v1/me")
    assert response.headers["Content-Security-Policy"] == "default-src 'none'; frame-ancestors 'none'"


@pytest.mark.parametrize("path", ["/console/", "/console/nope.js", "/console/../app.py", "/console/%2e%2e/app.py",
                                  "/console/index.html", "/console/App.js", "/console/app.js/", "/index.html"])
async def test_only_listed_files_are_served(gateway: Any, path: str) -> None:
    response = await gateway.get(path)
    assert response.status in (404, 405), path
    assert (await response.json())["error"]["code"] in ("not_found", "method_not_allowed")


async def test_openapi_document_matches_the_routes(gateway: Any) -> None:
    document = await (await gateway.get("/api/v1/openapi.json")).json()
    documented = {(path, method.upper()) for path, ops in document["paths"].items() for method in ops}
    registered = set()
    for route in gateway.app.router.routes():
        path = route.resource.canonical
        if path.startswith("/k8s/"):
            path = "/k8s/{workspace_id}/{path}"
            methods = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"} if route.method == "*" else {route.method}
        else:
            methods = {route.method} - {"HEAD"}
        registered |= {(path, m) for m in methods}
    assert documented == registered
    # What this deployment accepts, so a client (or a fuzzer) is not told any string is a tier.
    assert document["components"]["schemas"]["InitRequest"]["properties"]["tier"]["enum"] == ["basic"]
    assert openapi.document(["gold", "basic"])["components"]["schemas"]["InitRequest"]["properties"]["tier"]["enum"] \
        == ["basic", "gold"]
    assert {"200", "201", "400"} <= set(document["paths"]["/api/v1/workspaces/init"]["post"]["responses"])


async def test_aiohttps_own_refusals_on_k8s(gateway: Any) -> None:
    """No route matches `/k8s/` with an empty workspace: aiohttp's own 404,
    rendered by the same middleware, is a Status too."""
    answer = await gateway.get("/k8s/")
    body = await answer.json()
    assert (answer.status, body["kind"], body["reason"], body["error"]["code"]) == (404, "Status", "NotFound",
                                                                                   "not_found")
