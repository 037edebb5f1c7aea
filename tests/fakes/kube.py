"""FAKE gateway clients for create_app's `kube` seam (proxy.app.KubeSeam)."""

from __future__ import annotations

import base64
import copy
import datetime
import json
import uuid
from typing import TYPE_CHECKING, Any, AsyncIterator, NoReturn

from provisioning.kube.client import ClusterEndpoint
from provisioning.kube.errors import KubeAlreadyExists, KubeNotFound

VERSION = {"gitVersion": "v0.0.0-fake"}


def _jwt_shaped(jti: str) -> str:
    def part(claims: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    return f"{part({'alg': 'none'})}.{part({'jti': jti, 'sub': 'system:serviceaccount:fake'})}.unsigned"


class FakeTokenIssuer:
    """A FAKE gateway client: it answers TokenRequests only, each with a new
    token that lives an hour (and makes and deletes the Secrets issued
    tokens are bound to, checking a token is bound to one that is there). Its endpoint is where the gateway's own
    upstream goes when no `upstream` is passed. Anything else the gateway
    could ask of its client (onboarding, suspension) fails the test loudly:
    the component ring has no cluster to do it on."""

    ca_base64 = ""

    def __init__(self, server: str = "https://127.0.0.1:1", *, with_jti: bool = False) -> None:
        self.endpoint = ClusterEndpoint(server, None)
        self.with_jti = with_jti
        """Tokens shaped as the API server's JWTs, carrying a `jti` (unsigned:
        the gateway reads the jti without verifying, as it does a real one's)."""
        self.issued: list[str] = []
        self.secrets: dict[str, str] = {}
        """Binding Secrets held: name -> uid."""
        self.bound_to: list[str] = []
        """The binding Secret of each token minted, in order."""
        self.unbound: list[str] = []
        """The binding Secrets deleted, in order (revocations and sweeps)."""

    async def reachable(self) -> bool:
        """What /readyz asks: the FAKE cluster is always there."""
        return True

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if path.endswith("/secrets"):
            return self._bind(path, body)
        assert path.endswith("/serviceaccounts/sa-tenant-admin/token"), path
        return self._mint(body)

    def _mint(self, body: dict[str, Any]) -> dict[str, Any]:
        bound = ((body.get("spec") or {}).get("boundObjectRef") or {})
        if bound:
            self.bound_to.append(bound["name"])
            assert self.secrets.get(bound["name"]) == bound.get("uid"), f"bound to a Secret that is not there: {bound}"
        self.issued.append(_jwt_shaped(str(uuid.uuid4())) if self.with_jti else f"token-{len(self.issued) + 1}")
        expiry = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
        return {"status": {"token": self.issued[-1], "expirationTimestamp": expiry.strftime("%Y-%m-%dT%H:%M:%SZ")}}

    def _bind(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """An issuance's binding Secret (provisioning.credentials): of the
        gateway's type, without data, as admission holds it to."""
        assert body.get("type") == "tenant-gateway.io/credential" and not body.get("data"), body
        name = body["metadata"]["name"]
        if name in self.secrets:
            raise KubeAlreadyExists(409, "AlreadyExists", f"secrets {name!r} already exists")
        self.secrets[name] = str(uuid.uuid4())
        return {**copy.deepcopy(body), "metadata": {**body["metadata"], "uid": self.secrets[name]}}

    def _unbind(self, path: str) -> dict[str, Any]:
        name = path.rsplit("/", 1)[-1]
        if self.secrets.pop(name, None) is None:
            raise KubeNotFound(404, "NotFound", f"secrets {name!r} not found")
        self.unbound.append(name)
        return {"kind": "Status", "status": "Success"}

    async def request(self, method: str, path: str, body: dict[str, Any] | None = None,
                      query: dict[str, str] | None = None,
                      content_type: str = "application/json") -> dict[str, Any]:
        self._not_a_token_request(method, path)

    async def get(self, path: str) -> dict[str, Any]:
        if path == "/version":  # the admins' cluster view asks
            return dict(VERSION)
        self._not_a_token_request("GET", path)

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self._not_a_token_request("PATCH", path)

    async def delete(self, path: str) -> dict[str, Any]:
        if "/secrets/" in path:
            return self._unbind(path)
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


class FakeCluster(FakeTokenIssuer):
    """A FAKE gateway client that also keeps the ServiceAccounts and
    RoleBindings of tenant namespaces, as a members' change makes and
    deletes them (provisioning.members): created with a new UID, read,
    patched, deleted and listed by label. Tokens are minted for
    `sa-tenant-admin` (onboarding made it before the test) and for any
    account it holds; a TokenRequest for another is 404, as the API server
    answers. Anything else the gateway asks fails the test loudly."""

    _KINDS = ("/serviceaccounts", "/rolebindings")

    def __init__(self, server: str = "https://127.0.0.1:1") -> None:
        super().__init__(server)
        self.objects: dict[str, dict[str, Any]] = {}
        """path -> object"""
        self.token_accounts: list[str] = []
        """The account of each token minted, in order."""

    def _kept(self, path: str) -> bool:
        collection = path.rsplit("/", 1)[0]
        return path.startswith("/api") and collection.endswith(self._KINDS)

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if path.endswith("/secrets"):
            return self._bind(path, body)
        if path.endswith("/token"):
            account_path = path.removesuffix("/token")
            account = account_path.rsplit("/", 1)[-1]
            if account != "sa-tenant-admin" and account_path not in self.objects:
                raise KubeNotFound(404, "NotFound", f"serviceaccounts {account!r} not found")
            self.token_accounts.append(account)
            return self._mint(body)
        if not path.endswith(self._KINDS):
            self._not_a_token_request("POST", path)
        item = f"{path}/{body['metadata']['name']}"
        if item in self.objects:
            raise KubeAlreadyExists(409, "AlreadyExists", f"{item} already exists")
        made = copy.deepcopy(body)
        made["metadata"]["uid"] = str(uuid.uuid4())
        self.objects[item] = made
        return copy.deepcopy(made)

    async def get(self, path: str) -> dict[str, Any]:
        if path == "/version":
            return dict(VERSION)
        if not self._kept(path):
            self._not_a_token_request("GET", path)
        if path not in self.objects:
            raise KubeNotFound(404, "NotFound", f"{path} not found")
        return copy.deepcopy(self.objects[path])

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if not self._kept(path):
            self._not_a_token_request("PATCH", path)
        if path not in self.objects:
            raise KubeNotFound(404, "NotFound", f"{path} not found")
        for key, value in (body.get("metadata") or {}).items():
            if value is None:
                self.objects[path]["metadata"].pop(key, None)
            else:
                self.objects[path]["metadata"][key] = value
        return copy.deepcopy(self.objects[path])

    async def delete(self, path: str) -> dict[str, Any]:
        if "/secrets/" in path:
            return self._unbind(path)
        if not self._kept(path):
            self._not_a_token_request("DELETE", path)
        if path not in self.objects:
            raise KubeNotFound(404, "NotFound", f"{path} not found")
        return self.objects.pop(path)

    async def list_items(self, path: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        if not path.endswith(self._KINDS):
            self._not_a_token_request("GET", path)
        key, _, value = (label_selector or "").partition("=")
        return [copy.deepcopy(found) for item, found in sorted(self.objects.items())
                if item.rsplit("/", 1)[0] == path
                and (not key or (found["metadata"].get("labels") or {}).get(key) == value)]

    async def list_pages(self, path: str, *, page_size: int = 500,
                         label_selector: str | None = None) -> AsyncIterator[list[dict[str, Any]]]:
        yield await self.list_items(path, label_selector)

    def names(self, namespace: str, kind: str) -> set[str]:
        """The names of the objects of `kind` (`serviceaccounts`, `rolebindings`) it holds in `namespace`."""
        return {item.rsplit("/", 1)[-1] for item in self.objects if f"/namespaces/{namespace}/{kind}/" in item}


if TYPE_CHECKING:
    _FAKE_CLUSTER_FITS_THE_SEAM: type[KubeSeam] = FakeCluster
