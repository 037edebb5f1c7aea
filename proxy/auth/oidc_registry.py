"""The configured identity providers at run time, and who they let in.

`admit` is the one place that turns a verified identity into a gateway user,
for the browser callback and for bearer ID tokens alike: `allowed_groups`
first, then the user (issuer, subject) names, created or updated with the
email and admin rights the provider states in this token, unless the row
already holds those of a newer one (repositories.sso_user).
`bearer_identity` picks the provider by the token's (unverified) issuer,
then verifies with that provider's keys and accepted audiences: a token of
one organisation's realm is checked against that realm only, and a token
minted for another client fails its audience check. The client that asked
for it (`azp`) may be any of the organisation's clients, a CI identity with
an audience mapper adding the gateway's audience, unless the provider's
`authorized_parties` lists which (its `client_id` always among them).
"""

from __future__ import annotations

from typing import Awaitable, Callable

import aiohttp

from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.errors import NotFound
from provisioning.models import User
from proxy.auth import oidc_tokens
from proxy.auth.oidc_client import ProviderClient
from proxy.auth.oidc_providers import OIDCProvider
from proxy.auth.oidc_tokens import Identity, InvalidIdToken



OnAdmitted = Callable[[User, Identity], Awaitable[None]]
"""What a sign-in changes beyond the user's row (provisioning.members.signed_in:
invitations and group bindings), set once the cluster client exists."""


class OIDCRegistry:
    on_admitted: OnAdmitted | None = None

    def __init__(self, providers: tuple[OIDCProvider, ...], *, refetch_interval: float = 30.0,
                 discovery_seconds: float = 3600.0, timeout_seconds: float = 15.0) -> None:
        timeout = aiohttp.ClientTimeout(total=timeout_seconds, sock_connect=min(5.0, timeout_seconds))
        self._session = aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=32))
        self.clients = {p.name: ProviderClient(p, self._session, refetch_interval=refetch_interval,
                                               discovery_seconds=discovery_seconds)
                        for p in providers}
        self._by_issuer: dict[str, list[ProviderClient]] = {}
        for client in self.clients.values():
            self._by_issuer.setdefault(client.provider.issuer, []).append(client)

    async def close(self) -> None:
        await self._session.close()

    def client(self, name: str) -> ProviderClient:
        found = self.clients.get(name)
        if found is None:
            raise NotFound("no such identity provider", code="unknown_provider")
        return found

    def issues(self, token: str) -> bool:
        """Whether the token claims to come from a configured provider (unverified: routing only)."""
        if len(token) > oidc_tokens.MAX_TOKEN_BYTES:
            return False
        issuer = oidc_tokens.unverified_issuer(token)
        return issuer is not None and issuer in self._by_issuer

    async def bearer_identity(self, token: str) -> tuple[OIDCProvider, Identity]:
        issuer = oidc_tokens.unverified_issuer(token)
        candidates = self._by_issuer.get(issuer or "", [])
        if not candidates:
            raise InvalidIdToken("the token was issued by no configured provider", code="id_token_issuer")
        first_error: InvalidIdToken | None = None
        for client in candidates:
            try:
                provider = client.provider
                return provider, await client.verify(token, audiences=provider.accepted_audiences,
                                                     authorized_parties=provider.accepted_parties)
            except InvalidIdToken as error:
                first_error = first_error or error
        assert first_error is not None
        raise first_error


async def admit(db: Database, provider: OIDCProvider, identity: Identity, on_admitted: OnAdmitted | None) -> User:
    """The gateway user for a verified identity, or 401 if the provider's
    policy keeps them out; then what the sign-in changes (`on_admitted`)."""
    oidc_tokens.check_allowed(provider, identity)
    user = await repo.sso_user(db, provider=provider.name, issuer=identity.issuer, subject=identity.subject,
                               email=identity.email, is_admin=oidc_tokens.is_admin(provider, identity),
                               issued_at=identity.issued_at)
    if user.status != "active":
        raise InvalidIdToken("this account is suspended", code="user_suspended")
    # Invitations and group bindings follow the provider's newest word only:
    # an older ID token (a replica that has not seen it yet) still listing a
    # group the user has left must not make them a member again.
    if on_admitted is not None and await repo.holds_newest_claims(db, user.id, identity.issued_at):
        await on_admitted(user, identity)
    return user
