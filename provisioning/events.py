"""Cross-replica events over PostgreSQL LISTEN/NOTIFY.

Table triggers send the events (migrations 0003 and 0004) inside the
transaction that changes state, so an event is delivered exactly when the
change becomes visible. Each replica
holds one dedicated listening connection (outside the pool). Caches may trust
their entries only while `connected` is true: when the connection drops, every
subscriber's reset hook runs (drop everything), caches fall back to the
database until the listener is back, and no event can have been missed
unnoticed. Streams (watches, log follows, exec...) open only while it is
true (proxy.passthrough.gate): a stream outlives any database read, and
only an event can cut it when its right ends.

A connection is trusted only while it proves it still delivers
notifications: every `probe_seconds` the listener sends a nonce with
`pg_notify` on a channel of its own (LISTENed on the same connection) and
must hear it back within `probe_timeout`. A socket that died silently, or
a transaction-mode pooler that runs `SELECT 1` but never delivers a
NOTIFY, fails that within the 5 s in which a stream whose right ended must
be cut (probe_seconds + probe_timeout, from the last echo heard: 3.5 s).
Often, with a lenient timeout, so that a moment's load on the database or
the event loop does not count as a lost connection (a reset cuts every
stream of the replica). The
heartbeat is the listener's own: it moves no generation and reaches no
subscriber. A connection judged lost is reset (streams cut, caches off)
at once, before the listener waits for it to close.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from typing import Any, Callable

import asyncpg

from provisioning.background import cancel_and_wait
from provisioning.db.repositories import EVENTS_CHANNEL

log = logging.getLogger(__name__)

# How the listening connection shows in pg_stat_activity.
LISTENER_APPLICATION_NAME = "tenant-gateway-events"

# Handlers run on the listener's callback: synchronous and quick (evict a
# cache entry, cancel a stream), never I/O.
Handler = Callable[[dict[str, Any]], None]
ResetHook = Callable[[], None]


class EventListener:
    def __init__(self, dsn: str, *, retry_seconds: float = 1.0, connect_timeout: float = 5.0,
                 probe_seconds: float = 1.0, probe_timeout: float = 2.5) -> None:
        self._dsn = dsn
        self._connect_timeout = connect_timeout
        self._retry_seconds = retry_seconds
        self._probe_seconds = probe_seconds
        self._probe_timeout = probe_timeout
        # Private to this listener: no other replica's heartbeat (or anyone's event) arrives on it.
        self._probe_channel = f"tenant_gateway_probe_{secrets.token_hex(8)}"
        self._echo: tuple[str, asyncio.Future[None]] | None = None
        self._handlers: list[Handler] = []
        self._reset_hooks: list[ResetHook] = []
        self._connection: asyncpg.Connection | None = None
        self._task: asyncio.Task[None] | None = None
        self._lost = asyncio.Event()
        self._generation = 0  # events and resets so far
        self._stopping = False
        self._up = asyncio.Event()
        """Set while `connected`: what `wait_connected` waits for."""

    @property
    def connected(self) -> bool:
        """Events are being heard: caches may trust their entries, and a
        stream opened now will hear of the end of its rights."""
        return self._up.is_set()

    def _set_connected(self, connected: bool) -> None:
        if connected:
            self._up.set()
        else:
            self._up.clear()

    @property
    def generation(self) -> int:
        """Take it before a database read meant for a cache, and pass it to
        `may_cache` after: a change whose event arrived meanwhile may not be
        in what was read."""
        return self._generation

    def may_cache(self, generation: int) -> bool:
        return self.connected and self._generation == generation

    def subscribe(self, handler: Handler, on_reset: ResetHook | None = None) -> None:
        self._handlers.append(handler)
        if on_reset is not None:
            self._reset_hooks.append(on_reset)

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="tenant-gateway-events")

    async def wait_connected(self, timeout: float) -> bool:
        """True once connected (at once if it is), False if `timeout` passed first."""
        try:
            await asyncio.wait_for(self._up.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    async def stop(self, timeout: float = 5.0) -> None:
        """Bounded: the reconnect loop also checks `_stopping`, so a
        cancellation swallowed inside asyncpg cannot keep it retrying."""
        self._stopping = True
        await cancel_and_wait(self._task, timeout)
        await self._close()

    async def _close(self) -> None:
        self._set_connected(False)
        self._echo = None
        if self._connection is not None and not self._connection.is_closed():
            try:
                await asyncio.wait_for(self._connection.close(), timeout=2)
            except Exception:  # a timeout, a dead socket: cut it
                self._connection.terminate()
        self._connection = None

    def _reset(self) -> None:
        self._generation += 1
        for hook in self._reset_hooks:
            hook()

    async def _run(self) -> None:
        while not self._stopping:
            try:
                self._lost.clear()
                self._connection = await asyncpg.connect(self._dsn, timeout=self._connect_timeout, server_settings={
                    "application_name": LISTENER_APPLICATION_NAME})
                self._connection.add_termination_listener(lambda _c: self._lost.set())
                await self._connection.add_listener(self._probe_channel, self._on_probe)
                await self._connection.add_listener(EVENTS_CHANNEL, self._on_notify)
                # Trusted only once a notification has come back (a pooler accepts LISTEN and delivers nothing).
                await self._probe()
                # Anything cached before this point may have missed an event.
                self._reset()
                self._set_connected(True)
                log.info("event listener connected")
                await self._watch_connection()
            except asyncio.CancelledError:
                raise
            except (OSError, asyncio.TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
                pass
            except Exception:
                # Anything else (asyncpg's InternalClientError, say) must not
                # end the task while `connected` still says caches may trust.
                log.exception("event listener failed; reconnecting")
            if self.connected:
                log.warning("event listener lost its connection; caches disabled until it is back")
            # Judged lost: cut and forget now, not after a dead socket's close has timed out.
            self._set_connected(False)
            self._reset()
            await self._close()
            await asyncio.sleep(self._retry_seconds)

    async def _watch_connection(self) -> None:
        """Return when the connection is gone; raise when it no longer
        delivers notifications. The termination callback covers a clean
        close; the heartbeat covers a silently dead socket, and a connection
        that answers queries but drops what it was LISTENing for."""
        while True:
            try:
                await asyncio.wait_for(self._lost.wait(), timeout=self._probe_seconds)
                return
            except asyncio.TimeoutError:
                await self._probe()

    async def _probe(self) -> None:
        """Send a nonce to this listener's own channel and hear it back
        within `probe_timeout`; TimeoutError if it does not come."""
        assert self._connection is not None
        nonce = secrets.token_hex(8)
        echo: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._echo = (nonce, echo)
        try:
            async with asyncio.timeout(self._probe_timeout):
                await self._connection.execute("SELECT pg_notify($1, $2)", self._probe_channel, nonce)
                await echo
        except TimeoutError:
            log.warning("event listener's heartbeat did not come back within %s s: a dead connection, or one "
                        "(through a transaction-mode pooler?) that does not deliver notifications", self._probe_timeout)
            raise
        finally:
            self._echo = None

    def _on_probe(self, _connection: object, _pid: int, _channel: str, payload: str) -> None:
        if self._echo is not None and self._echo[0] == payload and not self._echo[1].done():
            self._echo[1].set_result(None)

    def _on_notify(self, _connection: object, _pid: int, _channel: str, payload: str) -> None:
        try:
            message = json.loads(payload)
        except ValueError:
            return
        if not isinstance(message, dict):
            return
        self._deliver(message)

    def committed(self, message: dict[str, Any]) -> None:
        """A change this replica has just committed, heard here at once: the
        caller's next request may come before the database's NOTIFY does, and
        a right that ended must be gone by then. Every replica, this one
        included, hears the NOTIFY later; handlers take an event twice alike.
        Reads under way that began before it do not fill a cache (`may_cache`)."""
        self._deliver(message)

    def _deliver(self, message: dict[str, Any]) -> None:
        self._generation += 1
        for handler in self._handlers:
            try:
                handler(message)
            except Exception:  # one broken subscriber must not starve the others
                log.exception("event handler failed")
