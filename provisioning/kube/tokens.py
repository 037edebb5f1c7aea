"""TokenRequest: the only way the gateway obtains a tenant credential."""

from __future__ import annotations

import base64
import datetime
import json

from provisioning.errors import ClusterUnavailable, UpstreamError
from provisioning.kube.client import KubeApi
from provisioning.manifests import token_request
from provisioning.models import IssuedToken

TOKEN_CACHE_GRACE_SECONDS = 15.0
"""The API server's token-authentication cache (~10 s), plus clock-skew
margin: a token of a deleted ServiceAccount may authenticate that long, and
RBAC matches an account by name, so a new account of the same name is bound
only after it (suspension.resume, members.seat)."""


def credential_id(token: str) -> str | None:
    """The token's `jti`, read without verification: it only labels an audit
    row, and the API server that signed the token is the one that checks it."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):
        return None
    jti = claims.get("jti") if isinstance(claims, dict) else None
    return str(jti) if jti else None


async def request_token(kube: KubeApi, namespace: str, service_account: str, ttl_seconds: int,
                        audiences: list[str] | None = None, bound_to: dict[str, str] | None = None) -> IssuedToken:
    """Mint a token; the expiry is the one the API server granted, which may be
    shorter than asked (it shortens rather than refuses above its maximum).
    `bound_to` (a Secret's name and uid): the token lives only while it does.

    A token the API server would not mint (its ServiceAccount being
    replaced, a refusal, an answer without a token) is the contract's 503
    for every caller, a kubeconfig download as much as a proxied request:
    nothing the client can fix, and the API server's words (which name the
    gateway's own account) are not the client's to read."""
    try:
        answer = await kube.create(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
            token_request(ttl_seconds, audiences, bound_to),
        )
        status = answer.get("status") or {}
        token, expiry = status.get("token"), status.get("expirationTimestamp")
        if not token or not expiry:
            raise UpstreamError("the API server returned a TokenRequest without a token")
    except UpstreamError as error:
        raise ClusterUnavailable("the API server did not issue a token; retry later") from error
    expires_at = datetime.datetime.fromisoformat(str(expiry).replace("Z", "+00:00"))
    return IssuedToken(token=token, expires_at=expires_at, credential_id=credential_id(token))
