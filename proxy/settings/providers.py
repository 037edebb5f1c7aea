"""OIDC providers as configured: parsed and validated once, at start-up (pure).

`GATEWAY_OIDC_PROVIDERS` names a YAML list; the GATEWAY_CONFIG file may hold
the same list under `oidc_providers`. A mistake here stops the gateway from
starting with a message naming the provider and the field: a half-configured
identity provider is worse than none. Client secrets become `Secret`s at
once; `client_secret_file` is read by the settings' I/O shell, not here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from provisioning.secrets import Secret

DEFAULT_SCOPES = ("openid", "email", "profile")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
_KNOWN = frozenset({"name", "issuer", "client_id", "client_secret", "client_secret_file", "display_name",
                    "scopes", "groups_claim", "admin_groups", "allowed_groups", "audiences", "authorized_parties",
                    "ca_file"})


class ProviderConfigError(ValueError):
    """A provider entry the gateway must not start with."""


@dataclass(frozen=True)
class OIDCProvider:
    name: str
    """URL-safe id: the path segment of its login and callback routes."""
    issuer: str
    """Exactly as the provider writes `iss` (no trailing-slash normalising: OIDC compares strings)."""
    client_id: str
    client_secret: Secret | None
    client_secret_file: Path | None = None
    display_name: str = ""
    scopes: tuple[str, ...] = DEFAULT_SCOPES
    groups_claim: str = "groups"
    admin_groups: frozenset[str] = frozenset()
    """Members are administrators; re-read at every sign-in, so removing someone
    from the group at the provider ends their admin rights at their next login."""
    allowed_groups: frozenset[str] | None = None
    """None: every verified user of the provider may sign in."""
    audiences: tuple[str, ...] = ()
    """ID tokens with one of these as `aud` are accepted as bearer credentials.
    Empty means `(client_id,)`, which `accepted_audiences` applies."""
    authorized_parties: frozenset[str] | None = None
    """None: a bearer ID token's `azp` may be any client of the provider (a CI
    identity's own client, which added an accepted audience). A set limits it
    to these and `client_id`."""
    ca_file: Path | None = None

    @property
    def accepted_audiences(self) -> tuple[str, ...]:
        return self.audiences or (self.client_id,)

    @property
    def accepted_parties(self) -> frozenset[str] | None:
        """Who a bearer ID token may be issued to (`azp`); None: any client."""
        if self.authorized_parties is None:
            return None
        return self.authorized_parties | {self.client_id}

    @property
    def label(self) -> str:
        return self.display_name or self.name


def _strings(entry: dict[str, Any], key: str, where: str) -> tuple[str, ...] | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise ProviderConfigError(f"{where}: {key} must be a list of strings")
    return tuple(value)


def _text(entry: dict[str, Any], key: str, where: str, *, required: bool = False) -> str | None:
    value = entry.get(key)
    if value is None or value == "":
        if required:
            raise ProviderConfigError(f"{where}: {key} is required")
        return None
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise ProviderConfigError(f"{where}: {key} must be a string")
    return str(value)


def parse_provider(entry: Any, index: int) -> OIDCProvider:
    where = f"OIDC provider #{index + 1}"
    if not isinstance(entry, dict):
        raise ProviderConfigError(f"{where} must be a mapping")
    name = _text(entry, "name", where, required=True) or ""
    if not _NAME.match(name):
        raise ProviderConfigError(f"{where}: name must be lowercase letters, digits, '-' or '_' (URL-safe)")
    where = f"OIDC provider {name!r}"
    unknown = sorted(set(map(str, entry)) - _KNOWN)
    if unknown:
        raise ProviderConfigError(f"{where}: unknown keys {', '.join(unknown)}")
    issuer = _text(entry, "issuer", where, required=True) or ""
    if not is_secure_url(issuer):
        raise ProviderConfigError(f"{where}: issuer must be an https:// URL (http only on loopback, for development)")
    parts = urlsplit(issuer)  # it splits: is_secure_url said so
    if parts.query or parts.fragment:
        raise ProviderConfigError(f"{where}: issuer must not have a query or fragment")
    secret = _text(entry, "client_secret", where)
    secret_file = _text(entry, "client_secret_file", where)
    if (secret is None) == (secret_file is None):
        raise ProviderConfigError(f"{where}: give exactly one of client_secret and client_secret_file")
    scopes = _strings(entry, "scopes", where) or DEFAULT_SCOPES
    if "openid" not in scopes:
        raise ProviderConfigError(f"{where}: scopes must include openid")
    allowed = _strings(entry, "allowed_groups", where)
    parties = _strings(entry, "authorized_parties", where)
    ca_file = _text(entry, "ca_file", where)
    return OIDCProvider(
        name=name, issuer=issuer, client_id=_text(entry, "client_id", where, required=True) or "",
        client_secret=Secret(secret) if secret is not None else None,
        client_secret_file=Path(secret_file).expanduser() if secret_file else None,
        display_name=_text(entry, "display_name", where) or name, scopes=scopes,
        groups_claim=_text(entry, "groups_claim", where) or "groups",
        admin_groups=frozenset(_strings(entry, "admin_groups", where) or ()),
        allowed_groups=frozenset(allowed) if allowed is not None else None,
        audiences=_strings(entry, "audiences", where) or (),
        authorized_parties=frozenset(parties) if parties is not None else None,
        ca_file=Path(ca_file).expanduser() if ca_file else None,
    )


def is_secure_url(url: str) -> bool:
    """https, or plain http to this machine only (development): the one rule
    for the issuer and every address its discovery document names. Not a
    URL at all (urlsplit refuses an unclosed '[') is not secure either."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in ("127.0.0.1", "localhost", "::1"))


def parse_providers(loaded: Any) -> tuple[OIDCProvider, ...]:
    """The list as YAML loaded it; names must be unique."""
    if loaded is None:
        return ()
    if not isinstance(loaded, list):
        raise ProviderConfigError("the OIDC providers must be a YAML list")
    providers = tuple(parse_provider(entry, index) for index, entry in enumerate(loaded))
    names = [provider.name for provider in providers]
    duplicated = sorted({name for name in names if names.count(name) > 1})
    if duplicated:
        raise ProviderConfigError(f"OIDC provider names must be unique: {', '.join(duplicated)}")
    return providers
