"""Apply the SQL files in migrations/ in order, once each.

Replicas may start together: the advisory lock makes exactly one of them
migrate while the others wait, then find nothing left to do. All pending
migrations apply in one transaction, and the lock is transaction-level: it
ends with the commit or rollback, so it can never stay behind on a pooled
connection, and a failed migration leaves the schema as it was.

Waiting for that lock and each migration statement are bounded by
MIGRATION_TIMEOUT_SECONDS, not by the database timeout the connection was
made with (GATEWAY_DATABASE_TIMEOUT_SECONDS, seconds: meant for requests):
a replica starting while another migrates a large table waits for it
instead of exiting with "the database is unreachable".
"""

from __future__ import annotations

from importlib import resources

import asyncpg

from provisioning.errors import DatabaseUnavailable

# Any constant works; it only has to be the same in every replica.
_MIGRATION_LOCK = 0x7E4A_6A7E

MIGRATION_TIMEOUT_SECONDS = 600.0
"""How long `migrate` waits for the migration lock (another replica
migrating), and then for each of its statements."""


def _migrations() -> list[tuple[str, str]]:
    folder = resources.files("provisioning.db").joinpath("migrations")
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".sql")), key=lambda f: f.name)
    return [(f.name.removesuffix(".sql"), f.read_text()) for f in files]


async def migrate(connection: asyncpg.Connection, *, timeout: float = MIGRATION_TIMEOUT_SECONDS) -> list[str]:
    """Apply pending migrations; return the names applied. DatabaseUnavailable,
    saying so, if the lock or a statement takes longer than `timeout`."""
    applied_now: list[str] = []
    try:
        async with connection.transaction():
            await connection.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK, timeout=timeout)
            await connection.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())",
                timeout=timeout,
            )
            done = {r["name"] for r in await connection.fetch("SELECT name FROM schema_migrations", timeout=timeout)}
            for name, sql in _migrations():
                if name in done:
                    continue
                await connection.execute(sql, timeout=timeout)
                await connection.execute("INSERT INTO schema_migrations (name) VALUES ($1)", name, timeout=timeout)
                applied_now.append(name)
    except TimeoutError:
        raise DatabaseUnavailable("the database migration timed out (is another replica still migrating?); "
                                  "retry later") from None
    return applied_now
