"""What the browser tests (tests/browser) share besides their fixtures:
screenshots of each step, the pages a test opened and their consoles, a
page in a fresh context, and signing in through the console's form."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from playwright.async_api import Browser, Page, expect

from tests.support.gatewayclient import PASSWORD

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "browser"
"""Screenshots, one folder per test (ignored by git)."""


def spki_pin(cert_file: Path) -> str:
    """base64(SHA-256(SubjectPublicKeyInfo)): how Chromium names a key it is told to trust."""
    cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    der = cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


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
