"""OIDC's pure parts: provider settings, `next`, and every ID token check.

Tokens here are signed with a key made in the test (a fake provider): the
real Keycloak cannot be made to sign an expired, future-dated, wrong-nonce or
oversized token on cue. The real provider's tokens are used in
tests/integration/test_sso.py and tests/attacks/test_oidc_attacks.py.
"""

from __future__ import annotations

import datetime
import json
import time
from typing import Any

import jwt
import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric import rsa

from provisioning.kubeconfig import render_exec_kubeconfig
from proxy.auth.authenticating import id_token_session_id
from proxy.auth import oidc_flow, oidc_tokens
from proxy.auth.oidc_providers import OIDCProvider, parse_providers
from proxy.auth.oidc_tokens import InvalidIdToken
from proxy.settings import SettingsError, load_settings

ISSUER = "https://idp.example/realms/org-a"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
PUBLIC_JWK = {**json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(KEY.public_key())), "kid": "k1", "alg": "RS256",
              "use": "sig"}
PROVIDER = parse_providers([{"name": "org-a", "issuer": ISSUER, "client_id": "tenant-gateway",
                             "client_secret": "s", "admin_groups": ["admins"]}])[0]


def fake_token(*, header: dict[str, Any] | None = None, **overrides: Any) -> str:
    """Signed by the test's own key (a fake provider)."""
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": "tenant-gateway", "sub": "u-1", "iat": now, "exp": now + 300,
              "nonce": "n-1", "email": "a@org-a.example", "email_verified": True, "groups": ["admins"]}
    claims.update(overrides)
    return jwt.encode({k: v for k, v in claims.items() if v is not None}, KEY, algorithm="RS256",
                      headers={"kid": "k1", **(header or {})})


BROWSER_SIGN_IN = ("tenant-gateway",)
"""What the browser callback accepts as `azp`: the gateway's own client only."""


def verify(token: str, *, nonce: str | None = "n-1", audiences: tuple[str, ...] = ("tenant-gateway",),
           provider: OIDCProvider = PROVIDER,
           authorized_parties: tuple[str, ...] | frozenset[str] | None = BROWSER_SIGN_IN) -> oidc_tokens.Identity:
    return oidc_tokens.verify_id_token(token, jwt.PyJWK(PUBLIC_JWK), "RS256", provider, audiences=audiences,
                                       authorized_parties=authorized_parties,
                                       now=datetime.datetime.now(datetime.timezone.utc), nonce=nonce)


def test_a_good_token_names_the_user_by_issuer_and_subject() -> None:
    identity = verify(fake_token())
    assert (identity.issuer, identity.subject, identity.email) == (ISSUER, "u-1", "a@org-a.example")
    assert oidc_tokens.is_admin(PROVIDER, identity)


@pytest.mark.parametrize("overrides, code", [
    ({"exp": int(time.time()) - 600}, "id_token_expired"),
    ({"iat": int(time.time()) + 3600, "exp": int(time.time()) + 7200}, "id_token_not_yet_valid"),
    ({"nbf": int(time.time()) + 3600}, "id_token_not_yet_valid"),
    ({"iss": "https://idp.example/realms/org-b"}, "id_token_issuer"),
    ({"aud": "other-app"}, "id_token_audience"),
    ({"aud": ["tenant-gateway", "other-app"], "azp": "other-app"}, "id_token_audience"),
    ({"aud": ["tenant-gateway", "other-app"]}, "id_token_audience"),  # several audiences, no azp
    ({"azp": "other-app"}, "id_token_audience"),  # the callback's token is issued to the gateway's client
    ({"nonce": "n-2"}, "id_token_nonce"),
    ({"nonce": None}, "id_token_nonce"),
    ({"email_verified": False}, "email_not_verified"),
    ({"email_verified": None}, "email_not_verified"),
    ({"sub": None}, "invalid_id_token"),
    ({"exp": None}, "invalid_id_token"),
    ({"groups": ["g" * 40] * 1000}, "id_token_too_large"),
    ({"email": "a" * 2000 + "@x.example"}, "id_token_too_large"),
])
def test_each_bad_claim_is_refused_with_its_own_code(overrides: dict[str, Any], code: str) -> None:
    with pytest.raises(InvalidIdToken) as refused:
        verify(fake_token(**overrides))
    assert refused.value.code == code and refused.value.status == 401


@pytest.mark.parametrize("header, overrides", [
    ({"typ": "at+jwt"}, {}),  # RFC 9068
    ({"typ": "application/at+JWT"}, {}),
    ({"typ": "logout+jwt"}, {}),
    ({"typ": 1}, {}),
    ({}, {"typ": "Bearer"}),  # Keycloak's access token
    ({}, {"typ": "Refresh"}),
    ({}, {"typ": None, "scope": "openid email profile"}),  # a generic access token names its scopes
    ({}, {"scp": ["user.read"]}),  # Entra ID, Okta
])
def test_an_access_token_is_not_an_id_token_whoever_it_was_issued_to(header: dict[str, Any],
                                                                       overrides: dict[str, Any]) -> None:
    """Given a token with an accepted audience that says it is an access (or other) token,
    when it is presented as a bearer credential or at the callback, then it is refused."""
    token = fake_token(header=header, **overrides)
    for parties in (None, BROWSER_SIGN_IN):
        with pytest.raises(InvalidIdToken) as refused:
            verify(token, authorized_parties=parties)
        assert refused.value.code == "not_an_id_token" and refused.value.status == 401


@pytest.mark.parametrize("header, overrides", [
    ({}, {}), ({"typ": "JWT"}, {}), ({"typ": "application/jwt"}, {}), ({"typ": "JWT"}, {"typ": "ID"}),
])
def test_an_id_token_of_any_provider_is_one(header: dict[str, Any], overrides: dict[str, Any]) -> None:
    """Keycloak's (`typ: ID`) and a generic provider's (no type at all, or JOSE `JWT`)."""
    assert verify(fake_token(header=header, **overrides)).subject == "u-1"


def test_a_bearer_id_token_of_another_client_of_the_organisation_is_accepted() -> None:
    """A CI identity: its own client asked for the token, and an audience mapper
    added the gateway's audience. Accepted as a bearer credential (any `azp`),
    unless the provider's `authorized_parties` leaves that client out."""
    ci = fake_token(aud=["ci-robot", "tenant-gateway"], azp="ci-robot")
    assert verify(ci, authorized_parties=None).subject == "u-1"
    listed = parse_providers([{"name": "org-a", "issuer": ISSUER, "client_id": "tenant-gateway",
                               "client_secret": "s", "authorized_parties": ["ci-robot"]}])[0]
    assert listed.accepted_parties == {"ci-robot", "tenant-gateway"}  # type: ignore[comparison-overlap]
    assert verify(ci, authorized_parties=listed.accepted_parties).subject == "u-1"
    assert verify(fake_token(), authorized_parties=listed.accepted_parties).subject == "u-1"  # its own client
    others = parse_providers([{"name": "org-a", "issuer": ISSUER, "client_id": "tenant-gateway",
                               "client_secret": "s", "authorized_parties": ["deploy-bot"]}])[0]
    with pytest.raises(InvalidIdToken) as refused:
        verify(ci, authorized_parties=others.accepted_parties)
    assert refused.value.code == "id_token_audience"
    assert PROVIDER.accepted_parties is None  # unset: any client of the organisation
    # Still only with an accepted audience: the CI client's token for itself alone is refused.
    with pytest.raises(InvalidIdToken) as refused:
        verify(fake_token(aud="ci-robot", azp="ci-robot"), authorized_parties=None)
    assert refused.value.code == "id_token_audience"


def test_the_identity_carries_the_tokens_issue_time() -> None:
    """repositories.sso_user orders a user's tokens by it."""
    issued = int(time.time()) - 100
    identity = verify(fake_token(iat=issued))
    assert identity.issued_at == datetime.datetime.fromtimestamp(issued, datetime.timezone.utc)


def test_an_issue_time_the_platform_cannot_hold_is_refused_not_a_crash() -> None:
    with pytest.raises(InvalidIdToken) as refused:
        verify(fake_token(iat=-(10**20)))
    assert refused.value.code == "id_token_claims"


def test_a_token_signed_by_another_key_is_refused() -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = jwt.encode({"iss": ISSUER}, other, algorithm="RS256", headers={"kid": "k1"})
    with pytest.raises(InvalidIdToken):
        verify(forged)


def test_a_respelled_token_verifies_and_is_still_the_same_session() -> None:
    """Given a token and its signature written another way (padding), when
    both are verified, then both pass and name one session: logging one out
    ends the other. A token with other claims is another session."""
    token = fake_token()
    respelled = token + "=="
    assert verify(respelled).subject == verify(token).subject
    assert id_token_session_id(respelled) == id_token_session_id(token)
    assert id_token_session_id(fake_token(sub="someone-else")) != id_token_session_id(token)


def test_an_enormous_token_is_refused_before_it_is_parsed() -> None:
    with pytest.raises(InvalidIdToken) as refused:
        oidc_tokens.unverified_header("e" * (oidc_tokens.MAX_TOKEN_BYTES + 1))
    assert refused.value.code == "id_token_too_large"


@pytest.mark.parametrize("alg", ["none", "HS256", "HS512", "RS1", None])
def test_none_and_hmac_are_never_accepted_even_when_advertised(alg: str | None) -> None:
    allowed = oidc_tokens.allowed_algorithms(["RS256", "HS256", "none", "HS512"])
    assert allowed == {"RS256"}
    with pytest.raises(InvalidIdToken):
        oidc_tokens.check_algorithm({"alg": alg}, allowed)


def test_the_headers_algorithm_must_be_the_keys() -> None:
    with pytest.raises(InvalidIdToken):
        oidc_tokens.verify_id_token(fake_token(), jwt.PyJWK(PUBLIC_JWK), "PS256", PROVIDER,
                                    audiences=("tenant-gateway",), authorized_parties=None,
                                    now=datetime.datetime.now(datetime.timezone.utc))


def test_jwks_keeps_signing_keys_only() -> None:
    document = {"keys": [PUBLIC_JWK, {**PUBLIC_JWK, "kid": "enc", "use": "enc"},
                         {"kty": "oct", "kid": "sym", "k": "c2VjcmV0"}, {"kid": "broken", "kty": "RSA"}, "junk"]}
    assert set(oidc_tokens.jwks_keys(document)) == {"k1"}
    assert oidc_tokens.jwks_keys("not a document") == {}


@pytest.mark.parametrize("given, kept", [
    ("/workspaces?x=1", "/workspaces?x=1"), (None, "/"), ("", "/"),
    ("https://evil.example/", "/"), ("//evil.example/x", "/"), ("/\\evil.example", "/"),
    ("javascript:alert(1)", "/"), ("/ok\r\nSet-Cookie: x", "/"), ("/" + "a" * 5000, "/"),
])
def test_next_is_a_path_on_the_gateway_or_nothing(given: str | None, kept: str) -> None:
    assert oidc_flow.safe_next(given) == kept


def test_pkce_challenge_is_s256_of_the_verifier() -> None:
    start = oidc_flow.new_login()
    url = oidc_flow.authorization_url("https://idp.example/auth", PROVIDER, start, "https://gw/cb")
    assert f"code_challenge={start.code_challenge}" in url and "code_challenge_method=S256" in url
    assert start.code_verifier not in url


PROVIDERS_YAML = yaml.safe_dump([{"name": "org-a", "issuer": ISSUER, "client_id": "c", "client_secret": "s"}])


def test_settings_read_providers_from_their_file_or_the_config_file() -> None:
    from_file = load_settings({}, file_texts={"GATEWAY_OIDC_PROVIDERS": PROVIDERS_YAML})
    assert [p.name for p in from_file.oidc_providers] == ["org-a"]
    assert from_file.oidc_providers[0].accepted_audiences == ("c",)
    assert "'***'" in repr(from_file.oidc_providers[0])
    config = yaml.safe_dump({"GATEWAY_PASSWORD_LOGIN": "false", "oidc_providers": yaml.safe_load(PROVIDERS_YAML)})
    from_config = load_settings({}, config)
    assert from_config.password_login is False and from_config.oidc_providers[0].issuer == ISSUER


@pytest.mark.parametrize("entry, says", [
    ({"name": "Org A", "issuer": ISSUER, "client_id": "c", "client_secret": "s"}, "URL-safe"),
    ({"name": "a", "issuer": "http://idp.example", "client_id": "c", "client_secret": "s"}, "https"),
    ({"name": "a", "issuer": "https://[idp.example", "client_id": "c", "client_secret": "s"}, "https"),  # not a URL
    ({"name": "a", "issuer": ISSUER, "client_id": "c"}, "client_secret"),
    ({"name": "a", "issuer": ISSUER, "client_id": "c", "client_secret": "s", "scopes": ["email"]}, "openid"),
    ({"name": "a", "issuer": ISSUER, "client_id": "c", "client_secret": "s", "surprise": 1}, "unknown keys"),
    ({"name": "a", "issuer": ISSUER, "client_id": "c", "client_secret": "s", "authorized_parties": [1]},
     "authorized_parties must be a list of strings"),
])
def test_a_bad_provider_entry_stops_start_up_naming_the_field(entry: dict[str, Any], says: str) -> None:
    with pytest.raises(SettingsError, match=says):
        load_settings({}, file_texts={"GATEWAY_OIDC_PROVIDERS": yaml.safe_dump([entry])})


def test_an_exec_kubeconfig_holds_no_token() -> None:
    document = yaml.safe_load(render_exec_kubeconfig(server="https://k", ca_base64="QQ==", namespace="tenant-x",
                                                     gateway="https://gw.example", workspace_id="w-1"))
    user = document["users"][0]["user"]
    assert "token" not in user
    assert user["exec"]["args"] == ["credential", "--gateway", "https://gw.example", "--workspace", "w-1"]
    assert user["exec"]["apiVersion"] == "client.authentication.k8s.io/v1"
    assert user["exec"]["provideClusterInfo"] is True  # the plugin checks the cluster kubectl calls
