"""The console's pure text rules, run in the browser that runs the console:
what a person reads for each refusal, and what a TTY's output becomes."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.async_api import Browser, Page

from devstack.cluster import LocalCluster
from tests.support.browser import Watched, new_page

pytestmark = [pytest.mark.cluster, pytest.mark.browser]

EXPLAIN = [
    ((429, "rate_limited", "too many", 42), "Too many requests. Try again in 42 seconds."),
    ((429, "rate_limited", "too many", 1), "Too many requests. Try again in 1 second."),
    ((429, "", "", None), "Too many requests. Try again in a moment."),
    ((403, "workspace_suspended", "this workspace is suspended", None),
     "This workspace is suspended by an administrator: its pods and credentials are on hold. "
     "Ask an administrator to resume it."),
    ((401, "invalid_credentials", "invalid email or password", None), "Wrong email or password."),
    ((401, "session_ended", "the session has ended; log in again", None), "Your session has ended. Sign in again."),
    ((503, "cluster_unavailable", "the Kubernetes API server is unreachable", None),
     "The Kubernetes API server is unreachable. Try again in a moment."),
    ((404, "", "", None), "The request failed (HTTP 404)."),
    ((403, "Forbidden", 'pods "x" is forbidden', None), 'Pods "x" is forbidden.'),
    ((400, "unknown_tier", "unknown tier 'gold'; known: basic", None), "Unknown tier 'gold'; known: basic."),
]

PRINTABLE = [
    ("plain\r\n", "plain\n"),
    ("\x1b[1;32mgreen\x1b[0m", "green"),
    ("\x1b]0;title\x07/ # ", "/ # "),
    ("ab\x08c", "ac"),
    ("\x1b[6n\x1b[?2004h$ ", "$ "),
    ("bell\x07", "bell"),
]


async def console(browser: Browser, watched: Watched, gateway: Any) -> Page:
    page = await new_page(browser, watched)
    await page.goto(str(gateway.make_url("/")))
    return page


async def test_refusals_read_as_sentences(cluster: LocalCluster, gateway: Any, browser: Browser,
                                          watched: Watched) -> None:
    page = await console(browser, watched, gateway)
    said = await page.evaluate("""async (cases) => {
        const { explain } = await import("/console/api.js");
        return cases.map(([args]) => explain(...args));
    }""", EXPLAIN)
    assert said == [expected for _, expected in EXPLAIN]
    assert not any("{" in text for text in said)


async def test_tty_output_becomes_plain_text(cluster: LocalCluster, gateway: Any, browser: Browser,
                                             watched: Watched) -> None:
    page = await console(browser, watched, gateway)
    shown = await page.evaluate("""async (cases) => {
        const { printable } = await import("/console/terminal.js");
        return cases.map(([raw]) => printable(raw));
    }""", PRINTABLE)
    assert shown == [expected for _, expected in PRINTABLE]


async def test_kubeconfig_formats_follow_the_gateways_document(cluster: LocalCluster, gateway: Any, browser: Browser,
                                                              watched: Watched) -> None:
    page = await console(browser, watched, gateway)
    served = await (await gateway.get("/api/v1/openapi.json")).json()
    with_exec = {"paths": {"/api/v1/workspaces/credentials/kubeconfig": {"get": {"parameters": [
        {"name": "workspace_id", "in": "query"},
        {"name": "format", "in": "query", "schema": {"type": "string", "enum": ["token", "exec"]}}]}}}}
    found = await page.evaluate("""async ([served, withExec]) => {
        const { formats, howToUse } = await import("/console/kubeconfigs.js");
        return [formats(served), formats(withExec), howToUse("token", "https://gw"), howToUse("exec", "https://gw")];
    }""", [served, with_exec])
    # This gateway documents both formats (a gateway without `format` offers only the token one)
    assert found[0] == ["token", "exec"]
    without_format = {"paths": {"/api/v1/workspaces/credentials/kubeconfig": {"get": {"parameters": [
        {"name": "workspace_id", "in": "query"}]}}}}
    assert found[1] == ["token", "exec"]
    assert await page.evaluate("""async (doc) => (await import("/console/kubeconfigs.js")).formats(doc)""",
                               without_format) == ["token"]
    assert found[2][1] == 'export KUBECONFIG="$PWD/kubeconfig.yaml"\nkubectl get pods'
    assert found[3][1].startswith("tenant-gateway login --gateway https://gw\n")
