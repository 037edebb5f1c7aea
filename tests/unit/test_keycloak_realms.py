"""The organisations' realms Keycloak imports (devstack.keycloak), checked as data."""

from __future__ import annotations

from devstack.keycloak import ADMIN_GROUP, AUTOMATION_CLIENT_ID, CLIENT_ID, OTHER_CLIENT_ID, organisations, \
    realm_document


def test_two_organisations_each_with_an_admin_group_and_an_unverified_user_somewhere() -> None:
    realms = {spec.name: spec for spec in organisations()}
    assert set(realms) == {"org-a", "org-b"}
    assert all(ADMIN_GROUP in spec.groups for spec in realms.values())
    assert any(not user.email_verified for user in realms["org-a"].users)
    # The same email in both organisations: two people to the gateway.
    emails = [{user.email for user in spec.users} for spec in realms.values()]
    assert emails[0] & emails[1]


def test_realm_document_has_confidential_clients_with_a_groups_claim_in_the_id_token() -> None:
    spec = organisations()[0]
    document = realm_document(spec, {CLIENT_ID: "s1", OTHER_CLIENT_ID: "s2"}, ["https://gw.example/*"])
    clients = {client["clientId"]: client for client in document["clients"]}
    gateway = clients[CLIENT_ID]
    assert gateway["publicClient"] is False and gateway["secret"] == "s1"
    assert gateway["redirectUris"] == ["https://gw.example/*"]
    assert gateway["attributes"]["pkce.code.challenge.method"] == "S256"
    mapper = gateway["protocolMappers"][0]
    assert mapper["config"]["claim.name"] == "groups" and mapper["config"]["id.token.claim"] == "true"
    users = {user["username"]: user for user in document["users"]}
    assert users["carol"]["emailVerified"] is False
    assert f"/{ADMIN_GROUP}" in users["alice"]["groups"]


def test_the_automation_client_adds_the_gateways_audience_and_signs_in_no_browser() -> None:
    document = realm_document(organisations()[0], {CLIENT_ID: "s1", AUTOMATION_CLIENT_ID: "s3"}, ["https://gw/*"])
    robot = {client["clientId"]: client for client in document["clients"]}[AUTOMATION_CLIENT_ID]
    assert robot["standardFlowEnabled"] is False and robot["redirectUris"] == []
    audience = [m for m in robot["protocolMappers"] if m["protocolMapper"] == "oidc-audience-mapper"]
    assert [m["config"]["included.custom.audience"] for m in audience] == [CLIENT_ID]
    assert audience[0]["config"]["id.token.claim"] == audience[0]["config"]["access.token.claim"] == "true"
