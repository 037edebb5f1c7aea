"""The console's files: served at / and /console/, under their own strict
policy, and nothing else reachable through those routes."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.routes.console import CONSOLE_CSP

pytestmark = pytest.mark.cluster


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
