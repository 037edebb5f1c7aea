"""Single sign-on against a real Keycloak (devstack.keycloak, the realms the
SSO tests use), on a gateway of its own with that Keycloak as a provider:

* a warm proxied GET (the main workload's small GET through
  `/k8s/<workspace>/...`, 1 client) with `Authorization: Bearer` holding a
  gateway session token of the console's scope (written by the harness as
  the sign-in writes one: a device sign-in's session may not go through
  the proxy) or the Keycloak ID token of the same user, on one
  gateway process, the two alternating in short blocks (bench/paired_load.py):
  p50, p99 and the gateway's CPU per GET, compared pair of blocks by pair
  (the median of the pairs' ratios); its database checkouts meanwhile;
* calls to the provider meanwhile: the gateway reaches Keycloak only through
  a TCP hop run here, which counts connections, bytes and HTTP request lines
  sent to Keycloak. Keycloak names its issuer after the address it is asked
  at, so the tokens carry the hop's address as `iss` and the gateway's
  discovery and key fetches can only go through it; the first use of an ID
  token (discovery and JWKS) must show there, or the run fails;
* `tenant-gateway credential` run as kubectl runs it (the console script, a
  new process each time) after `tenant-gateway login` (device sign-in,
  approved with the ID token): wall time of answers from the cached token.

The SSO gateway and the command line run this source tree (PYTHONPATH), not
whatever tree the editable install points at.

`python -m bench.sso` runs it alone (BENCH_QUICK=1: a smoke run).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import yaml

from bench.paired_load import WARM_UP
from bench.stack import Stack, run_load, stop_process, temp_root
from bench.workloads.common import paired_ratio
from devstack.keycloak import LocalKeycloak, ensure_distribution, java_home, start_keycloak
from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.models import AuditEvent
from provisioning.secrets import Secret
from proxy.auth import sessions
from proxy.cli.client import store

REALM, USER = "org-a", "bob"
CLI = Path(sys.executable).with_name("tenant-gateway")
SOURCE = Path(__file__).resolve().parents[1]
RATIO_TOLERANCE = 1.05
"""The issue asks for "no more than a session token": 1.0x, with 5 % for the
noise of timing two nearly identical paths on a shared machine."""
CREDENTIAL_TARGET_MS = 150.0
_REQUEST_LINES = (b" HTTP/1.1\r\n", b" HTTP/1.0\r\n")


class CountingHop:
    """A plain TCP relay in front of Keycloak that counts what its clients send."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.connections = self.bytes = self.requests = 0
        self.url = ""
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    def counts(self) -> dict[str, int]:
        return {"connections": self.connections, "requests": self.requests, "bytes": self.bytes}

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        pair = {writer, upstream_writer}
        self._writers |= pair
        await asyncio.gather(self._pipe(reader, upstream_writer, counted=True),
                             self._pipe(upstream_reader, writer, counted=False), return_exceptions=True)
        self._writers -= pair

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, counted: bool) -> None:
        tail = b""
        try:
            while data := await reader.read(1 << 16):
                if counted:
                    self.bytes += len(data)
                    seen = tail + data  # a request line split between two reads is counted once
                    self.requests += sum(seen.count(line) for line in _REQUEST_LINES)
                    tail = seen[-(len(_REQUEST_LINES[0]) - 1):]
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        if self._server is not None:
            await self._server.wait_closed()


def settings(quick: bool) -> dict[str, int]:
    """The sizes of a full run and of a smoke run (BENCH_QUICK=1)."""
    if quick:
        return {"blocks": 10, "block_requests": 40, "invocations": 20}
    return {"blocks": 50, "block_requests": 100, "invocations": 50}


def preflight() -> None:
    """Keycloak's distribution and a Java for it, found (or fetched) before a
    long run starts rather than after it."""
    ensure_distribution()
    java_home()


def _difference(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {key: after[key] - before[key] for key in after}


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _id_token(keycloak: LocalKeycloak) -> str:
    # In a thread: the hop it goes through runs on this event loop.
    return str((await asyncio.to_thread(keycloak.password_grant, REALM, USER))["id_token"])


async def _console_session(stack: Stack, user_id: str) -> str:
    """A session token of the SSO user with a browser's scope, written as the
    console's sign-in writes it: a device sign-in's session may only mint
    credentials, not go through the proxy (proxy.auth.scopes)."""
    db = await Database.connect(stack.database_url, min_size=1, max_size=1)
    try:
        session_id, now = uuid.uuid4(), datetime.datetime.now(datetime.timezone.utc)
        token, expires = sessions.mint(Secret(stack.session_secret), uuid.UUID(user_id), session_id, now, 3600)
        opened = await repo.create_session(db, session_id, uuid.UUID(user_id), expires, AuditEvent(
            "Login", uuid.UUID(user_id), None, None, {"result": "success", "bench": "sso"}))
        assert opened is not None
        return token
    finally:
        await db.close()


async def _workspace(session: aiohttp.ClientSession, gateway: str, id_token: str) -> tuple[str, str, str]:
    """A workspace of the SSO user and the main workload's small ConfigMap in
    it, made through the gateway: its id, namespace and owner."""
    async with session.post(f"{gateway}/api/v1/workspaces/init", json={}, headers=_bearer(id_token)) as answer:
        if answer.status != 201:
            raise RuntimeError(f"workspace init with the ID token: {answer.status} {await answer.text()}")
        workspace = await answer.json()
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "small-0"}, "data": {"v": "x" * 64}}
    async with session.post(f"{gateway}/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps",
                            json=body, headers=_bearer(id_token)) as answer:
        if answer.status != 201:
            raise RuntimeError(f"ConfigMap through the gateway: {answer.status} {await answer.text()}")
    return str(workspace["id"]), str(workspace["namespace"]), str(workspace["user_id"])


async def _device_login(session: aiohttp.ClientSession, gateway: str, ca_file: Path, env: dict[str, str],
                        id_token: str) -> None:
    """`tenant-gateway login`, approved by the SSO user with the ID token, as the kubectl-exec test does it."""
    process = await asyncio.create_subprocess_exec(
        str(CLI), "login", "--gateway", gateway, "--no-browser", "--ca-file", str(ca_file), "--poll-interval", "0.2",
        env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    assert process.stderr is not None
    shown = ""
    while "approve the code" not in shown:
        line = await asyncio.wait_for(process.stderr.readline(), 60)
        if not line:
            raise RuntimeError(f"tenant-gateway login said: {shown}")
        shown += line.decode()
    found = re.search(r"approve the code (\S+)", shown)
    assert found is not None
    async with session.post(f"{gateway}/api/v1/auth/device/approve", json={"user_code": found.group(1)},
                            headers=_bearer(id_token)) as answer:
        if answer.status != 204:
            raise RuntimeError(f"device approval: {answer.status} {await answer.text()}")
    _, err = await asyncio.wait_for(process.communicate(), 60)
    if process.returncode != 0:
        raise RuntimeError(f"tenant-gateway login: {shown}{err.decode()}")


def _credential(env: dict[str, str], gateway: str, workspace: str) -> tuple[float, str]:
    """One `tenant-gateway credential`, as kubectl's exec plugin runs it: wall ms, and the token it printed."""
    began = time.perf_counter()
    done = subprocess.run([str(CLI), "credential", "--gateway", gateway, "--workspace", workspace],
                          env=env, capture_output=True, text=True, timeout=60)
    elapsed = (time.perf_counter() - began) * 1000
    if done.returncode != 0:
        raise RuntimeError(f"tenant-gateway credential: {done.stderr}")
    answer = json.loads(done.stdout)
    if answer.get("kind") != "ExecCredential" or not answer.get("status", {}).get("token"):
        raise RuntimeError(f"tenant-gateway credential printed {done.stdout[:200]!r}")
    return elapsed, str(answer["status"]["token"])


async def _exec_info(session: aiohttp.ClientSession, gateway: str, token: str, workspace: str) -> str:
    """KUBERNETES_EXEC_INFO as kubectl sets it for the workspace's `format=exec` kubeconfig (provideClusterInfo)."""
    url = f"{gateway}/api/v1/workspaces/credentials/kubeconfig?format=exec&workspace_id={workspace}"
    async with session.get(url, headers=_bearer(token)) as answer:
        if answer.status != 200:
            raise RuntimeError(f"exec kubeconfig: {answer.status} {await answer.text()}")
        cluster = yaml.safe_load(await answer.text())["clusters"][0]["cluster"]
    return json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "spec": {
        "interactive": False, "cluster": {"server": cluster["server"],
                                          "certificate-authority-data": cluster.get("certificate-authority-data")}}})


async def _checkouts(session: aiohttp.ClientSession, metrics_url: str) -> float:
    """Connections the gateway took from its database pool so far (its own counter)."""
    async with session.get(f"{metrics_url}/metrics") as answer:
        text = await answer.text()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("tenant_gateway_database_checkouts_total"))


def _paired_load(job: dict[str, Any]) -> dict[str, Any]:
    return run_load(job, module="bench.paired_load", timeout=1200)


async def sso(stack: Stack, *, blocks: int, block_requests: int, invocations: int) -> dict[str, Any]:
    """`blocks` pairs of `block_requests` GETs, one of each pair per token, then `invocations` credentials."""
    began = time.monotonic()
    keycloak = await asyncio.to_thread(start_keycloak, stack.root / "keycloak")
    keycloak_start_seconds = time.monotonic() - began
    process: subprocess.Popen[bytes] | None = None
    address = urlsplit(keycloak.base_url)
    hop = CountingHop((address.hostname or "127.0.0.1", address.port or 80))
    try:
        await hop.start()
        via_hop = dataclasses.replace(keycloak, base_url=hop.url)
        providers = stack.root / "oidc-providers.yaml"
        providers.write_text(yaml.safe_dump([via_hop.provider_config(REALM)]))
        providers.chmod(0o600)
        gateway, process = stack.launch_gateway("sso", source=SOURCE,
                                                extra_env={"GATEWAY_OIDC_PROVIDERS": str(providers)})
        stack.wait_ready(gateway, process, "sso")
        cli_env = {**os.environ, "XDG_CONFIG_HOME": str(stack.root / "sso-cli"), "PYTHONPATH": str(SOURCE)}
        async with stack.session() as session:
            first = await _id_token(via_hop)
            before = hop.counts()
            workspace, namespace, user_id = await _workspace(session, gateway, first)  # the first ID token ever verified
            cold = _difference(hop.counts(), before)
            if cold["requests"] == 0:  # then a 0 below would prove nothing
                raise RuntimeError("the gateway's calls to Keycloak did not pass the counting hop")
            await _device_login(session, gateway, stack.ca_file, cli_env, first)
            session_token = str(store.read(store.credentials_path(cli_env))["gateways"][gateway]["session"])

            # A fresh ID token (Keycloak's live 300 s) for the timed blocks;
            # its first use is verified with the keys already held. Against a
            # session of the console's scope: the command line's may not proxy.
            tokens = {"session": await _console_session(stack, user_id), "id_token": await _id_token(via_hop)}
            url = f"{gateway}/k8s/{workspace}/api/v1/namespaces/{namespace}/configmaps/small-0"
            before = hop.counts()
            for token in tokens.values():
                async with session.get(url, headers=_bearer(token)) as answer:
                    if answer.status != 200:
                        raise RuntimeError(f"GET through the SSO gateway: {answer.status} {await answer.text()}")
                    await answer.read()
            new_token = _difference(hop.counts(), before)
            before, checked_out = hop.counts(), await _checkouts(session, stack.metrics_urls["sso"])
            gets = await asyncio.to_thread(_paired_load, {
                "url": url, "ca_file": str(stack.ca_file), "pid": process.pid, "blocks": blocks,
                "block_requests": block_requests,
                "headers": {which: _bearer(token) for which, token in tokens.items()}})
            warm = _difference(hop.counts(), before)
            checkouts = await _checkouts(session, stack.metrics_urls["sso"]) - checked_out
            for which, measured in gets.items():
                if measured["errors"]:  # a refused token (an ID token past its exp) would be timed as a fast GET
                    raise RuntimeError(f"{measured['errors']} of {measured['requests']} GETs with the {which} failed")
            answered = sum(measured["requests"] + WARM_UP for measured in gets.values())
            # What kubectl hands the plugin (older revisions ignore it).
            cli_env["KUBERNETES_EXEC_INFO"] = await _exec_info(session, gateway, session_token, workspace)

        first_ms, minted = await asyncio.to_thread(_credential, cli_env, gateway, workspace)
        timings = []
        for _ in range(invocations):
            elapsed, printed = await asyncio.to_thread(_credential, cli_env, gateway, workspace)
            if printed != minted:
                raise RuntimeError("tenant-gateway credential minted again instead of answering from its cache")
            timings.append(elapsed)
    finally:
        stop_process(process)
        await hop.stop()
        await asyncio.to_thread(keycloak.stop)
    session, id_token = gets["session"], gets["id_token"]
    return {
        "get_c1": gets,
        "id_token_vs_session": {
            "p50": paired_ratio(session["p50_ms_blocks"], id_token["p50_ms_blocks"]),
            "cpu_per_get": paired_ratio(session["cpu_ms_per_request_blocks"], id_token["cpu_ms_per_request_blocks"]),
            "pairs": blocks},
        "provider_calls": {"cold_first_id_token": cold, "new_id_token_first_use": new_token, "warm": warm,
                           "warm_gets": answered},
        "database_checkouts_in_warm_gets": checkouts,
        "credential": {"first_ms": first_ms, "p50_ms": statistics.median(timings),
                       "p99_ms": _quantile(timings, 0.99), "invocations": len(timings)},
        "keycloak_start_seconds": keycloak_start_seconds,
    }


def sso_verdicts(r: dict[str, Any]) -> list[tuple[str, str, bool]]:
    warm, credential = r["provider_calls"]["warm"], r["credential"]
    p50, cpu = r["id_token_vs_session"]["p50"], r["id_token_vs_session"]["cpu_per_get"]
    return [
        (f"ID-token GET c1 p50 <= {RATIO_TOLERANCE}x session", f"{p50:.2f}x", p50 <= RATIO_TOLERANCE),
        (f"ID-token CPU/GET <= {RATIO_TOLERANCE}x session", f"{cpu:.2f}x", cpu <= RATIO_TOLERANCE),
        ("ID-token warm GETs: 0 provider calls",
         f"{warm['requests']} in {r['provider_calls']['warm_gets']} GETs",
         warm["requests"] == 0 and warm["bytes"] == 0 and warm["connections"] == 0),
        (f"credential (cached) p50 < {CREDENTIAL_TARGET_MS:.0f} ms", f"{credential['p50_ms']:.0f} ms",
         credential["p50_ms"] < CREDENTIAL_TARGET_MS),
    ]


def print_sso(r: dict[str, Any]) -> None:
    print("\nSSO warm GET c1      bearer         p50 ms   p99 ms   CPU ms/request")
    for which, v in r["get_c1"].items():
        print(f"  {'':<18} {which:<14} {v['p50_ms']:>6.2f}  {v['p99_ms']:>7.2f}  {v['cpu_ms_per_request']:>8.3f}")
    paired = r["id_token_vs_session"]
    print(f"  ID token / session token, median of {paired['pairs']} pairs of blocks: p50 {paired['p50']:.3f}x, "
          f"CPU per GET {paired['cpu_per_get']:.3f}x")
    calls = r["provider_calls"]
    print(f"  calls to Keycloak: first ID token {calls['cold_first_id_token']['requests']}, "
          f"a new ID token's first use {calls['new_id_token_first_use']['requests']}, "
          f"warm {calls['warm']['requests']} ({calls['warm']['bytes']} bytes) in {calls['warm_gets']} GETs "
          f"(database checkouts: {r['database_checkouts_in_warm_gets']:.0f})")
    c = r["credential"]
    print(f"  tenant-gateway credential: cached p50 {c['p50_ms']:.0f} ms, p99 {c['p99_ms']:.0f} ms "
          f"({c['invocations']} runs); the first, which mints, {c['first_ms']:.0f} ms")


async def _alone() -> None:
    quick = os.environ.get("BENCH_QUICK") == "1"
    preflight()
    stack = Stack(temp_root())
    try:
        stack.start()
        result = await sso(stack, **settings(quick))
    finally:
        stack.stop()
    print(json.dumps(result, indent=2))
    print_sso(result)
    for name, value, ok in sso_verdicts(result):
        print(f"  {name:<40} {value:>16}  {'yes' if ok else 'NO'}")


if __name__ == "__main__":
    asyncio.run(_alone())
