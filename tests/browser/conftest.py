"""A real browser against the real gateway: Debian's Chromium, headless,
driven by Playwright, never skipped (a Chromium that cannot start fails the
test with one line saying so).

The browser trusts the test gateway's certificate by its public key
(Chromium's `--ignore-certificate-errors-spki-list`), so pages are secure
contexts with no certificate error anywhere else ignored. Screenshots of
every step are kept under `test-artifacts/browser/<test>/` (ignored by git).
"""

from __future__ import annotations

import base64
import hashlib
import re
import ssl
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from playwright.async_api import Browser, Page, async_playwright, expect

from tests.support.gatewayclient import PASSWORD

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "browser"


def spki_pin(cert_file: Path) -> str:
    """base64(SHA-256(SubjectPublicKeyInfo)): how Chromium names a key it is told to trust."""
    cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    der = cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


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


class Shots:
    """Numbered screenshots of one test's steps."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.count = 0
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.png"):
            old.unlink()

    async def take(self, page: Page, step: str) -> Path:
        self.count += 1
        path = self.folder / f"{self.count:02d}-{step}.png"
        await page.screenshot(path=str(path), full_page=True)
        return path


@pytest.fixture
def shots(request: pytest.FixtureRequest) -> Shots:
    return Shots(ARTIFACTS / re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name))


class Watched:
    """The test's pages and what they said on their consoles: a CSP violation
    is a failed test, and a failed test leaves a screenshot of every page."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.pages: list[Page] = []

    def attach(self, page: Page) -> Page:
        page.on("console", lambda message: self.errors.append(message.text) if message.type == "error" else None)
        self.pages.append(page)
        return page

    def csp_violations(self) -> list[str]:
        return [text for text in self.errors if "Content Security Policy" in text]


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


async def new_page(browser: Browser, watched: Watched, **options: Any) -> Page:
    context = await browser.new_context(viewport={"width": 1280, "height": 860}, accept_downloads=True, **options)
    return watched.attach(await context.new_page())


async def sign_in(page: Page, base: str, email: str, *, expect_success: bool = True) -> None:
    """Through the console's own form, as a person would."""
    await page.goto(base)
    await page.get_by_label("Email").fill(email)
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Sign in", exact=True).click()
    if expect_success:
        await expect(page.get_by_role("button", name="Sign out")).to_be_visible()
