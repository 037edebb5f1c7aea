"""The browser sign-in's values (pure but for the random draws it is handed).

- `state` names the server-side sign-in record and is stored only hashed;
  the record is bound to the browser by an HttpOnly cookie (`gw_oidc`) whose
  hash it also keeps, so a state lifted from another browser's URL is useless
  (login CSRF);
- `nonce` ties the ID token to this sign-in;
- PKCE S256 ties the code to this gateway's token request;
- `next` is kept only if it is a path on this gateway (no open redirect).
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

from proxy.auth.oidc_providers import OIDCProvider

BROWSER_COOKIE = "gw_oidc"
LOGIN_TTL_SECONDS = 600
"""Ten minutes to type a password at the provider; a stale state is refused."""
MAX_NEXT_LENGTH = 2048
MAX_PARAMETER_LENGTH = 4096


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogateescape")).digest()


@dataclass(frozen=True)
class LoginStart:
    state: str
    nonce: str
    code_verifier: str
    browser: str
    """The value of the browser-binding cookie."""

    @property
    def code_challenge(self) -> str:
        return _b64(hashlib.sha256(self.code_verifier.encode()).digest())


def new_login() -> LoginStart:
    return LoginStart(state=secrets.token_urlsafe(32), nonce=secrets.token_urlsafe(32),
                      code_verifier=secrets.token_urlsafe(64), browser=secrets.token_urlsafe(32))


def safe_next(value: str | None) -> str:
    """A relative path on this gateway, else `/`. Refused: absolute URLs,
    scheme-relative `//host`, backslashes (browsers read `/\\host` as `//host`),
    control characters, and anything too long."""
    if not value or len(value) > MAX_NEXT_LENGTH or not value.startswith("/"):
        return "/"
    if value.startswith("//") or "\\" in value or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        return "/"
    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return "/"
    return value


def authorization_url(endpoint: str, provider: OIDCProvider, start: LoginStart, redirect_uri: str) -> str:
    query = urlencode({
        "response_type": "code", "client_id": provider.client_id, "redirect_uri": redirect_uri,
        "scope": " ".join(provider.scopes), "state": start.state, "nonce": start.nonce,
        "code_challenge": start.code_challenge, "code_challenge_method": "S256",
    })
    return f"{endpoint}{'&' if '?' in endpoint else '?'}{query}"
