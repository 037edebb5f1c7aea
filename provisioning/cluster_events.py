"""The API server's audit events, read: an `audit.k8s.io/v1` EventList in,
the rows the gateway keeps out. Pure.

Only metadata is kept, bounded: verb, resource, subresource, namespace,
name, response code, user agent (untrusted, cut to 512 characters), the
last source address (the one the API server saw; earlier ones come from
X-Forwarded-For, which the client wrote), the user name and the token's
`jti` from user extra `authentication.kubernetes.io/credential-id`
(`JTI=<jti>`). Request and response bodies and annotations are never
read, groups only into the digest below. Joining the jti to a person is the database's work, at write
time (provisioning.db.cluster_events).

The auditID is kept as text, whatever it is: the API server takes it from
the request's `Audit-ID` header when the client sends one (a downloaded
kubeconfig talks to it directly), so it is the client's to choose, need
not be a UUID and may repeat another request's. It is therefore never a
reason to skip an event, nor what tells one event from another: that is
the event's `digest`, a SHA-256 of the fields that make it one stage of one
request (IDENTIFYING_FIELDS, the response's code of its status) in
canonical JSON. The API server's retry of a batch resends identical
events, which share it; two requests sharing a chosen ID differ in
something (their received time, to the microsecond, if nothing else), so
they do not. Bodies and annotations are left out: a policy above metadata
level would put a Secret's data in them, and they tell no two requests
apart that the rest does not.

An event whose other required fields (stage, verb, a time: the API
server's own) are missing or malformed is skipped, not the whole batch
refused: the API server would retry a refused batch five times and then
lose every event in it. A body that is not an EventList at all is refused
(`NotAnEventList`): it is not the API server speaking.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import json
from dataclasses import dataclass
from typing import Any

API_VERSION = "audit.k8s.io/v1"
CREDENTIAL_ID_KEY = "authentication.kubernetes.io/credential-id"
_JTI_PREFIX = "JTI="
MAX_USER_AGENT = 512
MAX_AUDIT_ID = 128
"""A UUID is 36 characters; a client-chosen ID (the API server keeps it
uncut) is cut to this."""
_MAX_NAME = 253
IDENTIFYING_FIELDS = ("auditID", "stage", "requestReceivedTimestamp", "stageTimestamp", "verb", "requestURI", "user",
                      "impersonatedUser", "sourceIPs", "userAgent", "objectRef")
"""With responseStatus.code, what `event_digest` covers: who asked what, from
where, when, and how it ended."""
_MAX_USERNAME = 512
_MAX_JTI = 128
_MAX_SHORT = 32


class NotAnEventList(ValueError):
    """The body is not an `audit.k8s.io/v1` EventList."""


@dataclass(frozen=True)
class ClusterEvent:
    """One stage of one request the API server audited, as stored."""

    audit_id: str
    """As the API server wrote it (a client may have chosen it), cut to MAX_AUDIT_ID."""
    digest: bytes
    """SHA-256 of its identifying fields (`event_digest`): what makes it this event and no other."""
    stage: str
    time: datetime.datetime
    received_at: datetime.datetime | None
    """When the API server received the request: the same in each of its stages."""
    verb: str
    resource: str | None
    subresource: str | None
    namespace: str | None
    name: str | None
    code: int | None
    user_agent: str | None
    source_ip: str | None
    username: str | None
    jti: str | None

    def record(self) -> tuple[Any, ...]:
        """The row in the column order of `COLUMNS`, for COPY."""
        return (self.audit_id, self.digest, self.stage, self.time, self.received_at, self.verb, self.resource,
                self.subresource, self.namespace, self.name, self.code, self.user_agent, self.source_ip,
                self.username, self.jti)


COLUMNS = ("audit_id_text", "event_digest", "stage", "time", "received_at", "verb", "resource", "subresource",
           "namespace", "name", "code", "user_agent", "source_ip", "username", "jti")


def parse_event_list(document: Any) -> list[ClusterEvent]:
    """The events of an EventList worth keeping; NotAnEventList if it is none."""
    if not isinstance(document, dict) or document.get("kind") != "EventList" \
            or document.get("apiVersion") != API_VERSION or not isinstance(document.get("items", []) if document.get("items") is not None else [], list):
        raise NotAnEventList(f"the body must be an {API_VERSION} EventList")
    events = (parse_event(item) for item in document.get("items") or [])
    return [event for event in events if event is not None]


def parse_event(item: Any) -> ClusterEvent | None:
    """One event, or None when it lacks what the API server always writes
    (stage, verb, a time). Its auditID, which a client may choose, is kept
    whatever it is."""
    if not isinstance(item, dict):
        return None
    stage, verb = _text(item.get("stage"), _MAX_SHORT), _text(item.get("verb"), _MAX_SHORT)
    received_at = _time(item.get("requestReceivedTimestamp"))
    time = _time(item.get("stageTimestamp")) or received_at
    if stage is None or verb is None or time is None:
        return None
    ref, user, status = _mapping(item, "objectRef"), _mapping(item, "user"), _mapping(item, "responseStatus")
    code = status.get("code")
    return ClusterEvent(
        audit_id=audit_id_text(item.get("auditID")), digest=event_digest(item), stage=stage, time=time,
        received_at=received_at, verb=verb,
        resource=_text(ref.get("resource"), _MAX_NAME), subresource=_text(ref.get("subresource"), _MAX_NAME),
        namespace=_text(ref.get("namespace"), _MAX_NAME), name=_text(ref.get("name"), _MAX_NAME),
        code=code if isinstance(code, int) and not isinstance(code, bool) and 0 <= code < 1000 else None,
        user_agent=_text(item.get("userAgent"), MAX_USER_AGENT, cut=True),
        source_ip=_last_address(item.get("sourceIPs")),
        username=_text(user.get("username"), _MAX_USERNAME, cut=True),
        jti=credential_jti(user.get("extra")))


def _mapping(item: dict[str, Any], key: str) -> dict[str, Any]:
    value = item.get(key)
    return value if isinstance(value, dict) else {}


def credential_jti(extra: Any) -> str | None:
    """The jti of a service account token, from user extra (`JTI=<jti>`);
    None for any other credential (a certificate, a legacy token)."""
    if not isinstance(extra, dict):
        return None
    values = extra.get(CREDENTIAL_ID_KEY)
    if not isinstance(values, list) or len(values) != 1 or not isinstance(values[0], str):
        return None
    value = values[0]
    if not value.startswith(_JTI_PREFIX):
        return None
    return _text(value[len(_JTI_PREFIX):], _MAX_JTI)


def _text(value: Any, limit: int, *, cut: bool = False) -> str | None:
    """A string without NULs (PostgreSQL text cannot hold them), within
    `limit`: cut to it when `cut`, else None (a value that long is not what
    the API server writes)."""
    if not isinstance(value, str) or not value:
        return None
    value = value.replace("\x00", "")
    if len(value) > limit:
        return value[:limit] if cut else None
    return value or None


def audit_id_text(value: Any) -> str:
    """The auditID as stored: any string, without NULs, cut to MAX_AUDIT_ID;
    empty when there is none (the API server always writes one, but its
    absence is no reason to lose the event)."""
    if not isinstance(value, str):
        return ""
    return value.replace("\x00", "")[:MAX_AUDIT_ID]


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True)
"""Canonical JSON: sorted keys, no spaces, ASCII escapes (so any string,
a lone surrogate too, encodes). Made once: json.dumps with options makes an
encoder per call, a third of the digest's cost."""


def event_digest(item: dict[str, Any]) -> bytes:
    """SHA-256 of the event's identifying fields, in IDENTIFYING_FIELDS order
    and then the response's code, in canonical JSON: the same for the same
    event however often and in whatever key order it is sent, different for
    events that differ in any of them, their chosen auditID included."""
    status = item.get("responseStatus")
    identity = [item.get(field) for field in IDENTIFYING_FIELDS]
    identity.append(status.get("code") if isinstance(status, dict) else None)
    return hashlib.sha256(_CANONICAL.encode(identity).encode("ascii")).digest()


def _time(value: Any) -> datetime.datetime | None:
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=datetime.timezone.utc)


def _last_address(value: Any) -> str | None:
    """The last of `sourceIPs`: the peer the API server itself saw."""
    if not isinstance(value, list) or not value or not isinstance(value[-1], str):
        return None
    try:
        return str(ipaddress.ip_address(value[-1]))
    except ValueError:
        return None
