"""An identity provider whose keys cannot be fetched is unavailable (503), not a forger (401).

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

import json
import time
from typing import AsyncIterator

import aiohttp
import jwt
import pytest
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa

from devstack.processes import free_port
from proxy.auth.oidc_client import ProviderClient, ProviderUnavailable
from proxy.auth.oidc_providers import parse_providers

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
    now = int(time.time())
    token = jwt.encode({"iss": issuer, "aud": "tenant-gateway", "sub": "u-1", "iat": now, "exp": now + 300,
                        "email": "a@own.example", "email_verified": True}, KEY, algorithm="RS256",
                       headers={"kid": "k1"})
    keys_server: web.AppRunner | None = None
    try:
        with pytest.raises(ProviderUnavailable) as first:
            await client.verify(token, audiences=("tenant-gateway",))
        assert first.value.status == 503 and first.value.code == "identity_provider_unavailable"
        assert client.jwks_fetches == 1

        # Within the interval: still 503, and the provider is not asked again.
        clock.now += INTERVAL - 1
        with pytest.raises(ProviderUnavailable):
            await client.verify(token, audiences=("tenant-gateway",))
        assert client.jwks_fetches == 1

        async def certs(request: web.Request) -> web.Response:
            return web.json_response({"keys": [JWK]})

        keys_app = web.Application()
        keys_app.router.add_get("/certs", certs)
        keys_server = await serve(keys_app, keys_port)
        clock.now += 1
        identity = await client.verify(token, audiences=("tenant-gateway",))
        assert identity.subject == "u-1" and client.jwks_fetches == 2
    finally:
        if keys_server is not None:
            await keys_server.cleanup()
        await discovery.cleanup()
