"""A rolling restart of two gateway replicas behind nginx (Debian's
nginx-light, installed here if missing), under small-GET load and open
watches, as a Deployment's rolling update does it: one replica gets SIGTERM,
exits, starts again on its port and becomes ready; then the other.

What counts as a failure is what a client would not retry: an answer other
than 200 that is not a 503 (a 503 with `Retry-After` is the drain speaking,
and nginx already retries it on the other replica), a reset connection, a
truncated body. Every watch must end cleanly (not be cut) and resume on the
other replica.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from typing import Any

import aiohttp

from bench.stack import NGINX, Stack, Tenant, find_nginx, start_nginx, wait_for_port
from devstack.processes import free_port


def nginx_binary() -> str:
    """The balancer needs nginx: run without `make bench` (which installs it), it installs it itself."""
    found = find_nginx()
    if found:
        return found
    subprocess.run(["apt-get", "install", "-y", "-qq", "nginx-light"], check=False, capture_output=True,
                   env={"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    if not NGINX.exists():
        subprocess.run(["apt-get", "update", "-qq"], check=True, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", "nginx-light"], check=True, capture_output=True,
                       env={"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    return str(NGINX)


def _balancer(stack: Stack, ports: list[int]) -> tuple[subprocess.Popen[bytes], int]:
    directory = stack.root / "balancer"
    directory.mkdir(exist_ok=True)
    port = free_port()
    servers = "\n".join(f"    server 127.0.0.1:{p} max_fails=0;" for p in ports)
    process = start_nginx(directory, f"""
  upstream gateways {{
{servers}
    keepalive 64;
  }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass https://gateways;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $host;
      proxy_ssl_trusted_certificate {stack.ca_file};
      proxy_ssl_verify on;
      proxy_ssl_name localhost;
      # A replica that is down or draining (503) is skipped for idempotent requests.
      proxy_next_upstream error timeout http_503;
      proxy_buffering off;
      proxy_read_timeout 1h;
    }}
  }}
""", nginx_binary())
    wait_for_port(port, "nginx")
    return process, port


async def _getter(session: aiohttp.ClientSession, url: str, headers: dict[str, str], stop: asyncio.Event,
                  tally: dict[str, int]) -> None:
    while not stop.is_set():
        try:
            async with session.get(url, headers=headers) as answer:
                await answer.read()
                key = "ok" if answer.status == 200 else ("retryable" if answer.status == 503 else "failed")
                tally[key] += 1
        except (aiohttp.ClientError, asyncio.TimeoutError):
            tally["failed"] += 1


async def _watcher(session: aiohttp.ClientSession, url: str, headers: dict[str, str], stop: asyncio.Event,
                   tally: dict[str, int]) -> None:
    """A client that watches, and opens a new watch when one ends cleanly."""
    while not stop.is_set():
        try:
            async with session.get(url, headers=headers) as answer:
                if answer.status != 200:
                    tally["watch_refused"] += 1
                    await asyncio.sleep(0.2)
                    continue
                tally["watch_opened"] += 1
                async for _ in answer.content.iter_any():
                    pass
                tally["watch_ended_cleanly"] += 1
        except (aiohttp.ClientError, asyncio.TimeoutError):
            if not stop.is_set():
                tally["watch_cut"] += 1


async def rolling_restart(stack: Stack, tenant: Tenant, *, getters: int, watches: int) -> dict[str, Any]:
    ports = [free_port(), free_port()]
    replicas = {}
    for index, port in enumerate(ports):
        url, process = stack.launch_gateway(f"replica-{index}", port=port)
        stack.wait_ready(url, process, f"replica-{index}")
        replicas[index] = (url, process)
    balancer, balancer_port = _balancer(stack, ports)
    base = f"http://127.0.0.1:{balancer_port}/k8s/{tenant.workspace_id}/api/v1/namespaces/{tenant.namespace}"
    headers = {"Authorization": f"Bearer {tenant.session_token}"}
    tally = {key: 0 for key in ("ok", "retryable", "failed", "watch_opened", "watch_ended_cleanly", "watch_cut",
                                "watch_refused")}
    exits: list[dict[str, Any]] = []
    stop = asyncio.Event()
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as session:
        workers = [asyncio.create_task(_getter(session, f"{base}/configmaps/small-0", headers, stop, tally))
                   for _ in range(getters)]
        workers += [asyncio.create_task(_watcher(session, f"{base}/configmaps?watch=1&labelSelector=bench%3Drolling",
                                                 headers, stop, tally)) for _ in range(watches)]
        try:
            await asyncio.sleep(3)
            opened_before = tally["watch_opened"]
            for index, port in enumerate(ports):
                url, process = replicas[index]
                began = time.monotonic()
                process.send_signal(signal.SIGTERM)
                code = await asyncio.to_thread(process.wait, 60)
                exits.append({"replica": index, "exit_code": code, "stop_seconds": time.monotonic() - began})
                url, process = stack.launch_gateway(f"replica-{index}-again", port=port)
                await asyncio.to_thread(stack.wait_ready, url, process, f"replica-{index}-again")
                replicas[index] = (url, process)
                await asyncio.sleep(3)
        finally:
            stop.set()
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
    balancer.terminate()
    balancer.wait(10)
    for _url, process in replicas.values():
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    return {**tally, "exits": exits, "watches": watches, "getters": getters,
            "watches_resumed": tally["watch_opened"] - opened_before}


def rolling_verdicts(r: dict[str, Any]) -> list[tuple[str, str, bool]]:
    clean_exits = all(e["exit_code"] == 0 for e in r["exits"])
    return [
        ("rolling restart: 0 failed requests", f"{r['failed']} of {r['ok'] + r['retryable'] + r['failed']}",
         r["failed"] == 0),
        ("rolling restart: every watch resumed", f"{r['watches_resumed']} resumes, {r['watch_cut']} cut",
         r["watch_cut"] == 0 and r["watches_resumed"] >= r["watches"]),
        ("rolling restart: replicas exit 0", ", ".join(f"{e['exit_code']} in {e['stop_seconds']:.1f} s"
                                                       for e in r["exits"]), clean_exits),
    ]
