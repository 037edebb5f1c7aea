"""Everything that reaches a pod, through the gateway, against real pods on
the local node: kubectl exec (plain, -i with late stdin, -it with a resize),
attach, logs -f, port-forward and cp; the official Python client's stream()
exec and port-forward; a browser-style v5.channel.k8s.io exec with the
session cookie. The gateway authenticates to the cluster with its restricted
credential throughout."""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import json
import os
import pty
import struct
import termios
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes import client as k8s
from kubernetes.stream import portforward, stream

from devstack.cluster import LocalCluster
from tests.support.gatewayclient import admin_session
from tests.support.kubeclients import from_token
from tests.support.pods import (
    ECHO_SERVER,
    HTTP_SERVER,
    RESIZE,
    STATUS,
    STDERR,
    STDIN,
    STDOUT,
    Tenant,
    exec_url,
    forwarded_port,
    read_until,
)

pytestmark = pytest.mark.cluster


async def audit_rows(tenant: Tenant, gateway: Any, database_url: str, action: str) -> list[dict[str, Any]]:
    from tests.support.gatewayclient import admin_session

    root = await admin_session(gateway, database_url)
    answer = await root.call("GET", f"/api/v1/audit?workspace_id={tenant.workspace['id']}&action={action}")
    assert answer.status == 200
    return list(await answer.json())


# -- kubectl ----------------------------------------------------------------


async def test_kubectl_exec_runs_in_the_pod_and_is_audited_first(tenant: Tenant, gateway: Any,
                                                                 database_url: str) -> None:
    pod = await tenant.run_pod("exec sleep 3600")
    ran = await tenant.kubectl("exec", pod, "--", "sh", "-c", "echo out; echo err >&2; cat /etc/hostname")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["out", pod] and ran.stderr.strip() == "err"
    failed = await tenant.kubectl("exec", pod, "--", "sh", "-c", "exit 7")
    assert failed.returncode == 7  # the exit status crosses the relay
    rows = await audit_rows(tenant, gateway, database_url, "ProxyExec")
    commands = [row["details"]["command"] for row in rows]
    assert ["sh", "-c", "exit 7"] in commands and ["sh", "-c", "echo out; echo err >&2; cat /etc/hostname"] in commands
    row = rows[0]
    assert row["user_id"] == tenant.session.user_id and row["ip_address"] == "127.0.0.1"
    assert row["details"]["pod"] == pod and row["details"]["subresource"] == "exec"
    assert row["details"]["container"] == "main"


async def test_kubectl_exec_with_stdin_that_arrives_late(tenant: Tenant) -> None:
    pod = await tenant.run_pod("exec sleep 3600")
    process = await tenant.spawn("exec", "-i", pod, "--", "sh", "-c", "read line; echo got:$line; cat")
    assert process.stdin is not None and process.stdout is not None
    await asyncio.sleep(1.5)  # the session is open and idle before any input
    process.stdin.write(b"first\n")
    await process.stdin.drain()
    await read_until(process.stdout, b"got:first")
    process.stdin.write(b"second\n")
    process.stdin.close()
    rest = await asyncio.wait_for(process.stdout.read(), 30)
    assert rest == b"second\n"
    assert await asyncio.wait_for(process.wait(), 30) == 0


async def test_kubectl_exec_with_a_terminal_and_a_resize(tenant: Tenant) -> None:
    pod = await tenant.run_pod("exec sleep 3600")
    controller, terminal = pty.openpty()
    set_size(controller, rows=24, columns=80)

    def take_terminal() -> None:  # kubectl must own the terminal to get SIGWINCH
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    process = await tenant.spawn("exec", "-it", pod, "--", "sh", stdin=terminal, stdout=terminal,
                                 preexec_fn=take_terminal)
    os.close(terminal)
    try:
        await type_and_expect(controller, b"stty size\r", b"24 80")
        set_size(controller, rows=40, columns=132)
        await type_and_expect(controller, b"stty size\r", b"40 132")
        os.write(controller, b"exit 3\r")
        assert await asyncio.wait_for(process.wait(), 30) == 3
    finally:
        if process.returncode is None:
            process.kill()
        os.close(controller)


def set_size(fd: int, *, rows: int, columns: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))


async def type_and_expect(controller: int, typed: bytes, expected: bytes) -> None:
    os.write(controller, typed)
    seen = b""
    async with asyncio.timeout(30):
        while expected not in seen:
            seen += await asyncio.to_thread(os.read, controller, 4096)


async def test_kubectl_attach_reaches_the_running_process(tenant: Tenant) -> None:
    pod = await tenant.run_pod("while read line; do echo echoed:$line; done", stdin=True)
    process = await tenant.spawn("attach", "-i", pod)
    assert process.stdin is not None and process.stdout is not None
    # attach does not replay: keep writing until the process is attached.
    async with asyncio.timeout(30):
        seen = b""
        while b"echoed:ping" not in seen:
            process.stdin.write(b"ping\n")
            await process.stdin.drain()
            try:
                seen += await asyncio.wait_for(process.stdout.read(4096), 1)
            except TimeoutError:
                pass
    process.kill()
    await process.wait()


async def test_kubectl_logs_follow_streams_new_lines(tenant: Tenant) -> None:
    pod = await tenant.run_pod("i=0; while true; do echo tick-$i; i=$((i+1)); sleep 0.3; done")
    process = await tenant.spawn("logs", "-f", pod)
    assert process.stdout is not None
    await read_until(process.stdout, b"tick-5")  # more lines than existed when it began
    process.kill()
    await process.wait()


async def test_kubectl_port_forward_carries_http(tenant: Tenant) -> None:
    pod = await tenant.run_pod(HTTP_SERVER)
    process = await tenant.spawn("port-forward", pod, ":8080")
    try:
        port = await forwarded_port(process)
        for _ in range(2):  # two connections over one forwarding session
            assert await http_get(port) == "hello-from-the-pod"
    finally:
        process.kill()
        await process.wait()


async def echoed(port: int, payload: bytes) -> bytes:
    """`payload` sent to the pod's echo server through the forwarded port
    while its echo is read back at the same time (both directions in flight
    at once, as a relay that carried one direction at a time could not)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)

    async def send() -> None:
        for start in range(0, len(payload), 64 * 1024):
            writer.write(payload[start:start + 64 * 1024])
            await writer.drain()

    try:
        async with asyncio.timeout(60):
            sending = asyncio.create_task(send())
            back = await reader.readexactly(len(payload))
            await sending
    finally:
        writer.close()
    return back


async def test_kubectl_port_forward_carries_bytes_both_ways_intact(tenant: Tenant) -> None:
    """8 MiB of random bytes to the pod and back over one forwarded
    connection: the tunnel's frames (WebSocket carrying SPDY) cross the
    gateway byte for byte, in both directions at once."""
    pod = await tenant.run_pod(ECHO_SERVER)
    process = await tenant.spawn("port-forward", pod, ":9000")
    try:
        port = await forwarded_port(process)
        payload = os.urandom(8 * 1024 * 1024)
        back = await echoed(port, payload)
        assert hashlib.sha256(back).digest() == hashlib.sha256(payload).digest()
    finally:
        process.kill()
        await process.wait()


async def test_suspension_cuts_a_live_port_forward(tenant: Tenant, gateway: Any, database_url: str) -> None:
    """A port-forward admitted before its workspace was suspended ends when
    it is suspended, within the cut's bound (a clean end, else a cut, in
    CLEAN_END_SECONDS), while bytes are flowing through it: kubectl loses
    its tunnel and exits, and its local connection ends."""
    pod = await tenant.run_pod(ECHO_SERVER)
    process = await tenant.spawn("port-forward", pod, ":9000")
    try:
        port = await forwarded_port(process)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"ping\n")
        assert await asyncio.wait_for(reader.readexactly(5), 30) == b"ping\n"

        async def keep_echoing() -> None:
            # Bytes in flight both ways when the cut comes, until the connection ends.
            try:
                while True:
                    writer.write(b"x" * 4096)
                    await writer.drain()
                    if not await reader.read(65536):
                        return
            except ConnectionError:
                return

        flowing = asyncio.create_task(keep_echoing())
        await asyncio.sleep(0.5)
        root = await admin_session(gateway, database_url)
        started = time.monotonic()
        suspended = await root.call("POST", f"/api/v1/workspaces/{tenant.workspace['id']}/suspend")
        assert suspended.status == 200
        async with asyncio.timeout(30):
            await process.wait()
            await flowing
        assert time.monotonic() - started < 5
        writer.close()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def http_get(port: int) -> str:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}/index.html") as answer:
            assert answer.status == 200
            return (await answer.text()).strip()


async def test_kubectl_cp_both_directions(tenant: Tenant, tmp_path: Path) -> None:
    pod = await tenant.run_pod("exec sleep 3600")
    local = tmp_path / "upload.bin"
    payload = os.urandom(300_000)
    local.write_bytes(payload)
    up = await tenant.kubectl("cp", str(local), f"{pod}:/tmp/upload.bin")
    assert up.returncode == 0, up.stderr
    size = await tenant.kubectl("exec", pod, "--", "wc", "-c", "/tmp/upload.bin")
    assert size.stdout.split()[0] == str(len(payload))
    back = tmp_path / "download.bin"
    down = await tenant.kubectl("cp", f"{pod}:/tmp/upload.bin", str(back))
    assert down.returncode == 0, down.stderr
    assert back.read_bytes() == payload


# -- the official Python client ------------------------------------------------


async def test_python_client_stream_exec_and_port_forward(tenant: Tenant, cluster: LocalCluster,
                                                          gateway: Any) -> None:
    pod = await tenant.run_pod(HTTP_SERVER)
    api_client = from_token(cluster, tenant.session.token, server=tenant.server)
    api_client.configuration.ssl_ca_cert = str(gateway.ca_file)
    core = k8s.CoreV1Api(api_client)

    def exec_and_forward() -> tuple[str, bytes]:
        output = stream(core.connect_get_namespaced_pod_exec, pod, tenant.namespace,
                        command=["sh", "-c", "echo from-python"], stderr=True, stdin=False, stdout=True, tty=False)
        forward = portforward(core.connect_get_namespaced_pod_portforward, pod, tenant.namespace, ports="8080")
        sock = forward.socket(8080)
        sock.setblocking(True)
        sock.sendall(b"GET /index.html HTTP/1.0\r\n\r\n")
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
        sock.close()
        forward.close()
        return output, answer

    output, answer = await asyncio.to_thread(exec_and_forward)
    assert output.strip() == "from-python"
    assert answer.startswith(b"HTTP/1.") and b"hello-from-the-pod" in answer


# -- a browser's WebSocket exec ----------------------------------------------------


def cookie_headers(tenant: Tenant, gateway: Any) -> dict[str, str]:
    """What a browser on the gateway's own origin sends with a WebSocket handshake."""
    origin = str(gateway.make_url("")).rstrip("/")
    return {"Cookie": f"gw_session={tenant.session.token}", "Origin": origin}


async def frames_until_status(socket: aiohttp.ClientWebSocketResponse) -> tuple[dict[int, bytes], dict[str, Any]]:
    received: dict[int, bytes] = {}
    async with asyncio.timeout(30):
        async for message in socket:
            if message.type != aiohttp.WSMsgType.BINARY:
                break
            channel, data = message.data[0], message.data[1:]
            if channel == STATUS:
                return received, dict(json.loads(data))
            received[channel] = received.get(channel, b"") + data
    raise AssertionError(f"the exec ended without a status; got {received}")


async def test_browser_websocket_exec_with_the_session_cookie(tenant: Tenant, gateway: Any) -> None:
    pod = await tenant.run_pod("exec sleep 3600")
    script = ["sh", "-c", "read line; echo out:$line; echo err:$line >&2; exit 3"]
    async with gateway.session.ws_connect(exec_url(tenant, pod, script, tty=False),
                                          headers=cookie_headers(tenant, gateway),
                                          protocols=("v5.channel.k8s.io",)) as socket:
        assert socket.protocol == "v5.channel.k8s.io"
        await socket.send_bytes(bytes([STDIN]) + b"hello\n")
        received, status = await frames_until_status(socket)
    assert received[STDOUT] == b"out:hello\n" and received[STDERR] == b"err:hello\n"
    assert status["status"] == "Failure" and status["reason"] == "NonZeroExitCode"
    assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "3"}]


async def test_browser_websocket_exec_with_a_terminal_resize(tenant: Tenant, gateway: Any) -> None:
    pod = await tenant.run_pod("exec sleep 3600")
    async with gateway.session.ws_connect(exec_url(tenant, pod, ["sh"], tty=True),
                                          headers=cookie_headers(tenant, gateway),
                                          protocols=("v5.channel.k8s.io",)) as socket:
        await socket.send_bytes(bytes([RESIZE]) + json.dumps({"Width": 101, "Height": 33}).encode())
        # Typed once the shell shows its prompt, as a person would: typed
        # before, it can reach the terminal before the shell has set it up.
        prompt = b""
        async with asyncio.timeout(30):
            async for message in socket:
                prompt += message.data[1:] if message.data[0] == STDOUT else b""
                if b"$ " in prompt:
                    break
        await socket.send_bytes(bytes([STDIN]) + b"stty size; exit 0\r")
        received, status = await frames_until_status(socket)
    assert b"33 101" in received[STDOUT]
    assert status["status"] == "Success"


async def test_browser_websocket_exec_from_a_foreign_origin_is_refused(tenant: Tenant, gateway: Any) -> None:
    pod = await tenant.run_pod("exec sleep 3600")
    headers = {**cookie_headers(tenant, gateway), "Origin": "https://evil.example"}
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await gateway.session.ws_connect(exec_url(tenant, pod, ["id"], tty=False), headers=headers,
                                         protocols=("v5.channel.k8s.io",))
    assert refused.value.status == 403
