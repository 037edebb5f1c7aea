"""Apply the SQL files in migrations/ in order, once each.

Replicas may start together: the advisory lock makes exactly one of them
migrate while the others wait, then find nothing left to do. All pending
migrations apply in one transaction, and the lock is transaction-level: it
ends with the commit or rollback, so it can never stay behind on a pooled
connection, and a failed migration leaves the schema as it was.
"""

from __future__ import annotations

from importlib import resources

import asyncpg

# Any constant works; it only has to be the same in every replica.
_MIGRATION_LOCK = 0x7E4A_6A7E


def _migrations() -> list[tuple[str, str]]:
    folder = resources.files("provisioning.db").joinpath("migrations")
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".sql")), key=lambda f: f.name)
    return [(f.name.removesuffix(".sql"), f.read_text()) for f in files]


async def migrate(connection: asyncpg.Connection) -> list[str]:
    """Apply pending migrations; return the names applied."""
    applied_now: list[str] = []
    async with connection.transaction():
        await connection.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
        await connection.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {r["name"] for r in await connection.fetch("SELECT name FROM schema_migrations")}
        for name, sql in _migrations():
            if name in done:
                continue
            await connection.execute(sql)
            await connection.execute("INSERT INTO schema_migrations (name) VALUES ($1)", name)
            applied_now.append(name)
    return applied_now
