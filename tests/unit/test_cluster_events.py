"""The API server's audit events read into the rows the gateway keeps
(provisioning.cluster_events), the timeline's cursor, and the audit
listener's settings. Pure."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

from provisioning.cluster_events import (
    MAX_AUDIT_ID,
    MAX_USER_AGENT,
    NotAnEventList,
    credential_jti,
    event_digest,
    parse_event,
    parse_event_list,
)
from provisioning.db.activity import Position
from provisioning.errors import BadRequest
from proxy.routes.activity import decode_cursor, encode_cursor
from proxy.settings import HostPort, SettingsError, load_settings

AUDIT_ID = "5b0b7e3c-9f5e-4b7a-8f8e-2f4f3b0c1d2e"


def event(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata", "auditID": AUDIT_ID,
        "stage": "ResponseComplete", "requestURI": "/api/v1/namespaces/tenant-a/configmaps", "verb": "create",
        "user": {"username": "system:serviceaccount:tenant-a:member-1", "uid": "u",
                 "groups": ["system:serviceaccounts"],
                 "extra": {"authentication.kubernetes.io/credential-id": ["JTI=abc-123"]}},
        "sourceIPs": ["203.0.113.9", "10.0.0.7"], "userAgent": "kubectl/v1.34.0",
        "objectRef": {"resource": "configmaps", "namespace": "tenant-a", "name": "settings", "apiVersion": "v1"},
        "responseStatus": {"metadata": {}, "code": 201},
        "requestReceivedTimestamp": "2025-06-01T10:00:00.000000Z", "stageTimestamp": "2025-06-01T10:00:00.120000Z",
    }
    base.update(overrides)
    return base


def test_an_event_keeps_its_metadata_the_last_address_and_the_jti() -> None:
    parsed = parse_event(event())
    assert parsed is not None
    assert (parsed.audit_id, parsed.stage, parsed.verb, parsed.resource, parsed.namespace, parsed.name, parsed.code) \
        == (AUDIT_ID, "ResponseComplete", "create", "configmaps", "tenant-a", "settings", 201)
    assert parsed.source_ip == "10.0.0.7"  # the peer the API server saw, not what X-Forwarded-For claimed
    assert parsed.jti == "abc-123" and parsed.username == "system:serviceaccount:tenant-a:member-1"
    assert parsed.time == datetime.datetime(2025, 6, 1, 10, 0, 0, 120000, tzinfo=datetime.timezone.utc)
    assert parsed.received_at == datetime.datetime(2025, 6, 1, 10, 0, 0, tzinfo=datetime.timezone.utc)
    assert parsed.digest == event_digest(event()) and len(parsed.digest) == 32


def test_the_same_event_sent_again_has_the_same_digest_in_any_key_order() -> None:
    """The API server's retry of a batch resends identical events: one row."""
    resent = json.loads(json.dumps(dict(reversed(list(event().items())))))
    resent["user"] = dict(reversed(list(resent["user"].items())))
    assert list(resent) != list(event())
    assert event_digest(resent) == event_digest(event())


def test_bodies_and_annotations_are_not_in_the_digest() -> None:
    """A policy above metadata level puts objects (a Secret's data) in the
    event: they are never hashed, and an event is the same without them."""
    fuller = event(requestObject={"kind": "Secret", "data": {"password": "aHVudGVyMg=="}},
                   responseObject={"kind": "Status"}, annotations={"authorization.k8s.io/decision": "allow"})
    assert event_digest(fuller) == event_digest(event())


@pytest.mark.parametrize("differs", [
    {"requestReceivedTimestamp": "2025-06-01T10:00:00.000001Z"},  # a microsecond later: another request
    {"stageTimestamp": "2025-06-01T10:00:00.120001Z"}, {"stage": "ResponseStarted"}, {"verb": "delete"},
    {"requestURI": "/api/v1/namespaces/tenant-a/configmaps/other"}, {"sourceIPs": ["10.0.0.8"]},
    {"userAgent": "curl/8"}, {"responseStatus": {"metadata": {}, "code": 409}},
    {"objectRef": {"resource": "secrets", "namespace": "tenant-a", "name": "settings", "apiVersion": "v1"}},
    {"user": {"username": "system:serviceaccount:tenant-a:member-2"}},
    {"impersonatedUser": {"username": "someone-else"}},
    {"auditID": "5b0b7e3c-9f5e-4b7a-8f8e-2f4f3b0c1d2f"},
])
def test_two_requests_sharing_a_chosen_audit_id_are_two_events(differs: dict[str, Any]) -> None:
    """A client sets `Audit-ID` to another request's: the events keep that
    ID, and are still told apart by everything else about them."""
    first, second = parse_event(event()), parse_event(event(**differs))
    assert first is not None and second is not None
    assert first.digest != second.digest


@pytest.mark.parametrize("chosen, kept", [
    ("not-a-uuid", "not-a-uuid"), ("", ""), (None, ""), (7, ""), ("a\x00b", "ab"),
    ("x" * 5000, "x" * MAX_AUDIT_ID), ("5B0B7E3C-9F5E-4B7A-8F8E-2F4F3B0C1D2E", "5B0B7E3C-9F5E-4B7A-8F8E-2F4F3B0C1D2E"),
])
def test_any_audit_id_is_kept_bounded_never_a_reason_to_skip(chosen: Any, kept: str) -> None:
    batch = {"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": [event(auditID=chosen)]}
    [parsed] = parse_event_list(batch)
    assert parsed.audit_id == kept


def test_an_over_long_audit_id_cut_the_same_still_leaves_two_requests_apart() -> None:
    long_id = "x" * (MAX_AUDIT_ID + 10)
    one, other = parse_event(event(auditID=long_id + "a")), parse_event(event(auditID=long_id + "b"))
    assert one is not None and other is not None
    assert one.audit_id == other.audit_id and one.digest != other.digest


def test_a_lone_surrogate_from_the_json_still_has_a_digest() -> None:
    strange = json.loads('{"userAgent": "\\ud800"}')
    assert parse_event(event(**strange)) is not None


@pytest.mark.parametrize("extra, jti", [
    ({"authentication.kubernetes.io/credential-id": ["JTI=x"]}, "x"),
    ({"authentication.kubernetes.io/credential-id": ["X509SHA256=ab"]}, None),  # a client certificate
    ({"authentication.kubernetes.io/credential-id": ["JTI=a", "JTI=b"]}, None),
    ({"authentication.kubernetes.io/credential-id": "JTI=x"}, None),
    ({}, None), (None, None), ({"authentication.kubernetes.io/credential-id": ["JTI=" + "x" * 200]}, None),
])
def test_the_jti_is_read_only_from_one_well_formed_credential_id(extra: Any, jti: str | None) -> None:
    assert credential_jti(extra) == jti


def test_untrusted_text_is_bounded_and_never_holds_a_nul() -> None:
    parsed = parse_event(event(userAgent="k\x00" + "a" * 2000, sourceIPs=["not an address"]))
    assert parsed is not None and parsed.user_agent is not None
    assert len(parsed.user_agent) == MAX_USER_AGENT and "\x00" not in parsed.user_agent
    assert parsed.source_ip is None


@pytest.mark.parametrize("broken", [
    {"stage": None}, {"verb": 7}, {"stageTimestamp": "yesterday",
                                                              "requestReceivedTimestamp": None},
])
def test_an_event_without_what_identifies_it_is_skipped_not_the_batch(broken: dict[str, Any]) -> None:
    batch = {"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": [event(**broken), event(), "junk"]}
    assert len(parse_event_list(batch)) == 1


@pytest.mark.parametrize("body", [
    [], "EventList", {"kind": "EventList"}, {"kind": "Event", "apiVersion": "audit.k8s.io/v1"},
    {"kind": "EventList", "apiVersion": "audit.k8s.io/v1beta1", "items": []},
    {"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": {}},
])
def test_what_is_not_an_event_list_is_refused(body: Any) -> None:
    with pytest.raises(NotAnEventList):
        parse_event_list(body)


def test_an_empty_event_list_is_one() -> None:
    assert parse_event_list({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": None}) == []


def test_the_cursor_goes_round_and_a_forged_one_is_refused() -> None:
    position = Position(datetime.datetime(2025, 6, 1, 10, 0, 0, 5, tzinfo=datetime.timezone.utc), "cluster",
                        "00000000000000000042")
    assert decode_cursor(encode_cursor(position)) == position
    for forged in ("", "!!!", "e30", encode_cursor(position)[:-3], "x" * 300,
                   "WyIyMDI1LTA2LTAxIiwib3RoZXIiLCJrIl0"):  # ["2025-06-01","other","k"]
        with pytest.raises(BadRequest):
            decode_cursor(forged)


FILES = {"GATEWAY_AUDIT_TLS_CERT_FILE": "/x/audit.crt", "GATEWAY_AUDIT_TLS_KEY_FILE": "/x/audit.key",
         "GATEWAY_AUDIT_CLIENT_CA": "/x/ca.crt"}


def test_the_audit_listener_is_off_unless_asked_and_takes_its_files_together() -> None:
    assert load_settings({}).audit_listen is None and load_settings({}).audit_retention_days == 30
    on = load_settings({"GATEWAY_AUDIT_LISTEN": "127.0.0.1:9443", **FILES, "GATEWAY_AUDIT_RETENTION_DAYS": "7"})
    assert (on.audit_listen, on.audit_retention_days) == (HostPort("127.0.0.1", 9443), 7)
    for env, words in (({"GATEWAY_AUDIT_LISTEN": "127.0.0.1:9443"}, "GATEWAY_AUDIT_TLS_CERT_FILE"),
                       ({"GATEWAY_AUDIT_LISTEN": "127.0.0.1:9443", **FILES, "GATEWAY_AUDIT_CLIENT_CA": ""}, "empty"),
                       ({"GATEWAY_AUDIT_CLIENT_CA": "/x/ca.crt"}, "GATEWAY_AUDIT_LISTEN is not"),
                       ({"GATEWAY_AUDIT_LISTEN": "127.0.0.1:8080", **FILES}, "port of its own"),
                       ({"GATEWAY_AUDIT_LISTEN": "nowhere", **FILES}, "GATEWAY_AUDIT_LISTEN"),
                       ({"GATEWAY_AUDIT_RETENTION_DAYS": "0"}, "GATEWAY_AUDIT_RETENTION_DAYS")):
        with pytest.raises(SettingsError) as refused:
            load_settings(env)
        assert words in str(refused.value) and "\n" not in str(refused.value)
