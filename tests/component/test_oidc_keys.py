"""An identity provider that cannot be reached is unavailable (503), not a forger (401), and not flooded.

Given a provider whose discovery answers but whose JWKS address refuses
connections (a loopback port where nothing listens: a real refusal), when a
good token names a key the gateway does not hold yet, then the answer is
`identity_provider_unavailable` (503), also for the tokens that follow
within the refetch interval, which do not ask the provider again; once the
interval is up and the keys are served, the same token verifies.

The provider is the test's own (an aiohttp app on 127.0.0.1 signing with a
key made here, as in tests/unit/test_oidc.py): the real Keycloak is shared
by the whole session and cannot be made to stop serving its keys on cue.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import AsyncIterator, Awaitable, Callable

import aiohttp
import jwt
import pytest
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa

from devstack.processes import free_port
from proxy.auth.oidc_client import ProviderClient, ProviderUnavailable
from proxy.auth.oidc_providers import OIDCProvider, parse_providers

KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
JWK = {**json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(KEY.public_key())), "kid": "k1", "alg": "RS256", "use": "sig"}
INTERVAL = 30.0


class Clock:
    def __init__(self) -> None:
        self.now = 10_000.0

    def __call__(self) -> float:
        return self.now


async def serve(app: web.Application, port: int = 0) -> web.AppRunner:
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


def signed(issuer: str, sub: str = "u-1") -> str:
    now = int(time.time())
    return jwt.encode({"iss": issuer, "aud": "tenant-gateway", "sub": sub, "iat": now, "exp": now + 300,
                       "email": f"{sub}@own.example", "email_verified": True}, KEY, algorithm="RS256",
                      headers={"kid": "k1"})


async def provider_serving(routes: dict[str, Callable[[web.Request], Awaitable[web.Response]]],
                           configuration: Callable[[web.Request], Awaitable[web.Response]]
                           ) -> tuple[web.AppRunner, str, OIDCProvider]:
    """The test's own provider on loopback: its discovery and `routes`, its
    issuer (its address) and the provider setting naming it."""
    app = web.Application()
    app.router.add_get("/.well-known/openid-configuration", configuration)
    for path, handler in routes.items():
        app.router.add_get(path, handler)
    server = await serve(app)
    issuer = f"http://127.0.0.1:{server.addresses[0][1]}"
    provider = parse_providers([{"name": "own", "issuer": issuer, "client_id": "tenant-gateway",
                                 "client_secret": "s"}])[0]
    return server, issuer, provider


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        yield session


async def test_keys_that_cannot_be_fetched_answer_503_until_they_can(http: aiohttp.ClientSession) -> None:
    keys_port = free_port()  # nothing listens here until the keys are served
    served: dict[str, str] = {}

    async def configuration(request: web.Request) -> web.Response:
        issuer = served["issuer"]
        return web.json_response({
            "issuer": issuer, "authorization_endpoint": f"{issuer}/auth", "token_endpoint": f"{issuer}/token",
            "jwks_uri": f"http://127.0.0.1:{keys_port}/certs", "id_token_signing_alg_values_supported": ["RS256"]})

    discovery_app = web.Application()
    discovery_app.router.add_get("/.well-known/openid-configuration", configuration)
    discovery = await serve(discovery_app)
    issuer = served["issuer"] = f"http://127.0.0.1:{discovery.addresses[0][1]}"
    provider = parse_providers([{"name": "own", "issuer": issuer, "client_id": "tenant-gateway",
                                 "client_secret": "s"}])[0]
    clock = Clock()
    client = ProviderClient(provider, http, clock=clock, refetch_interval=INTERVAL)
    token = signed(issuer)
    keys_server: web.AppRunner | None = None
    try:
        with pytest.raises(ProviderUnavailable) as first:
            await client.verify(token, audiences=("tenant-gateway",), authorized_parties=None)
        assert first.value.status == 503 and first.value.code == "identity_provider_unavailable"
        assert client.jwks_fetches == 1

        # Within the interval: still 503, and the provider is not asked again.
        clock.now += INTERVAL - 1
        with pytest.raises(ProviderUnavailable):
            await client.verify(token, audiences=("tenant-gateway",), authorized_parties=None)
        assert client.jwks_fetches == 1

        async def certs(request: web.Request) -> web.Response:
            return web.json_response({"keys": [JWK]})

        keys_app = web.Application()
        keys_app.router.add_get("/certs", certs)
        keys_server = await serve(keys_app, keys_port)
        clock.now += 1
        identity = await client.verify(token, audiences=("tenant-gateway",), authorized_parties=None)
        assert identity.subject == "u-1" and client.jwks_fetches == 2
    finally:
        if keys_server is not None:
            await keys_server.cleanup()
        await discovery.cleanup()


async def test_a_failing_discovery_is_asked_once_per_interval(http: aiohttp.ClientSession) -> None:
    """Given a provider whose discovery answers 503, when many tokens naming
    it arrive at once and again within the interval, then each is 503 and the
    provider was asked once; after the interval, once more. Once discovery
    works, a later failed refresh keeps the last good document in use."""
    hits: list[int] = []
    failing = {"now": True}

    async def configuration(request: web.Request) -> web.Response:
        hits.append(1)
        if failing["now"]:
            return web.Response(status=503)
        issuer = str(request.url.origin())
        return web.json_response({"issuer": issuer, "authorization_endpoint": f"{issuer}/auth",
                                  "token_endpoint": f"{issuer}/token", "jwks_uri": f"{issuer}/certs"})

    async def certs(request: web.Request) -> web.Response:
        return web.json_response({"keys": [JWK]})

    server, issuer, provider = await provider_serving({"/certs": certs}, configuration)
    clock = Clock()
    client = ProviderClient(provider, http, clock=clock, refetch_interval=INTERVAL, discovery_seconds=3600)
    token = signed(issuer)
    try:
        outcomes = await asyncio.gather(*(client.verify(token, audiences=("tenant-gateway",), authorized_parties=None)
                                          for _ in range(20)), return_exceptions=True)
        assert all(isinstance(outcome, ProviderUnavailable) for outcome in outcomes)
        assert len(hits) == 1
        clock.now += INTERVAL - 1
        with pytest.raises(ProviderUnavailable):
            await client.verify(token, audiences=("tenant-gateway",), authorized_parties=None)
        assert len(hits) == 1

        failing["now"] = False
        clock.now += 1
        assert (await client.verify(token, audiences=("tenant-gateway",), authorized_parties=None)).subject == "u-1"
        assert len(hits) == 2
        failing["now"] = True
        clock.now += 3600
        assert (await client.verify(signed(issuer, sub="u-2"), audiences=("tenant-gateway",),
                                    authorized_parties=None)).subject == "u-2"
        assert len(hits) == 3
    finally:
        await server.cleanup()


@pytest.mark.parametrize("answer", ["plain-http-keys", "redirect"])
async def test_discovery_that_would_leak_the_secret_or_keys_is_refused(http: aiohttp.ClientSession,
                                                                       answer: str) -> None:
    """Given a discovery document naming plain-http addresses off this machine,
    or a discovery address that redirects, when a token is verified, then 503
    and nothing is fetched from the named or redirected-to address."""
    elsewhere: list[str] = []

    async def configuration(request: web.Request) -> web.Response:
        issuer = str(request.url.origin())
        if answer == "redirect":
            raise web.HTTPFound(f"{issuer}/moved")
        return web.json_response({"issuer": issuer, "authorization_endpoint": f"{issuer}/auth",
                                  "token_endpoint": "http://idp.example/token", "jwks_uri": f"{issuer}/certs"})

    async def moved(request: web.Request) -> web.Response:
        elsewhere.append(request.path)
        return web.json_response({})

    server, issuer, provider = await provider_serving({"/moved": moved, "/certs": moved}, configuration)
    client = ProviderClient(provider, http, clock=Clock(), refetch_interval=INTERVAL)
    try:
        with pytest.raises(ProviderUnavailable):
            await client.verify(signed(issuer), audiences=("tenant-gateway",), authorized_parties=None)
        assert elsewhere == []
    finally:
        await server.cleanup()
