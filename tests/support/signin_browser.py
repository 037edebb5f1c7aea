"""Sign in the way a browser does, with plain HTTP: the gateway's login
redirect, Keycloak's real login form (parsed and posted), and the redirect
back to the gateway's callback. Nothing is skipped or stubbed."""

from __future__ import annotations

import html
import re
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
from yarl import URL

from devstack.keycloak import PASSWORD

_FORM = re.compile(r'<form[^>]*id="kc-form-login"[^>]*action="([^"]+)"', re.S)


@dataclass
class Browser:
    session: aiohttp.ClientSession
    gateway: str

    async def close(self) -> None:
        await self.session.close()

    def cookie(self, name: str) -> str | None:
        for cookie in self.session.cookie_jar:
            if cookie.key == name:
                return cookie.value
        return None

    async def start(self, provider: str, next_path: str | None = None) -> str:
        """Open the gateway's login link; return where it sends the browser (the provider)."""
        query = {"next": next_path} if next_path is not None else {}
        async with self.session.get(f"{self.gateway}/api/v1/auth/oidc/{provider}/login", params=query,
                                    allow_redirects=False) as answer:
            assert answer.status == 302, await answer.text()
            return answer.headers["Location"]

    async def sign_in_at_provider(self, authorization_url: str, username: str, password: str = PASSWORD) -> str:
        """Fill in Keycloak's login form; return the callback URL it redirects to.
        A browser already signed in at Keycloak is sent straight back, as a real one is."""
        async with self.session.get(authorization_url, allow_redirects=False) as page:
            if page.status == 302:
                return page.headers["Location"]
            assert page.status == 200, await page.text()
            match = _FORM.search(await page.text())
            assert match, "Keycloak's login form was not found"
        action = html.unescape(match.group(1))
        async with self.session.post(action, data={"username": username, "password": password, "credentialId": ""},
                                     allow_redirects=False) as answer:
            assert answer.status == 302, await answer.text()
            return answer.headers["Location"]

    async def callback(self, url: str) -> aiohttp.ClientResponse:
        answer = await self.session.get(url, allow_redirects=False)
        await answer.read()
        return answer

    async def sign_in(self, provider: str, username: str, next_path: str | None = None) -> aiohttp.ClientResponse:
        return await self.callback(await self.sign_in_at_provider(await self.start(provider, next_path), username))


def new_browser(gateway_client: Any, keycloak: Any) -> Browser:
    """A cookie jar that, like a browser, treats loopback HTTP (dev Keycloak) as a secure origin."""
    jar = aiohttp.CookieJar(unsafe=True, treat_as_secure_origin=[URL(keycloak.base_url)])
    context = ssl.create_default_context(cafile=str(Path(gateway_client.ca_file)))
    session = aiohttp.ClientSession(cookie_jar=jar, connector=aiohttp.TCPConnector(ssl=context))
    return Browser(session, str(gateway_client.make_url("")).rstrip("/"))


def callback_parameters(url: str) -> dict[str, str]:
    return {key: values[0] for key, values in parse_qs(urlsplit(url).query).items()}
