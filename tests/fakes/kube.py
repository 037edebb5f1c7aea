"""FAKE gateway clients for create_app's `kube` seam (proxy.app.KubeSeam)."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any, AsyncIterator, NoReturn

from provisioning.kube.client import ClusterEndpoint


class FakeTokenIssuer:
    """A FAKE gateway client: it answers TokenRequests only, each with a new
    token that lives an hour. Its endpoint is where the gateway's own
    upstream goes when no `upstream` is passed. Anything else the gateway
    could ask of its client (onboarding, suspension) fails the test loudly:
    the component ring has no cluster to do it on."""

    ca_base64 = ""

    def __init__(self, server: str = "https://127.0.0.1:1") -> None:
        self.endpoint = ClusterEndpoint(server, None)
        self.issued: list[str] = []

    async def reachable(self) -> bool:
        """What /readyz asks: the FAKE cluster is always there."""
        return True

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        assert path.endswith("/serviceaccounts/sa-tenant-admin/token"), path
        self.issued.append(f"token-{len(self.issued) + 1}")
        expiry = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
        return {"status": {"token": self.issued[-1], "expirationTimestamp": expiry.strftime("%Y-%m-%dT%H:%M:%SZ")}}

    async def request(self, method: str, path: str, body: dict[str, Any] | None = None,
                      query: dict[str, str] | None = None,
                      content_type: str = "application/json") -> dict[str, Any]:
        self._not_a_token_request(method, path)

    async def get(self, path: str) -> dict[str, Any]:
        self._not_a_token_request("GET", path)

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self._not_a_token_request("PATCH", path)

    async def delete(self, path: str) -> dict[str, Any]:
        self._not_a_token_request("DELETE", path)

    async def list_items(self, path: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        self._not_a_token_request("GET", path)

    def list_pages(self, path: str, *, page_size: int = 500,
                   label_selector: str | None = None) -> AsyncIterator[list[dict[str, Any]]]:
        self._not_a_token_request("GET", path)

    @staticmethod
    def _not_a_token_request(method: str, path: str) -> NoReturn:
        raise AssertionError(f"the FAKE token issuer was asked {method} {path}: it answers TokenRequests only")


if TYPE_CHECKING:  # mypy holds the FAKE to the seam's interface (pyproject: [tool.mypy] packages)
    from proxy.app import KubeSeam

    _FAKE_FITS_THE_SEAM: type[KubeSeam] = FakeTokenIssuer
