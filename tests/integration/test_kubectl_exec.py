"""Kubeconfigs that refresh themselves, driven by the real kubectl.

Given a user who ran `tenant-gateway login` (device sign-in, approved through
the API) and downloaded a `format=exec` kubeconfig, when kubectl runs (two
processes at once), then `tenant-gateway credential` mints one token between
them, caches it, and everything stops working at logout.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
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
    root = await admin_session(gateway, database_url)
    suspended = await root.call("POST", f"/api/v1/users/{user.user_id}/suspend")
    assert suspended.status == 200
    url = str(gateway.make_url("")).rstrip("/")
    code, out, err = await run(env, str(BIN / "tenant-gateway"), "credential", "--gateway", url,
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
