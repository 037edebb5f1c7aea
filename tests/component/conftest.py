"""The component ring: the gateway with a real PostgreSQL and no cluster.

`gateway_env` (tests/conftest.py) points the gateway at the local cluster;
here it points at an API server address where nothing listens, so any test
in this ring that reaches the cluster fails loudly (the gateway answers 503)
instead of quietly needing the control plane. Tests here are about what the
gateway decides on its own: input, sessions, accounts, its own routes.
"""

from __future__ import annotations

from pathlib import Path
from typing import AsyncIterator

import pytest
import yaml

from devstack.processes import free_port
from provisioning.db.pool import Database
from tests.fakes.apiserver import api_server, fake_api_server  # noqa: F401  (fixtures, registered for the ring)
from tests.support.environment import gateway_environment


@pytest.fixture(scope="session")
def no_cluster_kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("no-cluster") / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "none",
        "clusters": [{"name": "none", "cluster": {"server": f"https://127.0.0.1:{free_port()}"}}],
        "users": [{"name": "none", "user": {"token": "not-a-real-token"}}],
        "contexts": [{"name": "none", "context": {"cluster": "none", "user": "none"}}],
    }))
    return path


@pytest.fixture
def gateway_env(no_cluster_kubeconfig: Path, database_url: str) -> dict[str, str]:
    return gateway_environment(no_cluster_kubeconfig, database_url)


@pytest.fixture(scope="session")
def cluster() -> None:
    pytest.fail("the component ring has no cluster: a test that needs one belongs in tests/integration",
                pytrace=False)


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    """The test's database (a copy of the migrated template), for a test
    that reads or writes rows itself; a few connections, for races."""
    database = await Database.connect(database_url, min_size=1, max_size=3)
    yield database
    await database.close()
