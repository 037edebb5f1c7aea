"""Kubeconfigs that refresh themselves, driven by the real kubectl.

Given a user who ran `tenant-gateway login` (device sign-in, approved through
the API) and downloaded a `format=exec` kubeconfig, when kubectl runs (two
processes at once), then `tenant-gateway credential` mints one token between
them, caches it, and everything stops working at logout.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import ssl
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from devstack.cluster import LocalCluster
from tests.support.gatewayclient import Session, admin_session, register_and_login

pytestmark = pytest.mark.cluster
BIN = Path(sys.executable).parent


async def run(env: dict[str, str], *argv: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(*argv, env=env, stdout=asyncio.subprocess.PIPE,
                                                   stderr=asyncio.subprocess.PIPE)
    out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def cli_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "PATH": f"{BIN}:{os.environ['PATH']}"}


async def device_login(gateway: Any, user: Session, env: dict[str, str]) -> None:
    """`tenant-gateway login`, approved by the signed-in user through the API."""
    url = str(gateway.make_url("")).rstrip("/")
    process = await asyncio.create_subprocess_exec(
        str(BIN / "tenant-gateway"), "login", "--gateway", url, "--no-browser", "--ca-file", str(gateway.ca_file),
        "--poll-interval", "0.2", env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert process.stderr is not None
    shown = ""
    while "approve the code" not in shown:
        line = await process.stderr.readline()
        assert line, shown
        shown += line.decode()
    user_code = re.search(r"approve the code (\S+)", shown).group(1)  # type: ignore[union-attr]
    approved = await user.call("POST", "/api/v1/auth/device/approve", json={"user_code": user_code})
    assert approved.status == 204, await approved.text()
    _, err = await process.communicate()
    assert process.returncode == 0, shown + err.decode()


async def exec_kubeconfig(user: Session, workspace_id: str) -> dict[str, Any]:
    answer = await user.call("GET", "/api/v1/workspaces/credentials/kubeconfig?format=exec&workspace_id="
                             + workspace_id)
    assert answer.status == 200, await answer.text()
    return dict(yaml.safe_load(await answer.text()))


async def exec_info(user: Session, workspace_id: str) -> str:
    """KUBERNETES_EXEC_INFO as kubectl sets it for the workspace's own exec kubeconfig (run by hand here)."""
    cluster = (await exec_kubeconfig(user, workspace_id))["clusters"][0]["cluster"]
    return json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                       "spec": {"interactive": False, "cluster": {
                           "server": cluster["server"],
                           "certificate-authority-data": cluster.get("certificate-authority-data")}}})


async def test_kubectl_with_an_exec_kubeconfig_after_device_login_mints_one_token_for_two_processes(
        gateway: Any, cluster: LocalCluster, database_url: str, tmp_path: Path) -> None:
    user = await register_and_login(gateway)
    workspace = await user.init()
    env = cli_env(tmp_path)
    await device_login(gateway, user, env)
    credentials = tmp_path / "config" / "tenant-gateway" / "credentials.json"
    assert stat.S_IMODE(credentials.stat().st_mode) == 0o600

    answer = await user.call("GET", "/api/v1/workspaces/credentials/kubeconfig?format=exec")
    assert answer.status == 200
    text = await answer.text()
    assert "token:" not in text
    kubeconfig = tmp_path / "exec.kubeconfig"
    kubeconfig.write_text(text)
    exec_args = yaml.safe_load(text)["users"][0]["user"]["exec"]["args"]
    assert exec_args[-1] == workspace["id"]

    kubectl = [str(cluster.kubectl), "--kubeconfig", str(kubeconfig)]
    both = await asyncio.gather(run(env, *kubectl, "get", "configmaps", "-o", "name"),
                                run(env, *kubectl, "get", "serviceaccounts", "-o", "name"))
    for code, out, err in both:
        assert code == 0, err
    assert "serviceaccount/sa-tenant-admin" in both[1][1]
    again = await run(env, *kubectl, "auth", "whoami", "-o", "json")
    assert again[0] == 0, again[2]
    assert json.loads(again[1])["status"]["userInfo"]["username"].endswith(":sa-tenant-admin")

    root = await admin_session(gateway, database_url)
    rows = await (await root.call("GET", f"/api/v1/audit?user_id={user.user_id}&action=IssueKubeconfig")).json()
    assert [row["details"]["via"] for row in rows] == ["credential"]  # two processes, three commands, one mint
    assert json.loads(credentials.read_text())["gateways"]  # the token is cached 0600 beside the session

    url = str(gateway.make_url("")).rstrip("/")
    code, _, err = await run(env, str(BIN / "tenant-gateway"), "logout", "--gateway", url)
    assert code == 0, err
    code, _, err = await run(env, str(BIN / "tenant-gateway"), "credential", "--gateway", url,
                             "--workspace", workspace["id"])
    assert code == 1 and "tenant-gateway login" in err and len(err.strip().splitlines()) == 1


async def test_a_suspended_user_or_an_ended_session_mints_nothing(gateway: Any, database_url: str,
                                                                   tmp_path: Path) -> None:
    user = await register_and_login(gateway)
    workspace = await user.init()
    env = cli_env(tmp_path)
    await device_login(gateway, user, env)
    kubectl_says = await exec_info(user, workspace["id"])  # what kubectl would pass for the exec kubeconfig
    root = await admin_session(gateway, database_url)
    suspended = await root.call("POST", f"/api/v1/users/{user.user_id}/suspend")
    assert suspended.status == 200
    url = str(gateway.make_url("")).rstrip("/")
    code, out, err = await run({**env, "KUBERNETES_EXEC_INFO": kubectl_says},
                               str(BIN / "tenant-gateway"), "credential", "--gateway", url,
                               "--workspace", workspace["id"])
    assert code == 1 and out == "" and "session" in err


async def test_device_codes_work_once_expire_and_cannot_be_guessed(gateway: Any, database_url: str) -> None:
    import asyncpg

    user = await register_and_login(gateway)
    started = await (await gateway.post("/api/v1/auth/device", json={})).json()
    # No verification_uri_complete: a link that carries the code is what a phisher would send.
    assert set(started) == {"device_code", "user_code", "verification_uri", "interval", "expires_in"}
    poll = {"device_code": started["device_code"]}
    pending = await gateway.post("/api/v1/auth/device/token", json=poll)
    assert pending.status == 400 and (await pending.json())["error"]["code"] == "authorization_pending"
    guessed = await user.call("POST", "/api/v1/auth/device/approve", json={"user_code": "BBBB-BBBB"})
    assert guessed.status == 400 and (await guessed.json())["error"]["code"] == "invalid_user_code"
    assert (await user.call("POST", "/api/v1/auth/device/approve",
                            json={"user_code": started["user_code"]})).status == 204
    again = await user.call("POST", "/api/v1/auth/device/approve", json={"user_code": started["user_code"]})
    assert again.status == 400
    granted = await gateway.post("/api/v1/auth/device/token", json=poll)
    assert granted.status == 200
    session = (await granted.json())["token"]
    issued = await gateway.get("/api/v1/workspaces/credentials/token", headers={"Authorization": f"Bearer {session}"})
    assert issued.status == 404 and (await issued.json())["error"]["code"] == "no_workspace"  # the user has none
    reused = await gateway.post("/api/v1/auth/device/token", json=poll)
    assert reused.status == 400 and (await reused.json())["error"]["code"] == "invalid_grant"
    forged = await gateway.post("/api/v1/auth/device/token", json={"device_code": "x" * 43})
    assert forged.status == 400 and (await forged.json())["error"]["code"] == "invalid_grant"

    # Expiry: the clock cannot be advanced ten minutes, so the row is aged (a fault injected in the database).
    late = await (await gateway.post("/api/v1/auth/device", json={})).json()
    connection = await asyncpg.connect(database_url)
    try:
        await connection.execute("UPDATE device_codes SET expires_at = now() - interval '1 second'")
    finally:
        await connection.close()
    approve_late = await user.call("POST", "/api/v1/auth/device/approve", json={"user_code": late["user_code"]})
    assert approve_late.status == 400
    expired = await gateway.post("/api/v1/auth/device/token", json={"device_code": late["device_code"]})
    assert expired.status == 400 and (await expired.json())["error"]["code"] == "expired_token"
    # A cross-site page cannot approve for the victim: the cookie alone, without the CSRF header, is refused.
    cross_site = await gateway.post("/api/v1/auth/device/approve", json={"user_code": late["user_code"]},
                                    headers={"Cookie": f"gw_session={user.token}"})
    assert cross_site.status == 403 and (await cross_site.json())["error"]["code"] == "csrf_failed"


class Listener:
    """Someone else's server on this machine, with a certificate the kubeconfig's CA accepts:
    it records every request head it is sent (a stolen token would be in one) and answers 401."""

    def __init__(self, certificate: tuple[Path, Path]) -> None:
        self.heads: list[bytes] = []
        self._tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._tls.load_cert_chain(*certificate)
        self._server: asyncio.Server | None = None

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._answer, "127.0.0.1", 0, ssl=self._tls)
        return f"https://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            self.heads.append(await reader.readuntil(b"\r\n\r\n"))
            writer.write(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


async def test_a_kubeconfig_pointed_at_another_server_gets_no_token_from_the_plugin(
        gateway: Any, cluster: LocalCluster, tmp_path: Path, gateway_tls: Any) -> None:
    """Given a signed-in user with a token cached for their workspace, when a
    shared kubeconfig (the real download, its `server:` edited, or kubectl's
    --server, or its CA swapped, or provideClusterInfo turned off) makes real
    kubectl call another server, then `tenant-gateway credential` refuses in
    one line and that server never sees a token; the untouched kubeconfig
    still works."""
    user = await register_and_login(gateway)
    workspace = await user.init()
    env = cli_env(tmp_path)
    await device_login(gateway, user, env)
    legitimate = await exec_kubeconfig(user, workspace["id"])
    (tmp_path / "legit.kubeconfig").write_text(yaml.safe_dump(legitimate))
    kubectl = [str(cluster.kubectl), "--request-timeout=20s"]
    code, _, err = await run(env, *kubectl, "--kubeconfig", str(tmp_path / "legit.kubeconfig"), "get", "configmaps")
    assert code == 0, err  # a token is minted and cached for the workspace's own cluster

    # A server with a certificate from the cluster's own CA: the kubeconfig's CA accepts it.
    attacker = Listener(cluster.serving_certificate("someone-else", ("127.0.0.1",)))
    elsewhere = await attacker.start()
    # The attacker's own CA and server (the test gateway's certificate, another CA).
    second = Listener((gateway_tls[1].with_name("gateway.crt"), gateway_tls[1].with_name("gateway.key")))
    own_ca = await second.start()
    try:
        edited = yaml.safe_load(yaml.safe_dump(legitimate))
        edited["clusters"][0]["cluster"]["server"] = elsewhere
        hidden = yaml.safe_load(yaml.safe_dump(edited))
        hidden["users"][0]["user"]["exec"]["provideClusterInfo"] = False
        swapped = yaml.safe_load(yaml.safe_dump(legitimate))
        swapped["clusters"][0]["cluster"] = {
            "server": own_ca, "certificate-authority-data": base64.b64encode(gateway_tls[1].read_bytes()).decode()}
        ca_only = yaml.safe_load(yaml.safe_dump(legitimate))  # the real server, trusted through another CA
        ca_only["clusters"][0]["cluster"]["certificate-authority-data"] = \
            swapped["clusters"][0]["cluster"]["certificate-authority-data"]
        unverified = yaml.safe_load(yaml.safe_dump(edited))
        del unverified["clusters"][0]["cluster"]["certificate-authority-data"]
        unverified["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = True
        cases = {"server-edited": (edited, []), "provide-cluster-info-off": (hidden, []),
                 "another-ca": (swapped, []), "ca-swapped": (ca_only, []), "tls-unverified": (unverified, []),
                 "--server": (legitimate, [f"--server={elsewhere}"])}
        for name, (document, flags) in cases.items():
            path = tmp_path / f"{name}.kubeconfig"
            path.write_text(yaml.safe_dump(document))
            code, _, err = await run(env, *kubectl, "--kubeconfig", str(path), *flags, "get", "configmaps")
            assert code != 0, name
            # kubectl runs the plugin once per attempt (discovery retries): one line each time, always the same.
            said = {line for line in err.splitlines() if line.startswith("tenant-gateway: ")}
            assert len(said) == 1, (name, err)
            (line,) = said
            assert "refusing to hand" in line or "provideClusterInfo: true" in line \
                or "TLS verification off" in line, (name, err)
        for head in attacker.heads + second.heads:
            assert b"authorization" not in head.lower(), head
    finally:
        await attacker.stop()
        await second.stop()
    code, _, err = await run(env, *kubectl, "--kubeconfig", str(tmp_path / "legit.kubeconfig"), "get", "configmaps")
    assert code == 0, err
