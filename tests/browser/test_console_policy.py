"""The console's Content-Security-Policy, as Chromium enforces it: what an
injected script or markup would try is refused, and the refusal is seen."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.async_api import Browser, expect

from devstack.cluster import LocalCluster
from tests.support.browser import Watched, new_page

pytestmark = [pytest.mark.cluster, pytest.mark.browser]


async def test_inline_code_and_other_origins_are_refused(cluster: LocalCluster, gateway: Any, browser: Browser,
                                                         watched: Watched) -> None:
    # Given the console loaded (its own scripts run: the sign-in form is shown)
    page = await new_page(browser, watched)
    await page.goto(str(gateway.make_url("/")))
    await expect(page.get_by_role("button", name="Sign in", exact=True)).to_be_visible()
    assert not watched.csp_violations()

    # When markup smuggled into the page tries an inline script, an inline
    # handler, a script and a connection to another origin
    await page.evaluate("""() => {
        const s = document.createElement("script"); s.textContent = "window.pwned = 1"; document.body.append(s);
        const d = document.createElement("div"); d.innerHTML = '<img src="x" onerror="window.pwned = 2">'; document.body.append(d);
        const e = document.createElement("script"); e.src = "https://127.0.0.2:1/evil.js"; document.body.append(e);
        try { new WebSocket("wss://127.0.0.2:1/"); } catch (error) { window.refused = String(error); }
    }""")

    # Then none of it ran or connected, and Chromium reported each refusal
    await expect(page.get_by_role("button", name="Sign in", exact=True)).to_be_visible()
    assert await page.evaluate("() => window.pwned") is None
    violations = watched.csp_violations()
    assert any("inline script" in v for v in violations), violations
    assert any("script-src" in v and "127.0.0.2" in v for v in violations), violations
    assert any("connect-src" in v for v in violations) or await page.evaluate("() => window.refused"), violations
