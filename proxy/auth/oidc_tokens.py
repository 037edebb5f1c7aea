"""ID token checks and the sign-in policy (pure: token, keys and time in; identity out).

What is refused, and why:
- an algorithm the provider does not advertise, `none`, or any HMAC one: the
  verification key is public, so an HMAC "signature" made with it proves
  nothing (algorithm confusion); the header's `alg` must also be the key's;
- a token that is not an ID token (`check_is_id_token`): an access token
  with an accepted audience proves a client may call an API, not who signed in;
- a wrong `iss` (another organisation's realm), an `aud` this use does not
  accept (a token minted for another client), an authorised party (`azp`)
  this use does not accept, a missing or stale `exp`, an `iat` or `nbf` in
  the future, a `nonce` other than the one this browser's login sent;
- `email_verified` not true, and tokens or claims far larger than any real
  provider sends (a 16 KiB token, a thousand groups).
Only `InvalidIdToken` (401) leaves this module; its messages say which check
failed, never the token or a claim's value.
"""

from __future__ import annotations

import datetime
import hmac
import json
from dataclasses import dataclass
from typing import Any, Collection, Iterable, Mapping

import jwt

from provisioning.errors import Unauthenticated
from proxy.auth.oidc_providers import OIDCProvider

ASYMMETRIC_ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
                                   "ES256", "ES384", "ES512", "EdDSA"})
MAX_TOKEN_BYTES = 16 * 1024
MAX_GROUPS = 500
MAX_CLAIM_TEXT = 1024
LEEWAY_SECONDS = 30


class InvalidIdToken(Unauthenticated):
    code = "invalid_id_token"
    message = "the identity provider's token was refused"


@dataclass(frozen=True)
class Identity:
    """Who the provider says signed in. Keyed by (issuer, subject), never email."""

    provider: str
    issuer: str
    subject: str
    email: str
    groups: frozenset[str]
    expires_at: datetime.datetime
    issued_at: datetime.datetime
    """The token's `iat`: a user's row takes email and admin rights only from
    a token at least as new as the one it took them from last (repositories.sso_user)."""


def allowed_algorithms(advertised: Iterable[Any]) -> frozenset[str]:
    """What the provider's discovery advertises, minus `none` and every HMAC algorithm."""
    return frozenset(str(alg) for alg in advertised) & ASYMMETRIC_ALGORITHMS


def unverified_header(token: str) -> dict[str, Any]:
    """The header, for choosing the key; nothing in it is trusted beyond that."""
    if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_BYTES:
        raise InvalidIdToken("the token is missing or too large", code="id_token_too_large"
                             if isinstance(token, str) and len(token) > MAX_TOKEN_BYTES else "invalid_id_token")
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        raise InvalidIdToken("the token is not a signed JWT") from None
    return header


def unverified_issuer(token: str) -> str | None:
    """`iss` before verification: only to pick which provider's keys to verify with."""
    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except (jwt.PyJWTError, ValueError):
        return None
    issuer = claims.get("iss")
    return issuer if isinstance(issuer, str) else None


def check_algorithm(header: Mapping[str, Any], allowed: frozenset[str]) -> str:
    alg = header.get("alg")
    if not isinstance(alg, str) or alg not in allowed:
        raise InvalidIdToken("the token's signing algorithm is not accepted", code="id_token_algorithm")
    return alg


def _text_claim(claims: Mapping[str, Any], name: str, limit: int = MAX_CLAIM_TEXT) -> str:
    value = claims.get(name)
    if not isinstance(value, str) or not value:
        raise InvalidIdToken(f"the token has no {name}", code="id_token_claims")
    if len(value) > limit:
        raise InvalidIdToken(f"the token's {name} is too large", code="id_token_too_large")
    return value


def _groups(claims: Mapping[str, Any], claim: str) -> frozenset[str]:
    value = claims.get(claim, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(group, str) for group in value):
        raise InvalidIdToken("the token's groups claim is malformed", code="id_token_claims")
    if len(value) > MAX_GROUPS or any(len(group) > MAX_CLAIM_TEXT for group in value):
        raise InvalidIdToken("the token's groups claim is too large", code="id_token_too_large")
    return frozenset(value)


_JWT_TYPES = frozenset({"jwt", "application/jwt"})


def check_is_id_token(header: Mapping[str, Any], claims: Mapping[str, Any]) -> None:
    """Refuse a token that says it is anything but an ID token. Pure.

    Providers sign access tokens with the same keys, and an audience mapper
    can put the gateway's audience in them. So, for any provider:
    - a JOSE `typ` other than JWT (RFC 9068 access tokens say `at+jwt`; logout
      and event tokens have types of their own) is refused;
    - a `typ` claim other than `ID` is refused (Keycloak writes `ID` in ID
      tokens, `Bearer` in access tokens, `Refresh` and `Logout` in others);
    - a `scope` or `scp` claim is refused: an access token names the scopes it
      grants (Keycloak, Auth0, Okta, Entra ID), an ID token never does.
    """
    kind = header.get("typ")
    if kind is not None and (not isinstance(kind, str) or kind.lower() not in _JWT_TYPES):
        raise InvalidIdToken("the token is not an ID token (its header names another type)", code="not_an_id_token")
    if "typ" in claims and claims["typ"] != "ID":
        raise InvalidIdToken("the token is not an ID token (its typ claim names another kind)", code="not_an_id_token")
    if "scope" in claims or "scp" in claims:
        raise InvalidIdToken("the token is not an ID token (it grants scopes: an access token)",
                             code="not_an_id_token")


def check_authorized_party(claims: Mapping[str, Any], parties: Collection[str] | None) -> None:
    """The party the token was issued to (`azp`) must be one of `parties`; None accepts any. Pure.

    The browser sign-in passes the gateway's own client id (OIDC core 3.1.3.7:
    a token with several audiences must name its `azp`, and it must be the
    client). Bearer tokens pass the provider's `authorized_parties`, or None:
    an ID token of any of the organisation's clients (a CI identity) whose
    `aud` holds an accepted audience is accepted.
    """
    if parties is None:
        return
    audience = claims.get("aud")
    party = claims.get("azp")
    if party is None and isinstance(audience, list) and len(audience) == 1:
        party = audience[0]
    elif party is None and isinstance(audience, str):
        party = audience
    if not isinstance(party, str) or party not in parties:
        raise InvalidIdToken("the token was issued for another party", code="id_token_audience")


def verify_id_token(token: str, key: jwt.PyJWK, algorithm: str, provider: OIDCProvider, *,
                    audiences: Iterable[str], authorized_parties: Collection[str] | None,
                    now: datetime.datetime, nonce: str | None = None) -> Identity:
    """Signature, issuer, audience, authorised party, kind, times, nonce and
    verified email; `algorithm` has passed `check_algorithm` and `key` is the
    provider's key for the token's kid."""
    if key.algorithm_name != algorithm:
        raise InvalidIdToken("the token's algorithm does not match its key", code="id_token_algorithm")
    accepted = list(audiences)
    try:
        claims = jwt.decode(
            token, key, algorithms=[algorithm], audience=accepted, issuer=provider.issuer,
            leeway=LEEWAY_SECONDS, options={"require": ["iss", "aud", "exp", "iat", "sub"], "verify_iat": True},
        )
        # PyJWT compares with its own clock; the injected one decides here too.
        _check_times(claims, now)
    except jwt.ExpiredSignatureError:
        raise InvalidIdToken("the token has expired", code="id_token_expired") from None
    except jwt.ImmatureSignatureError:
        raise InvalidIdToken("the token is not valid yet", code="id_token_not_yet_valid") from None
    except jwt.InvalidIssuerError:
        raise InvalidIdToken("the token was issued by another provider", code="id_token_issuer") from None
    except jwt.InvalidAudienceError:
        raise InvalidIdToken("the token was issued for another audience", code="id_token_audience") from None
    except jwt.InvalidSignatureError:
        raise InvalidIdToken("the token's signature does not verify", code="id_token_signature") from None
    except (jwt.PyJWTError, ValueError, TypeError):
        raise InvalidIdToken("the token is malformed or lacks required claims") from None
    check_is_id_token(jwt.get_unverified_header(token), claims)  # the header verified with the claims
    check_authorized_party(claims, authorized_parties)
    if nonce is not None:
        given = claims.get("nonce")
        if not isinstance(given, str) or not hmac.compare_digest(given.encode(), nonce.encode()):
            raise InvalidIdToken("the token does not belong to this sign-in", code="id_token_nonce")
    verified = claims.get("email_verified")
    if verified is not True and verified != "true":
        raise InvalidIdToken("the provider has not verified this email address", code="email_not_verified")
    return Identity(
        provider=provider.name, issuer=provider.issuer, subject=_text_claim(claims, "sub", 255),
        email=_text_claim(claims, "email", 254), groups=_groups(claims, provider.groups_claim),
        expires_at=_instant(claims, "exp"), issued_at=_instant(claims, "iat"),
    )


def _instant(claims: Mapping[str, Any], name: str) -> datetime.datetime:
    """A time claim (a number, checked by `_check_times`) as a datetime; one
    too far from now for the platform's clock is refused, not a 500."""
    try:
        return datetime.datetime.fromtimestamp(int(claims[name]), datetime.timezone.utc)
    except (OverflowError, OSError, ValueError):
        raise InvalidIdToken(f"the token's {name} is out of range", code="id_token_claims") from None


def _check_times(claims: Mapping[str, Any], now: datetime.datetime) -> None:
    stamp = now.timestamp()
    for name in ("exp", "iat", "nbf"):
        if name in claims and (not isinstance(claims[name], (int, float)) or isinstance(claims[name], bool)):
            raise jwt.InvalidTokenError(name)
    if claims["exp"] <= stamp - LEEWAY_SECONDS:
        raise jwt.ExpiredSignatureError("exp")
    if claims["iat"] > stamp + LEEWAY_SECONDS or claims.get("nbf", 0) > stamp + LEEWAY_SECONDS:
        raise jwt.ImmatureSignatureError("iat")


def is_admin(provider: OIDCProvider, identity: Identity) -> bool:
    return bool(provider.admin_groups & identity.groups)


def check_allowed(provider: OIDCProvider, identity: Identity) -> None:
    if provider.allowed_groups is not None and not provider.allowed_groups & identity.groups:
        raise InvalidIdToken("you are not in a group allowed to use this gateway", code="group_not_allowed")


def jwks_keys(document: Any) -> dict[str, jwt.PyJWK]:
    """Signing keys by kid from a JWKS document; encryption keys and keys PyJWT
    cannot use (or without a kid, which no rotation-safe provider omits) are left out."""
    found: dict[str, jwt.PyJWK] = {}
    keys = document.get("keys") if isinstance(document, dict) else None
    for entry in keys if isinstance(keys, list) else []:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig" or not isinstance(entry.get("kid"), str):
            continue
        if entry.get("kty") == "oct" or entry.get("alg") not in ASYMMETRIC_ALGORITHMS | {None}:
            continue  # a symmetric key in a JWKS is never ours to verify with
        try:
            found[entry["kid"]] = jwt.PyJWK(entry)
        except (jwt.PyJWTError, ValueError, TypeError, KeyError):
            continue
    return found


def parse_json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None
