"""Kubernetes API failures, by status, carrying only the `kind: Status`
fields worth showing (reason, a truncated message), never a request body."""

from __future__ import annotations

import json
from typing import Any

from provisioning.errors import ClusterUnavailable, GatewayError, UpstreamError

_MAX_MESSAGE = 300


class KubeAPIError(UpstreamError):
    """The API server answered with an error the gateway did not expect."""

    def __init__(self, kube_status: int, reason: str, detail: str) -> None:
        super().__init__(f"Kubernetes API error {kube_status} {reason}: {detail}"[:_MAX_MESSAGE])
        self.kube_status = kube_status
        self.reason = reason


class KubeNotFound(KubeAPIError):
    pass


class KubeAlreadyExists(KubeAPIError):
    pass


class KubeForbidden(KubeAPIError):
    """The gateway's own credential lacks a permission: a deployment error."""

    code = "gateway_forbidden"


class KubeInvalid(KubeAPIError):
    pass


def from_status(kube_status: int, body: str | bytes | None) -> GatewayError:
    """Map an API server error answer to the gateway's exception tree."""
    reason, detail = "", ""
    try:
        status: Any = json.loads(body or b"{}")
        if isinstance(status, dict) and status.get("kind") == "Status":
            reason, detail = str(status.get("reason", "")), str(status.get("message", ""))
    except ValueError:
        pass
    if kube_status == 429 or kube_status >= 500:
        return ClusterUnavailable()
    kind = {404: KubeNotFound, 409: KubeAlreadyExists, 403: KubeForbidden, 422: KubeInvalid}.get(kube_status, KubeAPIError)
    if kube_status == 401:
        # The gateway's own credential was refused: nothing a client can fix.
        return ClusterUnavailable("the gateway's Kubernetes credential was refused")
    return kind(kube_status, reason, detail)
