"""A real `tenant-gateway serve` process beside the in-process test gateway:
a second replica on the same database, whose log is read as an operator
would read it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator

import aiohttp

from devstack.processes import free_port


def tls_session(gateway: Any, **kwargs: Any) -> aiohttp.ClientSession:
    """A client session of our own that trusts the test gateway's CA."""
    context = ssl.create_default_context(cafile=str(gateway.ca_file))
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context), **kwargs)




@dataclass
class Replica:
    base: str
    process: subprocess.Popen[bytes]
    log: str = field(default="")
    """Everything the process wrote to stderr (its JSON log), once it has stopped."""


@contextlib.asynccontextmanager
async def gateway_process(gateway: Any, gateway_env: dict[str, str]) -> AsyncIterator[Replica]:
    """Start a replica serving the test gateway's TLS certificate; stop it on exit and keep its log."""
    port = free_port()
    env = {**os.environ, **gateway_env, "GATEWAY_LISTEN": f"127.0.0.1:{port}",
           "GATEWAY_PUBLIC_URL": f"https://127.0.0.1:{port}",
           "GATEWAY_TLS_CERT_FILE": str(gateway.ca_file.with_name("gateway.crt")),
           "GATEWAY_TLS_KEY_FILE": str(gateway.ca_file.with_name("gateway.key"))}
    process = subprocess.Popen([str(Path(sys.executable).with_name("tenant-gateway")), "serve"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    replica = Replica(f"https://127.0.0.1:{port}", process)
    try:
        async with tls_session(gateway) as probe:
            for _ in range(100):
                try:
                    async with probe.get(replica.base + "/readyz") as ready:
                        if ready.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.2)
            else:
                raise AssertionError("the gateway process did not start")
        yield replica
    finally:
        process.terminate()
        process.wait(timeout=15)
        assert process.stderr is not None
        replica.log = process.stderr.read().decode()


# Replicas started by the second_gateway fixture, by base URL: a test reads one's log.
REPLICAS: dict[str, subprocess.Popen[bytes]] = {}
