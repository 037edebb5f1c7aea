"""The fleet: the one owner of the gateway's clients to its clusters.

A `Fleet` maps each configured cluster's name (provisioning.clusters) to
a `Cluster`: its settings (labels, kind), the gateway's own client there
(KubeApi) and its public endpoint, what issued kubeconfigs carry (server,
CA, optional TLS server name). Every domain call that touches Kubernetes
takes the client of the workspace's own cluster (`fleet.of(workspace)`);
the proxy builds its upstreams from the same endpoints.

A cluster that is down must say which one it is: with more than one
cluster configured, each client is wrapped so that its ClusterUnavailable
names the cluster (a single-cluster gateway keeps today's messages).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence

from provisioning.clusters import ClusterSettings
from provisioning.errors import ClusterUnavailable, GatewayError
from provisioning.kube.client import LIST_PAGE_SIZE, ClusterEndpoint, KubeApi, KubeClient
from provisioning.models import Workspace


def client_for(clients: "KubeApi | Fleet", cluster: str) -> KubeApi:
    """The client of `cluster`: for domain calls that span workspaces
    (a user's suspension, sign-in's group memberships, the sweep,
    reconcile), which take the whole fleet, or one client (one cluster)."""
    return clients.named(cluster).kube if isinstance(clients, Fleet) else clients


def naming(name: str, error: ClusterUnavailable) -> ClusterUnavailable:
    """`error` with the cluster's name in front of its message (once)."""
    prefix = f"cluster {name}: "
    if error.message.startswith(prefix):
        return error
    named = ClusterUnavailable(prefix + error.message, code=error.code)
    named.retry_after = error.retry_after
    return named


class NamedKube:
    """A KubeApi whose ClusterUnavailable names its cluster."""

    def __init__(self, name: str, kube: KubeApi) -> None:
        self.name = name
        self.inner = kube

    @property
    def endpoint(self) -> ClusterEndpoint:
        return self.inner.endpoint

    @property
    def ca_base64(self) -> str:
        return self.inner.ca_base64

    async def _call(self, call: Callable[[], Awaitable[Any]]) -> Any:
        try:
            return await call()
        except ClusterUnavailable as error:
            raise naming(self.name, error) from error

    async def request(self, method: str, path: str, body: dict[str, Any] | None = None,
                      query: dict[str, str] | None = None,
                      content_type: str = "application/json") -> dict[str, Any]:
        result: dict[str, Any] = await self._call(lambda: self.inner.request(method, path, body, query, content_type))
        return result

    async def get(self, path: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._call(lambda: self.inner.get(path))
        return result

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = await self._call(lambda: self.inner.create(path, body))
        return result

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = await self._call(lambda: self.inner.merge_patch(path, body))
        return result

    async def delete(self, path: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._call(lambda: self.inner.delete(path))
        return result

    async def list_items(self, path: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self._call(lambda: self.inner.list_items(path, label_selector))
        return result

    async def list_pages(self, path: str, *, page_size: int = LIST_PAGE_SIZE,
                         label_selector: str | None = None) -> AsyncIterator[list[dict[str, Any]]]:
        try:
            async for page in self.inner.list_pages(path, page_size=page_size, label_selector=label_selector):
                yield page
        except ClusterUnavailable as error:
            raise naming(self.name, error) from error

    async def reachable(self) -> bool:
        return await self.inner.reachable()


@dataclass(frozen=True)
class Cluster:
    settings: ClusterSettings
    kube: KubeApi
    public_server: str
    """The API server URL written into kubeconfigs."""
    public_ca_base64: str
    """The CA written into kubeconfigs, base64 (a kubeconfig's `certificate-authority-data`)."""

    @property
    def name(self) -> str:
        return self.settings.name

    @property
    def endpoint(self) -> ClusterEndpoint:
        """Where the gateway itself reaches the API server (the proxy's upstream too)."""
        return self.kube.endpoint


def public_ca_base64(cluster: ClusterSettings, kube: KubeApi) -> str:
    if cluster.public_ca_file is not None:
        return base64.b64encode(Path(cluster.public_ca_file).read_bytes()).decode()
    return kube.ca_base64


class Fleet(Mapping[str, Cluster]):
    """Name -> Cluster, in configuration order."""

    def __init__(self, clusters: Sequence[Cluster], *, owned: Sequence[KubeClient] = ()) -> None:
        self._clusters = {cluster.name: cluster for cluster in clusters}
        self._owned = list(owned)

    def __getitem__(self, name: str) -> Cluster:
        return self._clusters[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._clusters)

    def __len__(self) -> int:
        return len(self._clusters)

    @property
    def settings(self) -> tuple[ClusterSettings, ...]:
        return tuple(cluster.settings for cluster in self._clusters.values())

    def named(self, name: str) -> Cluster:
        """The cluster called `name`; 503 naming it when this gateway no
        longer has it configured (a workspace outlives its cluster's entry:
        it is unreachable from here, not gone)."""
        found = self._clusters.get(name)
        if found is None:
            raise ClusterUnavailable(f"cluster {name} is not configured on this gateway")
        return found

    def of(self, workspace: Workspace) -> Cluster:
        return self.named(workspace.cluster)

    def kube_of(self, workspace: Workspace) -> KubeApi:
        return self.named(workspace.cluster).kube

    @classmethod
    async def connect(cls, clusters: Sequence[ClusterSettings],
                      given: Mapping[str, KubeApi] | None = None) -> "Fleet":
        """Each cluster's client: `given` (a test's FAKE, which the caller
        closes) or one loaded from the cluster's kubeconfig. With several
        clusters, a credential that cannot be loaded names its cluster."""
        given = given or {}
        owned: list[KubeClient] = []
        made: list[Cluster] = []
        several = len(clusters) > 1
        try:
            for settings in clusters:
                kube: KubeApi
                if settings.name in given:
                    kube = given[settings.name]
                else:
                    try:
                        client = await KubeClient.from_kubeconfig(settings.kubeconfig)
                    except GatewayError as error:
                        if several:
                            raise GatewayError(f"cluster {settings.name}: {error.message}") from None
                        raise
                    owned.append(client)
                    kube = client
                if several:
                    kube = NamedKube(settings.name, kube)
                made.append(Cluster(settings, kube, settings.public_server or kube.endpoint.server,
                                    public_ca_base64(settings, kube)))
        except BaseException:
            for client in owned:
                await client.close()
            raise
        return cls(made, owned=owned)

    async def close(self) -> None:
        for client in self._owned:
            await client.close()
