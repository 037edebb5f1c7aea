"""A database that answers but refuses the gateway (a wrong password after a
credential rotation, a database that does not exist) is a 503 and a
one-line error, like one that does not answer: never a traceback, never a
500, never the URL or the password in what is printed or answered.

The PostgreSQL is the test's own, with password authentication for the
gateway's role (`scram-sha-256` in pg_hba.conf; the embedded server trusts
local connections otherwise): a real refusal, not a mock.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, AsyncIterator
from urllib.parse import urlsplit

import asyncpg
import pytest

from devstack.processes import free_port
from provisioning.db.migrate import migrate
from provisioning.db.pool import Database
from provisioning.errors import DatabaseRefused
from tests.support.environment import gateway_environment
from tests.support.gatewayclient import error_of, register_and_login

SCRIPT = str(Path(sys.executable).with_name("tenant-gateway"))
RIGHT, WRONG = "right-horse-battery", "wrong-horse-battery"


def gateway_url(server: Any, password: str, database: str = "gateway") -> str:
    socket_dir = dict(pair.split("=", 1) for pair in urlsplit(server.get_uri()).query.split("&"))["host"]
    return f"postgresql://gateway:{password}@/{database}?host={socket_dir}"


@pytest.fixture
async def password_postgres(own_postgres: Any) -> AsyncIterator[Any]:
    """own_postgres, where the role `gateway` (owner of database `gateway`,
    migrated) must give its password."""
    admin = await asyncpg.connect(own_postgres.get_uri())
    try:
        await admin.execute(f"CREATE ROLE gateway LOGIN PASSWORD '{RIGHT}'")
        await admin.execute("CREATE DATABASE gateway OWNER gateway")
        hba = Path(await admin.fetchval("SHOW hba_file"))
        await asyncio.to_thread(hba.write_text, "local all gateway scram-sha-256\n" + hba.read_text())
        assert await admin.fetchval("SELECT pg_reload_conf()")
    finally:
        await admin.close()
    connection = await asyncpg.connect(gateway_url(own_postgres, RIGHT))
    try:
        await migrate(connection)
    finally:
        await connection.close()
    yield own_postgres


def run(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([SCRIPT, *args], input=stdin, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


async def test_the_command_line_says_the_credentials_were_refused_in_one_line(
        password_postgres: Any, no_cluster_kubeconfig: Path) -> None:
    env = {**gateway_environment(no_cluster_kubeconfig, gateway_url(password_postgres, WRONG)),
           "GATEWAY_LISTEN": f"127.0.0.1:{free_port()}", "GATEWAY_METRICS_LISTEN": f"127.0.0.1:{free_port()}"}
    # (`serve` asks the cluster first, its permission self-check, and there is no cluster in this ring.)
    for args, stdin in ((("migrate",), ""), (("user", "create", "--email", "root@example.test", "--admin",
                                              "--password-stdin"), "correct horse battery staple\n")):
        result = await asyncio.to_thread(run, env, *args, stdin=stdin)
        assert result.returncode != 0, args
        assert "Traceback" not in result.stderr and WRONG not in result.stderr + result.stdout, result.stderr
        assert result.stderr.splitlines()[-1] == \
            "tenant-gateway: GATEWAY_DATABASE_URL: the database refused the gateway's credentials", (args, result.stderr)

    missing = await asyncio.to_thread(run, {**env, "GATEWAY_DATABASE_URL": gateway_url(
        password_postgres, RIGHT, database="no_such_database")}, "migrate")
    assert missing.returncode != 0 and "Traceback" not in missing.stderr, missing.stderr
    assert missing.stderr.splitlines()[-1] == "tenant-gateway: GATEWAY_DATABASE_URL: the gateway's database does not exist"

    right = await asyncio.to_thread(run, {**env, "GATEWAY_DATABASE_URL": gateway_url(password_postgres, RIGHT)},
                                    "migrate")
    assert (right.returncode, right.stdout) == (0, "database is up to date\n"), right.stderr


async def test_a_credential_rotated_under_a_running_gateway_is_503_not_500(
        password_postgres: Any, make_gateway: Any, caplog: pytest.LogCaptureFixture) -> None:
    gateway = await make_gateway(GATEWAY_DATABASE_URL=gateway_url(password_postgres, RIGHT))
    user = await register_and_login(gateway)
    admin = await asyncpg.connect(password_postgres.get_uri())
    try:
        # The password changes; the gateway's connections go (a restart, a
        # failover, idle connections cut): the pool must connect afresh.
        await admin.execute(f"ALTER ROLE gateway PASSWORD '{RIGHT}-rotated'")
        await admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'gateway'")
    finally:
        await admin.close()
    await asyncio.sleep(0.5)
    answers = [await error_of(await user.call("GET", "/api/v1/me")) for _ in range(3)]
    assert all(status == 503 for status, _ in answers), answers
    assert answers[-1] == (503, "database_refused")
    ready = await gateway.get("/readyz")
    assert ready.status == 503
    assert not [record for record in caplog.records if record.levelname in ("ERROR", "CRITICAL")]
    assert RIGHT not in caplog.text


@pytest.mark.parametrize("url", [
    "postgresql://gw:Kq9sEcReT/xYz@127.0.0.1:5432/gw",  # asyncpg reads "Kq9sEcReT" as the port
    "postgresql://gw:Kq9s?EcReT@127.0.0.1:5432/gw",  # ... and "EcReT@..." as a query
    "postgresql://gw:Kq9sEcReT@127.0.0.1:99999/gw",  # the socket's OverflowError
    "postgresql://gw:Kq9sEcReT@127.0.0.1:5432/gw?sslmode=EcReT",
])
async def test_a_url_asyncpg_cannot_read_is_a_one_line_refusal_that_never_quotes_it(url: str) -> None:
    """Settings refuse such URLs at start-up; the pool is the last line, for
    a URL that came another way (dev mode's)."""
    with pytest.raises(DatabaseRefused) as refused:
        await Database.connect(url, timeout=2)
    assert "cannot be read" in refused.value.message and "\n" not in refused.value.message
    assert "EcReT" not in refused.value.message and "Kq9s" not in refused.value.message
    # Nothing chained that a traceback would print.
    assert refused.value.__cause__ is None and refused.value.__suppress_context__
