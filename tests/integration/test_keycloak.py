"""The real identity provider the SSO tests use: Keycloak with two organisations."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import jwt
import pytest

from devstack.keycloak import ADMIN_GROUP, CLIENT_ID, OTHER_CLIENT_ID

pytestmark = pytest.mark.keycloak


def test_both_realms_publish_discovery_with_their_own_issuer(keycloak: Any) -> None:
    for realm in ("org-a", "org-b"):
        url = f"{keycloak.issuer(realm)}/.well-known/openid-configuration"
        with urllib.request.urlopen(url, timeout=30) as answer:
            discovery = json.loads(answer.read())
        assert discovery["issuer"] == keycloak.issuer(realm)
        assert "S256" in discovery["code_challenge_methods_supported"]


def test_id_tokens_carry_groups_verified_email_and_the_client_as_audience(keycloak: Any) -> None:
    claims = jwt.decode(keycloak.password_grant("org-a", "alice")["id_token"], options={"verify_signature": False})
    assert claims["aud"] == CLIENT_ID and claims["iss"] == keycloak.issuer("org-a")
    assert ADMIN_GROUP in claims["groups"] and claims["email_verified"] is True
    other = jwt.decode(keycloak.password_grant("org-a", "bob", OTHER_CLIENT_ID)["id_token"],
                       options={"verify_signature": False})
    assert other["aud"] == OTHER_CLIENT_ID
    unverified = jwt.decode(keycloak.password_grant("org-a", "carol")["id_token"], options={"verify_signature": False})
    assert unverified["email_verified"] is False
