"""The gateway's only conversation with identity providers: discovery, keys, code exchange.

One `ProviderClient` per configured provider, all sharing one outbound
`ClientSession` (finite timeouts, bounded bodies). Discovery is cached for
`discovery_seconds` (GATEWAY_OIDC_DISCOVERY_SECONDS, an hour); the JWKS is cached until a token names a key id it does not hold, then
fetched again (key rotation), but at most once per `refetch_interval` per
provider: a flood of tokens with made-up key ids costs the provider one
request per interval, not one per token. A fetch that fails (discovery or
keys) is remembered for the same interval: meanwhile a token naming a key
not held is answered 503 (provider unavailable), not 401, and the provider
is not asked again; a discovery document that could not be refreshed is
used until a refresh succeeds. Each fill is single-flight.

Redirects are never followed, and every address the discovery document
names must be https (plain http on loopback only), as the issuer must: the
client secret and the signing keys travel over them.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import ssl
import time
from dataclasses import dataclass
from typing import Any, Callable, Collection
from urllib.parse import quote

import aiohttp
import jwt

from provisioning.errors import ServiceUnavailable, Unauthenticated
from proxy.auth import oidc_tokens
from proxy.auth.oidc_providers import OIDCProvider, is_secure_url
from proxy.auth.oidc_tokens import Identity, InvalidIdToken
from proxy.http.bodies import read_at_most

MAX_RESPONSE_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Discovery:
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    algorithms: frozenset[str]
    """Advertised ID token algorithms that the gateway accepts (never `none` or HMAC)."""


class ProviderUnavailable(ServiceUnavailable):
    code = "identity_provider_unavailable"
    message = "the identity provider cannot be reached; try again shortly"


def _ssl_context(provider: OIDCProvider) -> ssl.SSLContext | None:
    if provider.ca_file is None:
        return None
    return ssl.create_default_context(cafile=str(provider.ca_file))


class ProviderClient:
    def __init__(self, provider: OIDCProvider, session: aiohttp.ClientSession, *,
                 clock: Callable[[], float] = time.monotonic, refetch_interval: float = 30.0,
                 discovery_seconds: float = 3600.0) -> None:
        self.provider = provider
        self._session = session
        self._ssl = _ssl_context(provider)
        self._clock = clock
        self._refetch_interval = refetch_interval
        self._discovery_seconds = discovery_seconds
        self._discovery: tuple[float, Discovery] | None = None
        self._discovery_failed_at: float | None = None
        self._keys: dict[str, jwt.PyJWK] = {}
        self._keys_fetched_at: float | None = None
        self._keys_failed_at: float | None = None
        self._lock = asyncio.Lock()
        self.jwks_fetches = 0
        """How often the JWKS was fetched: tests and metrics read it."""

    async def _get_json(self, url: str) -> Any:
        try:
            async with self._session.get(url, ssl=self._ssl if self._ssl is not None else True,
                                         allow_redirects=False) as answer:
                raw = await read_at_most(answer.content, MAX_RESPONSE_BYTES)
                if answer.status != 200 or len(raw) > MAX_RESPONSE_BYTES:
                    raise ProviderUnavailable()
        except (aiohttp.ClientError, asyncio.TimeoutError, ssl.SSLError):
            raise ProviderUnavailable() from None
        document = oidc_tokens.parse_json(raw)
        if not isinstance(document, dict):
            raise ProviderUnavailable()
        return document

    def _fresh_discovery(self) -> Discovery | None:
        cached = self._discovery
        if cached is not None and self._clock() - cached[0] < self._discovery_seconds:
            return cached[1]
        return None

    async def discovery(self) -> Discovery:
        found = self._fresh_discovery()
        if found is not None:
            return found
        async with self._lock:
            return await self._discovery_locked()

    async def _discovery_locked(self) -> Discovery:
        """Re-check, then fetch; the caller holds the lock. A failed fetch
        is not repeated within the refetch interval, and the last good
        document (if any) stands in for it."""
        found = self._fresh_discovery()
        if found is not None:
            return found
        stale = self._discovery[1] if self._discovery is not None else None
        failed_at = self._discovery_failed_at
        if failed_at is not None and self._clock() - failed_at < self._refetch_interval:
            if stale is not None:
                return stale
            raise ProviderUnavailable()
        try:
            found = await self._fetch_discovery()
        except ProviderUnavailable:
            self._discovery_failed_at = self._clock()
            if stale is not None:
                return stale
            raise
        self._discovery, self._discovery_failed_at = (self._clock(), found), None
        return found

    async def _fetch_discovery(self) -> Discovery:
        document = await self._get_json(self.provider.issuer.rstrip("/") + "/.well-known/openid-configuration")
        # OIDC discovery 4.3: the document must name exactly the configured issuer.
        if document.get("issuer") != self.provider.issuer:
            raise ProviderUnavailable("the identity provider's discovery names another issuer")
        try:
            found = Discovery(
                authorization_endpoint=str(document["authorization_endpoint"]),
                token_endpoint=str(document["token_endpoint"]), jwks_uri=str(document["jwks_uri"]),
                algorithms=oidc_tokens.allowed_algorithms(
                    document.get("id_token_signing_alg_values_supported", ["RS256"])),
            )
        except KeyError:
            raise ProviderUnavailable("the identity provider's discovery document is incomplete") from None
        if not all(map(is_secure_url, (found.authorization_endpoint, found.token_endpoint, found.jwks_uri))):
            raise ProviderUnavailable("the identity provider's discovery names an address that is not https")
        return found

    async def signing_key(self, kid: Any) -> jwt.PyJWK:
        if not isinstance(kid, str) or not kid or len(kid) > 256:
            raise InvalidIdToken("the token names no signing key", code="id_token_signature")
        key = self._keys.get(kid)
        if key is not None:
            return key
        async with self._lock:
            key = self._keys.get(kid)
            if key is not None:
                return key
            now = self._clock()
            if self._keys_failed_at is not None and now - self._keys_failed_at < self._refetch_interval:
                # The last fetch failed moments ago: the provider is down, and
                # the token may well be good (503, not 401), but it is not
                # asked again before the interval is up.
                raise ProviderUnavailable()
            if self._keys_fetched_at is None or now - self._keys_fetched_at >= self._refetch_interval:
                try:
                    discovery = await self._discovery_locked()
                    self.jwks_fetches += 1
                    fetched = oidc_tokens.jwks_keys(await self._get_json(discovery.jwks_uri))
                except ProviderUnavailable:
                    self._keys_failed_at = self._clock()
                    raise
                # Only a fetch that succeeded counts as the provider's word on
                # its keys: after a failed one, an unknown kid is not a forgery.
                self._keys, self._keys_fetched_at, self._keys_failed_at = fetched, now, None
                key = self._keys.get(kid)
        if key is None:
            raise InvalidIdToken("the token is signed with a key the provider does not publish",
                                 code="id_token_signature")
        return key

    async def verify(self, token: str, *, audiences: tuple[str, ...], authorized_parties: Collection[str] | None,
                     nonce: str | None = None) -> Identity:
        header = oidc_tokens.unverified_header(token)
        discovery = await self.discovery()
        algorithm = oidc_tokens.check_algorithm(header, discovery.algorithms)
        key = await self.signing_key(header.get("kid"))
        return oidc_tokens.verify_id_token(token, key, algorithm, self.provider, audiences=audiences,
                                           authorized_parties=authorized_parties,
                                           now=datetime.datetime.now(datetime.timezone.utc), nonce=nonce)

    async def exchange_code(self, code: str, code_verifier: str, redirect_uri: str) -> str:
        """The ID token for an authorization code (client_secret_basic, PKCE verifier)."""
        discovery = await self.discovery()
        secret = self.provider.client_secret
        if secret is None:
            raise ProviderUnavailable("the identity provider's client secret is not configured")
        # RFC 6749 2.3.1: both halves form-encoded before Basic.
        basic = base64.b64encode(f"{quote(self.provider.client_id, safe='')}:{quote(secret.reveal(), safe='')}"
                                 .encode()).decode()
        form = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri,
                "code_verifier": code_verifier}
        try:
            async with self._session.post(discovery.token_endpoint, data=form,
                                          headers={"Authorization": f"Basic {basic}", "Accept": "application/json"},
                                          ssl=self._ssl if self._ssl is not None else True,
                                          allow_redirects=False) as answer:
                raw = await read_at_most(answer.content, MAX_RESPONSE_BYTES)
                status = answer.status
        except (aiohttp.ClientError, asyncio.TimeoutError, ssl.SSLError):
            raise ProviderUnavailable() from None
        if 400 <= status < 500:
            # The provider refused the code: used already, expired, or not for this client.
            raise Unauthenticated("the identity provider refused the sign-in code", code="code_exchange_failed")
        body = oidc_tokens.parse_json(raw[:MAX_RESPONSE_BYTES])
        if status != 200 or not isinstance(body, dict) or not isinstance(body.get("id_token"), str):
            raise ProviderUnavailable()
        return str(body["id_token"])
