"""The gateway's own errors: the contract's shape everywhere, and on /k8s
also a Kubernetes Status that client-go and the Python client decode. Pure."""

from __future__ import annotations

import json

import pytest

from proxy.http.error_answers import error_body, status_reason
from proxy.passthrough.gate import SPDY_REFUSED

STATUS_KEYS = {"kind", "apiVersion", "metadata", "status", "message", "reason", "code"}


@pytest.mark.parametrize("status, reason", [
    (400, "BadRequest"), (401, "Unauthorized"), (403, "Forbidden"), (404, "NotFound"), (405, "MethodNotAllowed"),
    (409, "Conflict"), (413, "RequestEntityTooLarge"), (415, "UnsupportedMediaType"), (429, "TooManyRequests"),
    (500, "InternalError"), (502, "InternalError"), (503, "ServiceUnavailable"), (504, "Timeout"),
    (411, ""), (431, ""),
])
def test_the_status_reason_is_the_one_client_go_gives_the_same_code(status: int, reason: str) -> None:
    assert status_reason(status) == reason


def test_outside_k8s_the_body_is_the_contracts_error_alone() -> None:
    assert error_body(403, "forbidden", "no", kubernetes=False) == {"error": {"code": "forbidden", "message": "no"}}


def test_on_k8s_the_body_is_also_a_failure_status_with_the_same_message() -> None:
    body = error_body(403, "outside_tenant", "that namespace belongs to someone else", kubernetes=True)
    assert body["error"] == {"code": "outside_tenant", "message": "that namespace belongs to someone else"}
    assert {key: body[key] for key in STATUS_KEYS} == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "that namespace belongs to someone else", "reason": "Forbidden", "code": 403}
    assert "details" not in body


def test_a_rate_limit_suggests_its_delay_as_client_go_reads_it() -> None:
    body = error_body(429, "rate_limited", "too many streams; retry in 7 s", kubernetes=True, retry_after=7)
    assert body["details"] == {"retryAfterSeconds": 7} and body["reason"] == "TooManyRequests"


def test_the_spdy_refusal_names_the_kubectl_settings_and_fits_what_gorilla_reads() -> None:
    for words in ("KUBECTL_REMOTE_COMMAND_WEBSOCKETS=true", "KUBECTL_PORT_FORWARD_WEBSOCKETS=true", "1.30", "1.31",
                  "-v=4"):
        assert words in SPDY_REFUSED
    # The longest message sent on /k8s. client-go's WebSocket dialer (gorilla)
    # keeps the first 1024 bytes of a refused upgrade's body, and decodes them
    # as a Status only if they are all of it.
    body = json.dumps(error_body(400, "spdy_not_supported", SPDY_REFUSED, kubernetes=True))
    assert len(body.encode()) < 1024, len(body)
