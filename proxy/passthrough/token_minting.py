"""The proxy's tokens, minted for the token cache (proxy.passthrough.token_cache)
and recorded: the token's `jti` (never the token), the person it acts for,
their workspace, the cluster and the expiry (provisioning.db.proxy_tokens).

Why the jti rather than the ServiceAccount's name in the cluster's audit
events (`system:serviceaccount:<ns>:member-<id>`): the name says which
account acted, not who, nor through what. A gateway admin who is not a
member acts as the owner's account; a member's account may be used by a
token its member minted themselves, or a kubeconfig. A jti names one token,
and the proxy minted this one for one person: exact.

The row is committed before the token is handed to the cache, so no
request made with it, and so no audit event naming it, can come before
the row the event is joined to. A token that cannot be recorded (the
database unreachable, the workspace gone meanwhile) is not used: the fill
fails, every waiter gets the error, nothing is cached (the cache's rule),
and the next request tries again. Tokens already cached go on serving.

Recorded only where the cluster's audit is received (GATEWAY_AUDIT_LISTEN):
elsewhere no event will ever be joined to the row, and nothing sweeps it.
A token without a jti (an API server before ServiceAccountTokenJTI) is not
recorded either: its events carry none to join.
"""

from __future__ import annotations

import uuid

from provisioning.db import proxy_tokens as proxy_token_rows
from provisioning.db.pool import Database
from provisioning.db.proxy_tokens import ProxyToken
from provisioning.errors import NotFound
from provisioning.kube.client import KubeApi
from provisioning.kube.tokens import request_token
from provisioning.models import IssuedToken
from proxy.passthrough.token_cache import TokenKey


async def mint(kube: KubeApi, key: TokenKey, ttl_seconds: int, record_in: Database | None) -> IssuedToken:
    """A token of `key`'s account, recorded in `record_in` (None: not recorded)
    as acting for `key`'s person before it is returned."""
    issued = await request_token(kube, key.namespace, key.service_account, ttl_seconds)
    if record_in is None or issued.credential_id is None:
        return issued
    recorded = await proxy_token_rows.record(record_in, ProxyToken(
        jti=issued.credential_id, cluster=key.cluster, user_id=uuid.UUID(int=key.person), namespace=key.namespace,
        service_account=key.service_account, expires_at=issued.expires_at))
    if not recorded:
        raise NotFound("no such workspace")
    return issued
