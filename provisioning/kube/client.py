"""KubeClient: the gateway's own credential, and the only importer of
kubernetes_asyncio.

Requests are made by path with plain dict bodies: the gateway touches a
handful of core and RBAC objects, and dicts keep manifests (pure builders in
provisioning.manifests) free of generated model classes. The library supplies
what is worth not rewriting: kubeconfig and in-cluster loading, exec and
token-file credentials, and TLS setup. Tenant tokens never pass through here;
the proxy has its own client (proxy.passthrough.upstream).
"""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import logging
import os
import ssl
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Protocol

import aiohttp
import yaml

from provisioning.errors import ClusterUnavailable, GatewayError
from provisioning.kube.errors import from_status


def _import_without_generated_models() -> None:
    """Load kubernetes_asyncio's client machinery without its ~1,000
    generated API and model classes.

    Importing `kubernetes_asyncio` (or `.client`) executes package files that
    import every generated class: about 60 MiB of resident memory, most of the
    gateway's footprint, for code it never calls (it sends and receives plain
    dicts). Registering the two packages as bare namespaces first makes the
    submodules we use (configuration, api_client, rest, exceptions and the
    config loaders) importable on their own; `models` becomes an empty module,
    used by the library only to deserialise into classes we never ask for.
    If a library release moves things, this falls back to the full import:
    slower start, same behaviour.
    """
    if "kubernetes_asyncio" in sys.modules:
        return
    # find_spec of the top-level package does not execute it; of a subpackage it would.
    spec = importlib.util.find_spec("kubernetes_asyncio")
    if spec is None or not spec.submodule_search_locations:
        return
    root = list(spec.submodule_search_locations)
    installed: dict[str, types.ModuleType] = {}
    for name, locations in (("kubernetes_asyncio", root),
                            ("kubernetes_asyncio.client", [os.path.join(p, "client") for p in root])):
        package = types.ModuleType(name)
        package.__path__ = list(locations)
        package.__package__ = name
        installed[name] = package
    installed["kubernetes_asyncio.client.models"] = types.ModuleType("kubernetes_asyncio.client.models")
    sys.modules.update(installed)
    try:
        from kubernetes_asyncio.client import api_client, configuration

        client_package = installed["kubernetes_asyncio.client"]
        client_package.ApiClient = api_client.ApiClient  # type: ignore[attr-defined]
        client_package.Configuration = configuration.Configuration  # type: ignore[attr-defined]
        installed["kubernetes_asyncio"].client = client_package  # type: ignore[attr-defined]
        import kubernetes_asyncio.config  # noqa: F401
    except Exception:  # pragma: no cover - depends on the library's layout
        for name in [n for n in sys.modules if n == "kubernetes_asyncio" or n.startswith("kubernetes_asyncio.")]:
            del sys.modules[name]


_import_without_generated_models()

from kubernetes_asyncio import client as k8s_client  # noqa: E402
from kubernetes_asyncio import config as k8s_config  # noqa: E402
from kubernetes_asyncio.client.exceptions import ApiException  # noqa: E402
from kubernetes_asyncio.config.config_exception import ConfigException  # noqa: E402
from kubernetes_asyncio.config.kube_config import KUBE_CONFIG_DEFAULT_LOCATION  # noqa: E402

from provisioning.secrets import yaml_mistake  # noqa: E402

# The library logs whole response bodies at DEBUG, TokenRequest answers
# included: its loggers never go below WARNING, whatever the root level.
logging.getLogger("kubernetes_asyncio").setLevel(logging.WARNING)
# Its config loader logs an exec plugin's failure with the plugin's stderr,
# which may hold a token: from_kubeconfig says what failed instead.
logging.getLogger("kubernetes_asyncio.config").setLevel(logging.CRITICAL)

# Control-plane calls are small; past this the API server is effectively down.
_REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=15, sock_connect=5)
# Items per page of a paged listing (list_pages): one page is what the
# gateway holds in memory and what must arrive within _REQUEST_TIMEOUT,
# however many objects a tenant made.
LIST_PAGE_SIZE = 100

_VERSION = "/version"
NON_RESOURCE_URLS = frozenset({_VERSION})
"""Every path outside the API's resources the gateway's credential asks
for (`reachable`: /readyz, reconcile). Its FlowSchema
(deploy/kubernetes/flowcontrol.yaml) must name them, or they queue in the
tenants' priority level, behind a tenant's flood."""


@dataclass(frozen=True)
class ClusterEndpoint:
    """Where the API server is and how to trust it: what kubeconfigs and the proxy need."""

    server: str
    ca_pem: bytes | None


async def _without_environment_proxies(api: Any, configuration: Any) -> None:
    """Replace the library's HTTP session with one that ignores proxy
    environment variables and ~/.netrc.

    The library's session has trust_env=True, which makes aiohttp look up
    proxies and parse ~/.netrc in a worker thread on every request: a third
    of the gateway's TokenRequest throughput. The gateway talks to its API
    server directly. TLS is set up exactly as the library does it.
    """
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, keyfile=configuration.key_file)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if getattr(configuration, "disable_strict_ssl_verification", False):
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    rest = api.rest_client
    await rest.pool_manager.close()
    rest.pool_manager = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=configuration.connection_pool_maxsize, ssl=context),
        trust_env=False, read_bufsize=2**21)


async def _load_configuration(kubeconfig: Path | None) -> Any:
    configuration = k8s_client.Configuration()
    if kubeconfig is not None:
        await k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
        return configuration
    try:
        k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except ConfigException:
        await k8s_config.load_kube_config(client_configuration=configuration)
    return configuration


def _unusable(error: Exception) -> str:
    """Why a kubeconfig cannot be used, by the kind of problem only. The
    library reads the file with little checking of its own, so a bare string
    or a context that is not a mapping is a TypeError or AttributeError from
    inside it, not a ConfigException."""
    if isinstance(error, yaml.YAMLError):
        return yaml_mistake(error)
    if isinstance(error, OSError) and error.strerror:  # a file it names (a CA, a key) missing or unreadable
        return str(error.strerror)
    return f"not a usable kubeconfig ({type(error).__name__})"


class KubeApi(Protocol):
    """What the gateway asks of its own Kubernetes client: KubeClient is the
    real one. Code that takes a client takes this, so the app's `kube` seam
    (proxy.app.KubeSeam) can hold a FAKE (tests/fakes/kube.py) that mypy
    checks against the real interface."""

    @property
    def endpoint(self) -> ClusterEndpoint: ...

    @property
    def ca_base64(self) -> str: ...

    async def request(self, method: str, path: str, body: dict[str, Any] | None = None,
                      query: dict[str, str] | None = None,
                      content_type: str = "application/json") -> dict[str, Any]: ...

    async def get(self, path: str) -> dict[str, Any]: ...

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]: ...

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]: ...

    async def delete(self, path: str) -> dict[str, Any]: ...

    async def list_items(self, path: str, label_selector: str | None = None) -> list[dict[str, Any]]: ...

    def list_pages(self, path: str, *, page_size: int = LIST_PAGE_SIZE,
                   label_selector: str | None = None) -> AsyncIterator[list[dict[str, Any]]]: ...

    async def reachable(self) -> bool: ...


class KubeClient:
    def __init__(self, api: k8s_client.ApiClient, endpoint: ClusterEndpoint) -> None:
        self._api = api
        self.endpoint = endpoint

    @classmethod
    async def from_kubeconfig(cls, kubeconfig: Path | None) -> "KubeClient":
        """The configured file, else in-cluster config, else ~/.kube/config
        (or $KUBECONFIG). A credential that cannot be used is one line
        naming the file and the kind of problem, never the library's words:
        those may quote the file (an exec plugin's stderr)."""
        where = str(kubeconfig) if kubeconfig is not None else f"in-cluster config or {KUBE_CONFIG_DEFAULT_LOCATION}"
        if kubeconfig is not None and not kubeconfig.is_file():
            raise GatewayError(f"cannot load the gateway's Kubernetes credential from {where}: no such file")
        try:
            configuration = await _load_configuration(kubeconfig)
            ca_pem = Path(configuration.ssl_ca_cert).read_bytes() if configuration.ssl_ca_cert else None
            api = k8s_client.ApiClient(configuration)
            await _without_environment_proxies(api, configuration)
        except Exception as error:  # noqa: BLE001 - whatever the library's parsing of it raises, see _unusable
            raise GatewayError(f"cannot load the gateway's Kubernetes credential from {where}: "
                               f"{_unusable(error)}") from None
        return cls(api, ClusterEndpoint(str(configuration.host).rstrip("/"), ca_pem))

    async def close(self) -> None:
        await self._api.close()

    @property
    def ca_base64(self) -> str:
        return base64.b64encode(self.endpoint.ca_pem or b"").decode()

    async def request(self, method: str, path: str, body: dict[str, Any] | None = None,
                      query: dict[str, str] | None = None,
                      content_type: str = "application/json") -> dict[str, Any]:
        try:
            result = await self._api.call_api(
                path, method,
                query_params=list((query or {}).items()),
                header_params={"Accept": "application/json", "Content-Type": content_type},
                body=body,
                response_types_map={200: "object", 201: "object", 202: "object"},
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _request_timeout=_REQUEST_TIMEOUT,
            )
        except ApiException as error:
            raise from_status(error.status or 0, error.body) from None
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as error:
            raise ClusterUnavailable() from error
        return result if isinstance(result, dict) else {}

    async def get(self, path: str) -> dict[str, Any]:
        return await self.request("GET", path)

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.request("POST", path, body)

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.request("PATCH", path, body, content_type="application/merge-patch+json")

    async def delete(self, path: str) -> dict[str, Any]:
        return await self.request("DELETE", path)

    async def list_items(self, path: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        query = {"labelSelector": label_selector} if label_selector else None
        return list((await self.request("GET", path, query=query)).get("items", []))

    async def list_pages(self, path: str, *, page_size: int = LIST_PAGE_SIZE,
                         label_selector: str | None = None) -> AsyncIterator[list[dict[str, Any]]]:
        """The collection a page at a time (`limit`, then each answer's
        `continue`): memory and each request's time are bounded by one page,
        not by how many objects the collection holds. The pages are one
        consistent snapshot, so deleting what a page lists does not disturb
        the next; a snapshot older than etcd's compaction is refused (410,
        a KubeAPIError) and the caller lists again."""
        query = {"limit": str(page_size)}
        if label_selector:
            query["labelSelector"] = label_selector
        while True:
            answer = await self.request("GET", path, query=query)
            yield list(answer.get("items", []))
            token = (answer.get("metadata") or {}).get("continue")
            if not token:
                return
            query = {**query, "continue": str(token)}

    async def reachable(self) -> bool:
        try:
            await self.get(_VERSION)
            return True
        except GatewayError:
            return False
