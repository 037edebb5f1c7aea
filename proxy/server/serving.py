"""`serve`'s event loop: start, wait for a signal, stop within a bound.

aiohttp's `run_app` closes the listening socket at the first SIGTERM and
then waits, unbounded, for every cleanup step. A gateway is restarted on
every upgrade, drain and scale-in, so it stops in a fixed order instead:

1. SIGTERM or SIGINT: `Drain.begin` — `/readyz` and new requests answer 503
   `shutting_down`; watches and exec sessions end cleanly at once.
2. Requests in flight get GATEWAY_SHUTDOWN_DRAIN_SECONDS to finish.
3. The listener closes, what still runs is cancelled, and the cleanup steps
   run (queued audit rows written, database and API clients closed), each
   bounded by what is left of GATEWAY_SHUTDOWN_TIMEOUT_SECONDS.
4. Exit 0. If the cleanup overran its bound, exit 1 (it was cut short and
   says so in the log).

A second SIGTERM or SIGINT during the stop exits at once with 128 + the
signal number (143, 130), without waiting for anything. A watchdog thread
exits the process with 1 shortly after the bound even if the event loop is
wedged: the kubelet's SIGKILL never has to.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import ssl
import threading
from typing import Any

from aiohttp import web

from proxy import keys
from proxy.server.connection import GatewayRunner
from proxy.settings import Settings, StartupError, variable_name

log = logging.getLogger("tenant_gateway")

EXIT_OVERRAN = 1
# After the drain, handlers still running are cancelled after this long.
_CANCEL_AFTER_SECONDS = 0.5
# The watchdog fires this long after the bound, leaving the loop its own chance first.
_WATCHDOG_GRACE_SECONDS = 1.0


def _exit_now(code: int) -> None:
    logging.shutdown()
    os._exit(code)


def _watchdog(seconds: float) -> threading.Timer:
    def fire() -> None:
        log.error("shutdown overran its bound; exiting now", extra={"bound_seconds": seconds})
        _exit_now(EXIT_OVERRAN)

    timer = threading.Timer(seconds + _WATCHDOG_GRACE_SECONDS, fire)
    timer.daemon = True
    timer.start()
    return timer


async def bind(site: web.BaseSite, field: str, settings: Settings, hint: str = "") -> None:
    """Start listening on the address the setting `field` names; a port
    taken or an address this host lacks stops the start in one line naming
    the variable (proxy.settings.StartupError), not with a traceback."""
    try:
        await site.start()
    except OSError as error:
        raise StartupError(f"{variable_name(field)}={getattr(settings, field)} cannot be listened on "
                           f"({error.strerror or type(error).__name__}): set it to a free address{hint}") from None


async def serve(app: web.Application, settings: Settings, tls: ssl.SSLContext | None,
                server_args: dict[str, Any]) -> int:
    """Serve until a signal; return the exit code."""
    loop = asyncio.get_running_loop()
    drain = app[keys.DRAIN]
    stop = asyncio.Event()
    watchdogs: list[threading.Timer] = []

    def on_signal(number: int) -> None:
        name = signal.Signals(number).name
        if stop.is_set():
            log.warning("second signal: exiting at once", extra={"signal": name, "exit_code": 128 + number})
            _exit_now(128 + number)
        log.info("stopping", extra={"signal": name, "drain_seconds": settings.shutdown_drain_seconds,
                                    "bound_seconds": settings.shutdown_timeout_seconds})
        stop.set()
        watchdogs.append(_watchdog(settings.shutdown_timeout_seconds))
        drain.begin()  # at once, in the signal's own callback: no request slips in before

    # Before start-up, so a signal during migrations is a graceful stop too.
    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, on_signal, number)
    runner = GatewayRunner(app, handle_signals=False, shutdown_timeout=_CANCEL_AFTER_SECONDS,
                           handler_cancellation=True, **server_args)
    try:
        await runner.setup()  # the cleanup contexts' start: what did start is closed again below
        site = web.TCPSite(runner, settings.listen.host, settings.listen.port, ssl_context=tls)
        await bind(site, "listen", settings)
        log.info("serving", extra={"listen": str(settings.listen), "tls": tls is not None})
        await stop.wait()
        finished = await drain.wait_idle()
        log.info("drained" if finished else "drain time is up; cancelling what still runs",
                 extra={"in_flight": drain.in_flight})
    except BaseException:
        # Start-up failed (or the loop is going away): nothing is being served.
        await runner.cleanup()
        raise
    try:
        async with asyncio.timeout(drain.remaining()):
            await runner.cleanup()
    except TimeoutError:
        # The watchdog stays armed: whatever overran may also hold up the loop's own teardown.
        log.error("shutdown cleanup overran its bound", extra={"bound_seconds": settings.shutdown_timeout_seconds})
        return EXIT_OVERRAN
    for watchdog in watchdogs:
        watchdog.cancel()
    log.info("stopped")
    return 0
