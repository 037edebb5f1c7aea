"""What a session may do. Pure.

A browser's session (password or SSO) and a bearer ID token may do all its
user may. A command line's session, from device sign-in, may only mint
credentials for its user's own workspaces and end itself: it was approved in
a browser by someone who may have been talked into typing a code someone
else's command line showed (RFC 8628 section 5.4, remote phishing), so a
phished approval must hand over no administrator's rights, no suspension, no
console writes and no /k8s/ proxying, whoever approved it.

Enforced in two places that every request passes: `proxy.routes.common.principal`
(every API route asks it who is calling) and `Gate.decide` (the /k8s/ proxy's
one decision, for both its paths).
"""

from __future__ import annotations

import dataclasses

from provisioning.models import User

FULL = "full"
"""Everything the user may do (a browser's or a script's session)."""
CREDENTIALS = "credentials"
"""Only the credential routes (a device sign-in's session)."""
SCOPES = frozenset({FULL, CREDENTIALS})

CREDENTIAL_ROUTES = frozenset({
    ("GET", "/api/v1/workspaces/credentials/kubeconfig"),
    ("GET", "/api/v1/workspaces/credentials/token"),
    # `tenant-gateway logout`, and `login` ending the session it replaces.
    ("POST", "/api/v1/auth/logout"),
})
"""(method, route as declared) a credentials-only session may call."""

REFUSAL_CODE = "credentials_only"
REFUSAL = ("this is a command line's session (device sign-in): it can only mint workspace credentials; "
           "sign in to the console for anything else")


def allows_route(scope: str, method: str, route: str) -> bool:
    """Whether a session of `scope` may call `method` on the API route declared as `route`."""
    return scope == FULL or (scope == CREDENTIALS and (method, route) in CREDENTIAL_ROUTES)


def allows_proxy(scope: str) -> bool:
    """Whether a session of `scope` may go through the /k8s/ proxy: not a
    command line's, which holds workspace credentials of its own instead."""
    return scope == FULL


def acting_user(user: User, scope: str) -> User:
    """The user as a session of `scope` acts: a credentials-only session
    never carries its user's administrator flag, so no check that reads it
    (another tenant's workspace, every workspace) can open up to it, even
    on a route that lets the session in."""
    if scope == FULL or not user.is_admin:
        return user
    return dataclasses.replace(user, is_admin=False)
