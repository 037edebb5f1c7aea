"""A real browser against the real gateway: Debian's Chromium, headless,
driven by Playwright, never skipped (a Chromium that cannot start fails the
test with one line saying so).

The browser trusts the test gateway's certificate by its public key
(Chromium's `--ignore-certificate-errors-spki-list`), so pages are secure
contexts with no certificate error anywhere else ignored. Screenshots of
every step are kept under `test-artifacts/browser/<test>/` (ignored by git).
"""

from __future__ import annotations

import re
import ssl
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
from playwright.async_api import Browser, async_playwright

from tests.support.browser import ARTIFACTS, Shots, Watched, spki_pin

CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture
async def browser(gateway_tls: tuple[ssl.SSLContext, Path]) -> AsyncIterator[Browser]:
    pin = spki_pin(gateway_tls[1].parent / "gateway.crt")
    async with async_playwright() as playwright:
        try:
            launched = await playwright.chromium.launch(
                executable_path=str(CHROMIUM), headless=True,
                args=["--no-sandbox", f"--ignore-certificate-errors-spki-list={pin}"])
        except Exception as error:  # noqa: BLE001 - any failure to start is the one line below
            pytest.fail(f"Chromium could not start from {CHROMIUM} (make test installs it): "
                        f"{str(error).splitlines()[0] if str(error) else type(error).__name__}", pytrace=False)
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
def shots(request: pytest.FixtureRequest) -> Shots:
    return Shots(ARTIFACTS / re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    if call.when == "call":
        item.stash[FAILED] = outcome.get_result().failed


FAILED = pytest.StashKey[bool]()


@pytest.fixture
async def watched(request: pytest.FixtureRequest, shots: Shots) -> AsyncIterator[Watched]:
    found = Watched()
    yield found
    if request.node.stash.get(FAILED, False):
        for number, page in enumerate(found.pages):
            if not page.is_closed():
                await shots.take(page, f"failed-page-{number}")
