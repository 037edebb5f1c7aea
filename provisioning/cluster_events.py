"""The API server's audit events, read: an `audit.k8s.io/v1` EventList in,
the rows the gateway keeps out. Pure.

Only metadata is kept, bounded: verb, resource, subresource, namespace,
name, response code, user agent (untrusted, cut to 512 characters), the
last source address (the one the API server saw; earlier ones come from
X-Forwarded-For, which the client wrote), the user name and the token's
`jti` from user extra `authentication.kubernetes.io/credential-id`
(`JTI=<jti>`). Request and response bodies, annotations and groups are
never read. Joining the jti to a person is the database's work, at write
time (provisioning.db.cluster_events).

An event whose required fields are missing or malformed is skipped, not
the whole batch refused: the API server would retry a refused batch five
times and then lose every event in it. A body that is not an EventList at
all is refused (`NotAnEventList`): it is not the API server speaking.
"""

from __future__ import annotations

import datetime
import ipaddress
import uuid
from dataclasses import dataclass
from typing import Any

API_VERSION = "audit.k8s.io/v1"
CREDENTIAL_ID_KEY = "authentication.kubernetes.io/credential-id"
_JTI_PREFIX = "JTI="
MAX_USER_AGENT = 512
_MAX_NAME = 253
_MAX_USERNAME = 512
_MAX_JTI = 128
_MAX_SHORT = 32


class NotAnEventList(ValueError):
    """The body is not an `audit.k8s.io/v1` EventList."""


@dataclass(frozen=True)
class ClusterEvent:
    """One stage of one request the API server audited, as stored."""

    audit_id: uuid.UUID
    stage: str
    time: datetime.datetime
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
        return (self.audit_id, self.stage, self.time, self.verb, self.resource, self.subresource, self.namespace,
                self.name, self.code, self.user_agent, self.source_ip, self.username, self.jti)


COLUMNS = ("audit_id", "stage", "time", "verb", "resource", "subresource", "namespace", "name", "code",
           "user_agent", "source_ip", "username", "jti")


def parse_event_list(document: Any) -> list[ClusterEvent]:
    """The events of an EventList worth keeping; NotAnEventList if it is none."""
    if not isinstance(document, dict) or document.get("kind") != "EventList" \
            or document.get("apiVersion") != API_VERSION or not isinstance(document.get("items", []) if document.get("items") is not None else [], list):
        raise NotAnEventList(f"the body must be an {API_VERSION} EventList")
    events = (parse_event(item) for item in document.get("items") or [])
    return [event for event in events if event is not None]


def parse_event(item: Any) -> ClusterEvent | None:
    """One event, or None when it lacks what identifies it (audit id, stage,
    verb, a time)."""
    if not isinstance(item, dict):
        return None
    audit_id = _uuid(item.get("auditID"))
    stage, verb = _text(item.get("stage"), _MAX_SHORT), _text(item.get("verb"), _MAX_SHORT)
    time = _time(item.get("stageTimestamp")) or _time(item.get("requestReceivedTimestamp"))
    if audit_id is None or stage is None or verb is None or time is None:
        return None
    ref, user, status = _mapping(item, "objectRef"), _mapping(item, "user"), _mapping(item, "responseStatus")
    code = status.get("code")
    return ClusterEvent(
        audit_id=audit_id, stage=stage, time=time, verb=verb,
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


def _uuid(value: Any) -> uuid.UUID | None:
    try:
        return uuid.UUID(value) if isinstance(value, str) else None
    except ValueError:
        return None


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
