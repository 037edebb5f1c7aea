"""Streams into a real pod on the local node, through the gateway and direct
to the API server, side by side in interleaved rounds:

* exec round trip: one byte written to `cat`'s stdin over a v5.channel.k8s.io
  WebSocket and read back from its stdout;
* port-forward throughput: a 64 MiB file from busybox httpd through the real
  `kubectl port-forward` (WebSocket), pointed at the gateway or at the API
  server;
* memory per open exec session: the gateway's RSS with N idle sessions open.
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import yaml

from bench.stack import Stack, Tenant
from bench.workloads.common import QUICK, ROUNDS, interleaved
from devstack.nodeparts import BUSYBOX_IMAGE

BLOB_MIB = 64
_STDIN, _STDOUT = 0, 1


def _pod(name: str, script: str) -> dict[str, Any]:
    """Pod Security `restricted` (tiers' default): as busybox's nobody, with
    the runtime's seccomp profile, no escalation and no capabilities."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 0,
                     "securityContext": {"runAsNonRoot": True, "runAsUser": 65534,
                                         "seccompProfile": {"type": "RuntimeDefault"}},
                     "containers": [{
                         "name": "main", "image": BUSYBOX_IMAGE, "command": ["sh", "-c", script],
                         "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}]}}


def _run_pods(stack: Stack, tenant: Tenant) -> None:
    assert stack.cluster is not None
    pods = [_pod("bench-exec", "exec sleep 86400"),
            _pod("bench-http", f"mkdir -p /tmp/www && dd if=/dev/zero of=/tmp/www/blob bs=1M count={BLOB_MIB}"
                               " 2>/dev/null && exec httpd -f -p 8080 -h /tmp/www")]
    stack.cluster.kubectl_run("-n", tenant.namespace, "apply", "-f", "-",
                              input="\n---\n".join(json.dumps(pod) for pod in pods))
    stack.cluster.kubectl_run("-n", tenant.namespace, "wait", "--for=condition=Ready", "pod/bench-exec",
                              "pod/bench-http", "--timeout=120s")


def _endpoints(stack: Stack, tenant: Tenant) -> dict[str, tuple[str, str, str]]:
    """target -> (server, bearer token, CA file): the same tenant both ways."""
    assert stack.cluster is not None
    return {
        "direct": (stack.cluster.server, tenant.sa_token, str(stack.cluster.ca_file)),
        "gateway": (f"{stack.gateway_url}/k8s/{tenant.workspace_id}", tenant.session_token, str(stack.ca_file)),
    }


def _exec_url(server: str, namespace: str) -> str:
    return f"{server}/api/v1/namespaces/{namespace}/pods/bench-exec/exec?command=cat&stdin=true&stdout=true"


async def _open_cat(session: aiohttp.ClientSession, server: str, token: str, namespace: str) -> aiohttp.ClientWebSocketResponse:
    return await session.ws_connect(_exec_url(server, namespace), headers={"Authorization": f"Bearer {token}"},
                                    protocols=("v5.channel.k8s.io",), origin=None)


async def _round_trips(server: str, token: str, ca: str, namespace: str, count: int) -> list[float]:
    context = ssl.create_default_context(cafile=ca)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
        socket = await _open_cat(session, server, token, namespace)
        timings = []
        try:
            for _ in range(count):
                began = time.perf_counter()
                await socket.send_bytes(bytes([_STDIN]) + b"x")
                while True:
                    message = await socket.receive()
                    if message.type == aiohttp.WSMsgType.BINARY and message.data[:1] == bytes([_STDOUT]):
                        break
                    if message.type != aiohttp.WSMsgType.BINARY:
                        raise RuntimeError(f"exec ended: {message.type}")
                timings.append((time.perf_counter() - began) * 1000)
        finally:
            await socket.close()
    return timings


def _kubeconfig(folder: Path, name: str, server: str, token: str, ca: str, namespace: str) -> Path:
    path = folder / f"pods-{name}.kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, "certificate-authority": ca}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": namespace}}],
        "current-context": "c",
    }))
    return path


async def _port_forward(stack: Stack, kubeconfig: Path) -> tuple[subprocess.Popen[bytes], int]:
    assert stack.cluster is not None
    process = subprocess.Popen([str(stack.cluster.kubectl), f"--kubeconfig={kubeconfig}", "port-forward",
                                "pod/bench-http", ":8080"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert process.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), 60)
    found = re.search(rb"127\.0\.0\.1:(\d+) ->", line)
    if not found:
        process.kill()
        raise RuntimeError(f"kubectl port-forward said {line!r}")
    return process, int(found.group(1))


async def _download_mib_per_s(port: int) -> float:
    async with aiohttp.ClientSession() as session:
        began = time.perf_counter()
        async with session.get(f"http://127.0.0.1:{port}/blob") as answer:
            received = 0
            async for chunk in answer.content.iter_chunked(1 << 20):
                received += len(chunk)
        elapsed = time.perf_counter() - began
    if received != BLOB_MIB << 20:
        raise RuntimeError(f"port-forward delivered {received} of {BLOB_MIB << 20} bytes")
    return BLOB_MIB / elapsed


def _cpu_by_process() -> dict[int, tuple[str, float]]:
    """CPU seconds of every process this run started (the control plane, the
    node, the gateway, kubectl), by pid."""
    found = {}
    for process in psutil.Process().children(recursive=True):
        try:
            times = process.cpu_times()
            found[process.pid] = (process.name(), times.user + times.system)
        except psutil.Error:
            continue
    return found


def _cpu_spent(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds spent between two `_cpu_by_process` readings, by process name. Pure."""
    spent: dict[str, float] = {}
    for pid, (name, seconds) in after.items():
        spent[name] = spent.get(name, 0.0) + seconds - before.get(pid, (name, 0.0))[1]
    return {name: round(seconds, 3) for name, seconds in sorted(spent.items()) if seconds >= 0.005}


async def _kib_per_exec_session(stack: Stack, server: str, token: str, ca: str, namespace: str,
                                sessions: int) -> float:
    context = ssl.create_default_context(cafile=ca)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, limit=0)) as session:
        await asyncio.sleep(1)
        before = stack.gateway_rss_mib()
        sockets = []
        for _ in range(0, sessions, 25):
            sockets += await asyncio.gather(*(_open_cat(session, server, token, namespace) for _ in range(25)))
        await asyncio.sleep(2)
        after = stack.gateway_rss_mib()
        await asyncio.gather(*(socket.close() for socket in sockets))
    return (after - before) * 1024 / len(sockets)


async def pod_streams(stack: Stack, tenant: Tenant, *, order: list[str], round_trips: int,
                      sessions: int) -> dict[str, Any]:
    """`order` interleaves the targets "direct" and "gateway" over the rounds."""
    await asyncio.to_thread(_run_pods, stack, tenant)
    endpoints = _endpoints(stack, tenant)
    rtt: dict[str, list[float]] = {target: [] for target in endpoints}
    throughput: dict[str, list[float]] = {target: [] for target in endpoints}
    # CPU seconds per round of port-forward: the gateway's (what it adds to
    # the two cores every other process of the path shares), and kubectl's
    # on either path (what the gateway's way of writing costs its client).
    gateway_cpu: list[float] = []
    kubectl_cpu: dict[str, list[float]] = {target: [] for target in endpoints}
    # And every process of the run's, by name: where a round's CPU goes on either path.
    round_cpu: dict[str, list[dict[str, float]]] = {target: [] for target in endpoints}
    forwards = {}
    try:
        for target, (server, token, ca) in endpoints.items():
            forwards[target] = await _port_forward(stack, _kubeconfig(stack.root, target, server, token, ca,
                                                                      tenant.namespace))
        for target in order:
            server, token, ca = endpoints[target]
            rtt[target] += await _round_trips(server, token, ca, tenant.namespace, round_trips)
            kubectl, port = forwards[target]
            cpu_before = stack.cpu_seconds(stack.gateway), stack.cpu_seconds(kubectl)
            every_before = _cpu_by_process()
            throughput[target].append(await _download_mib_per_s(port))
            round_cpu[target].append(_cpu_spent(every_before, _cpu_by_process()))
            kubectl_cpu[target].append(stack.cpu_seconds(kubectl) - cpu_before[1])
            if target == "gateway":
                gateway_cpu.append(stack.cpu_seconds(stack.gateway) - cpu_before[0])
    finally:
        for process, _port in forwards.values():
            process.kill()
            process.wait()
    server, token, ca = endpoints["gateway"]
    per_session = await _kib_per_exec_session(stack, server, token, ca, tenant.namespace, sessions)

    def quantile(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {
        "exec_round_trip": {target: {"p50_ms": statistics.median(values), "p99_ms": quantile(values, 0.99),
                                     "samples": len(values)} for target, values in rtt.items()},
        "port_forward_mib_per_s": {target: statistics.median(values) for target, values in throughput.items()},
        # Every round, in order: the spread between rounds is as large as the gap to the target.
        "port_forward_rounds_mib_per_s": throughput,
        "port_forward_paired_ratios": [round(ratio, 3) for ratio in paired_ratios(throughput)],
        "port_forward_gateway_cpu_s_per_round": gateway_cpu,
        "port_forward_kubectl_cpu_s_per_round": kubectl_cpu,
        "port_forward_cpu_s_by_process_per_round": round_cpu,
        "kib_per_exec_session": per_session,
        "exec_sessions": sessions,
    }


def paired_ratios(rounds: dict[str, list[float]]) -> list[float]:
    """Each batch's gateway round over its direct round (the two run back to
    back, in a shuffled order: `interleaved`), so a background that moves
    between batches moves both sides of a ratio. Pure."""
    return [gateway / direct for direct, gateway in zip(rounds["direct"], rounds["gateway"])]


def pod_verdicts(r: dict[str, Any]) -> list[tuple[str, str, bool]]:
    rtt, forward = r["exec_round_trip"], r["port_forward_mib_per_s"]
    rtt_ratio = rtt["gateway"]["p50_ms"] / rtt["direct"]["p50_ms"]
    forward_ratio = forward["gateway"] / forward["direct"]
    return [
        ("exec round trip p50 <= 1.3x direct", f"{rtt_ratio:.2f}x", rtt_ratio <= 1.3),
        ("port-forward >= 0.8x direct", f"{forward_ratio:.2f}x", forward_ratio >= 0.8),
        ("<= 150 KiB per exec session", f"{r['kib_per_exec_session']:.0f} KiB", r["kib_per_exec_session"] <= 150),
    ]


def print_pods(r: dict[str, Any]) -> None:
    print("\npod streams          target       exec p50 ms  exec p99 ms  port-forward MiB/s  (rounds)")
    for target, v in r["exec_round_trip"].items():
        rounds = ", ".join(f"{value:.0f}" for value in r["port_forward_rounds_mib_per_s"][target])
        print(f"  {'':<18} {target:<14} {v['p50_ms']:>9.2f}  {v['p99_ms']:>11.2f}  "
              f"{r['port_forward_mib_per_s'][target]:>12.1f}        ({rounds})")
    paired = r.get("port_forward_paired_ratios", [])
    if paired:
        print(f"  port-forward ratio per batch: {', '.join(f'{ratio:.2f}' for ratio in paired)}"
              f" (median {statistics.median(paired):.2f})")

    def seconds(values: list[float]) -> str:
        return ", ".join(f"{value:.3f}" for value in values)
    print(f"  CPU s per {BLOB_MIB} MiB round: gateway {seconds(r['port_forward_gateway_cpu_s_per_round'])}")
    for target, values in r["port_forward_kubectl_cpu_s_per_round"].items():
        print(f"  {'':<20} kubectl, {target}: {seconds(values)}")
    for target, rounds in r["port_forward_cpu_s_by_process_per_round"].items():
        for spent in rounds:
            print(f"  {target:<8} total {sum(spent.values()):.2f} s: {spent}")


async def _standalone(stack: Stack) -> dict[str, Any]:
    """The pod-stream rows alone, as in a full run (`python -m bench.pods`)."""
    async with stack.session() as session:
        tenant = await stack.new_tenant(session)
    return await pod_streams(stack, tenant, order=interleaved(["direct", "gateway"], ROUNDS),
                             round_trips=200 if QUICK else 1000, sessions=50 if QUICK else 200)


if __name__ == "__main__":
    from bench.alone import run_alone

    run_alone("pod-streams", _standalone, pod_verdicts, print_pods)
