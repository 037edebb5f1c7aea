"""The tools tenants run, as tests/integration/test_team_tools.py runs them:
Helm 3 (devstack.chart.helm_binary: built once per machine by
deploy/local-cluster/build-helm.sh), a kopf
operator (tests/support/operator_sample.py) run as a child process, and the
members of a team workspace holding their kubeconfigs.

Members other than the owner join through SSO only (an invitation accepted
when a provider-verified email signs in). Here they are added as test setup,
as the other team-workspace tests do (tests.support.members.join): a
membership row inserted with provisioning.db.members.add_member for a
password account registered through the gateway. Everything after that goes through the real gateway API, the
tools and the API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator

from provisioning.models import Role
from tests.support.gatewayclient import Session
from tests.support.kubeclients import kubeconfig_for_proxy
from tests.support.members import join

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE_CHART = REPO_ROOT / "tests" / "data" / "sample-chart"
OPERATOR = Path(__file__).with_name("operator_sample.py")


@dataclass
class Member:
    """A person in a team workspace with both of their ways in: the
    kubeconfig they downloaded (straight to the API server) and one whose
    server is the gateway's `/k8s/{workspace_id}` with their session token."""

    session: Session
    role: Role
    namespace: str
    downloaded: Path
    proxied: Path

    def kubeconfig(self, path: str) -> Path:
        return {"direct": self.downloaded, "proxy": self.proxied}[path]


async def member(gateway: Any, tmp_path: Path, workspace: dict[str, Any], role: Role, *,
                 session: Session | None = None, owner: Session | None = None) -> Member:
    """`session` (the owner, an admin) or a new user made a `role` member of
    `workspace` by `owner` (tests.support.members.join), with both kubeconfigs."""
    if session is None:
        assert owner is not None
        session = await join(gateway, uuid.UUID(workspace["id"]), role, owner.user_id)
    downloaded = tmp_path / f"{role}-{session.user_id[:8]}.kubeconfig"
    downloaded.write_text(await session.kubeconfig(workspace["id"]))
    proxied = kubeconfig_for_proxy(tmp_path, str(gateway.make_url(f"/k8s/{workspace['id']}")), session.token,
                                   workspace["namespace"], gateway.ca_file)
    return Member(session, role, workspace["namespace"], downloaded, proxied)


@dataclass
class Operator:
    process: asyncio.subprocess.Process
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.asynccontextmanager
async def kopf_operator(kubeconfig: Path, namespace: str, role: str, log: Path, *,
                        scanning: bool = True) -> AsyncIterator[Operator]:
    """tests/support/operator_sample.py run as a tenant runs an operator:
    `python -m kopf run --standalone --namespace NS` with KUBECONFIG set
    (an asyncio child: the gateway under test serves on this loop), as the
    member whose role is `role` (TOOLS_TEST_ROLE). Yielded once kopf has
    started watching the namespace's ConfigMaps; stopped with SIGINT.
    `scanning`: kopf's cluster scanning (see operator_sample.py) is on."""
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1", "TOOLS_TEST_ROLE": role,
           "TOOLS_TEST_SCANNING": "on" if scanning else "off"}
    with log.open("wb") as sink:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "kopf", "run", "--standalone", "--namespace", namespace, "--verbose",
            str(OPERATOR), env=env, stdout=sink, stderr=subprocess.STDOUT, cwd=str(log.parent))
    operator = Operator(process, log)
    try:
        async with asyncio.timeout(60):
            while "Starting the watch-stream for configmaps.v1" not in operator.output():
                assert process.returncode is None, operator.output()
                await asyncio.sleep(0.2)
        yield operator
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(process.wait(), 15)
            except TimeoutError:
                process.kill()
                await process.wait()
