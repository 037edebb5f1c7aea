"""The gateway inside the local cluster, installed as operators install it
(devstack.incluster): `make image`'s image, the Helm chart, three replicas
on the real node, PostgreSQL reached over the network, the gateway's own
credential from in-cluster configuration, clients through its Service.

Then what an operator lives through: a tenant onboards and drives kubectl
(exec, port-forward, watch) through it; `helm upgrade` with a new setting
and `kubectl rollout restart` under small-GET load with open watches and an
exec session; a drain's evictions against the PodDisruptionBudget.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from devstack import chart
from devstack.cluster import LocalCluster
from devstack.incluster import NAMESPACE, InClusterGateway
from devstack.nodeparts import LOCAL_IMAGES
from devstack.podpostgres import start_postgres_for_pods
from tests.support.environment import SESSION_SECRET
from tests.support.gatewayclient import PASSWORD, Session, unique_email
from tests.support.kubeclients import kubeconfig_for_proxy
from tests.support.pods import HTTP_SERVER, Tenant, forwarded_port, read_until

pytestmark = pytest.mark.cluster

SETTINGS = {
    "GATEWAY_SHARED_IMAGES": LOCAL_IMAGES,  # the node's own images: no registry serves them
    "GATEWAY_RATE_REGISTER": "1000/60",
    "GATEWAY_RATE_LOGIN": "1000/60",
    "GATEWAY_RATE_INIT": "1000/60",
}


@pytest.fixture(scope="module")
def in_cluster(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InClusterGateway]:
    assert cluster.node is not None
    database = start_postgres_for_pods(tmp_path_factory.mktemp("pod-postgres"), cluster.node.address)
    gateway = InClusterGateway(cluster, chart.helm_binary(), tmp_path_factory.mktemp("in-cluster"), database.url,
                               SESSION_SECRET, dict(SETTINGS))
    try:
        gateway.install()
        yield gateway
    finally:
        gateway.uninstall()
        database.stop()


@pytest.fixture
async def client(in_cluster: InClusterGateway) -> AsyncIterator[aiohttp.ClientSession]:
    """HTTPS to the Service's cluster IP, trusting the cluster's CA (the certificate names the IP)."""
    context = ssl.create_default_context(cafile=str(in_cluster.ca_file))
    async with aiohttp.ClientSession(base_url=in_cluster.url, connector=aiohttp.TCPConnector(ssl=context, limit=0),
                                     timeout=aiohttp.ClientTimeout(total=None, sock_connect=10)) as session:
        yield session


async def signed_in(client: aiohttp.ClientSession) -> Session:
    email = unique_email()
    registered = await client.post("/api/v1/auth/register", json={"email": email, "password": PASSWORD})
    assert registered.status == 201, await registered.text()
    answer = await client.post("/api/v1/auth/login", json={"email": email, "password": PASSWORD})
    assert answer.status == 200, await answer.text()
    body = await answer.json()
    return Session(client, body["user"]["id"], email, body["token"], body["csrf_token"])  # type: ignore[arg-type]


@pytest.fixture
async def tenant(in_cluster: InClusterGateway, client: aiohttp.ClientSession,
                 tmp_path: Path) -> AsyncIterator[Tenant]:
    """A user who onboarded through the in-cluster gateway, with kubectl through its proxy."""
    session = await signed_in(client)
    workspace = await session.init()
    server = f"{in_cluster.url}/k8s/{workspace['id']}"
    config = kubeconfig_for_proxy(tmp_path, server, session.token, workspace["namespace"], in_cluster.ca_file)
    made = Tenant(in_cluster.cluster, session, workspace, config, server)
    yield made
    await made.remove_pods()


def ready_replicas(in_cluster: InClusterGateway) -> int:
    return sum(1 for pod in in_cluster.pods() if pod["metadata"].get("deletionTimestamp") is None and any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", [])))


def test_three_replicas_run_unprivileged_on_a_read_only_root(in_cluster: InClusterGateway) -> None:
    pods = in_cluster.pods()
    assert len(pods) == 3 and ready_replicas(in_cluster) == 3
    for pod in pods:
        spec: Any = pod["spec"]
        assert spec["nodeName"] and spec["securityContext"]["runAsNonRoot"] is True
        container = spec["containers"][0]["securityContext"]
        assert container["readOnlyRootFilesystem"] is True and container["allowPrivilegeEscalation"] is False
        assert container["capabilities"] == {"drop": ["ALL"]}
    # What the kernel enforces, seen from inside a replica.
    assert in_cluster.exec("python3", "-c", "import os; print(os.getuid(), os.getgid())").split() == ["10001", "10001"]
    refused = in_cluster.cluster.kubectl_run("-n", NAMESPACE, "exec", "deploy/tenant-gateway", "--", "python3", "-c",
                                             "open('/opt/gateway/written', 'w')", check=False)
    assert refused.returncode != 0 and "Read-only file system" in refused.stderr, refused.stderr


def test_check_passes_inside_with_in_cluster_configuration(in_cluster: InClusterGateway) -> None:
    """The pod's own ServiceAccount token, through the `kubernetes` Service
    (CoreDNS is not even needed: in-cluster config names its cluster IP)."""
    environment = in_cluster.exec("sh", "-c",
                                  "echo $KUBERNETES_SERVICE_HOST; ls /var/run/secrets/kubernetes.io/serviceaccount")
    assert "10.96.0.1" in environment and "token" in environment
    assert in_cluster.exec("tenant-gateway", "check").startswith("ok:")


async def test_a_tenant_onboards_and_drives_kubectl_through_it(tenant: Tenant, tmp_path: Path) -> None:
    pod = await tenant.run_pod(HTTP_SERVER)
    # exec
    answered = await tenant.kubectl("exec", pod, "--", "sh", "-c", "echo in-$((6*7))")
    assert answered.returncode == 0 and answered.stdout.strip() == "in-42", answered.stderr
    # watch: a ConfigMap made after the watch opened arrives on it
    watch = await tenant.spawn("get", "configmaps", "--watch", "--output-watch-events", "-o", "name")
    try:
        assert watch.stdout is not None
        await read_until(watch.stdout, b"kube-root-ca.crt")
        made = await tenant.kubectl("create", "configmap", "seen-by-the-watch", "--from-literal=a=b")
        assert made.returncode == 0, made.stderr
        await read_until(watch.stdout, b"seen-by-the-watch")
    finally:
        watch.kill()
        await watch.wait()
    # port-forward
    forward = await tenant.spawn("port-forward", f"pod/{pod}", ":8080")
    try:
        port = await forwarded_port(forward)
        async with aiohttp.ClientSession() as plain, plain.get(f"http://127.0.0.1:{port}/") as page:
            assert (await page.text()).strip() == "hello-from-the-pod"
    finally:
        forward.kill()
        await forward.wait()
    # A kubeconfig issued by the in-cluster gateway goes straight to the API server.
    issued = tmp_path / "issued.kubeconfig"
    issued.write_text(await tenant.session.kubeconfig())
    direct = await asyncio.to_thread(subprocess.run, [str(tenant.cluster.kubectl), f"--kubeconfig={issued}", "get",
                                                      "pods", "-o", "name"], capture_output=True, text=True, timeout=60)
    assert direct.returncode == 0 and f"pod/{pod}" in direct.stdout, direct.stderr


async def _refusal(answer: aiohttp.ClientResponse, body: bytes) -> str:
    """What a refusal is to a client: a stopping replica's 503 with
    Retry-After on a closed connection is retried by client-go, kubectl and
    informers by themselves (on a new connection, to a replica that stays);
    anything else fails."""
    if answer.status == 503 and answer.headers.get("Retry-After") and b'"shutting_down"' in body:
        return "retried: shutting_down"
    return f"failed: {answer.status} {body[:200]!r}"


async def _getter(client: aiohttp.ClientSession, url: str, headers: dict[str, str], stop: asyncio.Event,
                  tally: Counter[str]) -> None:
    while not stop.is_set():
        try:
            async with client.get(url, headers=headers) as answer:
                body = await answer.read()
                tally["ok" if answer.status == 200 else await _refusal(answer, body)] += 1
        except aiohttp.ServerDisconnectedError:
            # A keep-alive connection closed by a stopping replica as the
            # request was sent, before any answer: an idempotent request
            # every HTTP client may resend (client-go and kubectl do).
            tally["resent"] += 1
        except (aiohttp.ClientError, asyncio.TimeoutError) as error:
            tally[f"failed: {type(error).__name__}"] += 1


async def _watcher(client: aiohttp.ClientSession, url: str, headers: dict[str, str], stop: asyncio.Event,
                   tally: Counter[str]) -> None:
    """A watch resumed from its last resourceVersion whenever it ends cleanly, as informers do."""
    version = ""
    while not stop.is_set():
        try:
            async with client.get(f"{url}&resourceVersion={version}" if version else url, headers=headers) as answer:
                if answer.status != 200:
                    tally[f"watch {await _refusal(answer, await answer.read())}"] += 1
                    await asyncio.sleep(0.2)
                    continue
                tally["watch opened"] += 1
                async for line in answer.content:
                    event = json.loads(line)
                    if event["type"] == "ERROR":  # too old a version (410): list again, as informers do
                        version = ""
                        tally["watch expired"] += 1
                        continue
                    version = event["object"]["metadata"]["resourceVersion"]
                    tally["events"] += 1
                tally["watch ended cleanly"] += 1
        except aiohttp.ClientPayloadError:
            tally["watch cut mid-event"] += 1
        except (aiohttp.ClientError, asyncio.TimeoutError) as error:
            if not stop.is_set():
                tally[f"watch failed: {type(error).__name__}"] += 1


async def _exec_session(client: aiohttp.ClientSession, url: str, headers: dict[str, str],
                        tally: Counter[str]) -> None:
    """An interactive exec whose replica stops under it: it must end with
    a close (a client reconnects), never a broken connection."""
    async with client.ws_connect(url, headers=headers, protocols=("v5.channel.k8s.io",)) as ws:
        tally["exec opened"] += 1
        async for message in ws:
            if message.type == aiohttp.WSMsgType.ERROR:
                tally["exec broken"] += 1
        # 1001 "going away": the replica stops; a client reconnects elsewhere.
        tally["exec closed cleanly" if ws.close_code == aiohttp.WSCloseCode.GOING_AWAY else
              f"exec broken: {ws.close_code}"] += 1


async def _count_ready(in_cluster: InClusterGateway, stop: asyncio.Event, seen: list[int]) -> None:
    while not stop.is_set():
        seen.append(await asyncio.to_thread(ready_replicas, in_cluster))
        await asyncio.sleep(0.5)


async def test_upgrade_and_restart_under_load(in_cluster: InClusterGateway, tenant: Tenant,
                                              client: aiohttp.ClientSession) -> None:
    pod = await tenant.run_pod("exec sleep 3600", stdin=True)
    namespace_path = f"/k8s/{tenant.workspace['id']}/api/v1/namespaces/{tenant.namespace}"
    headers = tenant.session.bearer
    tally: Counter[str] = Counter()
    ready_seen: list[int] = []
    stop = asyncio.Event()
    workers = [asyncio.create_task(_getter(client, f"{namespace_path}/configmaps/kube-root-ca.crt", headers, stop,
                                           tally)) for _ in range(4)]
    workers += [asyncio.create_task(_watcher(client, f"{namespace_path}/configmaps?watch=true&allowWatchBookmarks=true",
                                             headers, stop, tally)) for _ in range(5)]
    workers.append(asyncio.create_task(_count_ready(in_cluster, stop, ready_seen)))
    exec_url = (f"{namespace_path}/pods/{pod}/exec?command=sh&stdin=true&stdout=true&stderr=true")
    session = asyncio.create_task(_exec_session(client, exec_url, headers, tally))
    try:
        await asyncio.sleep(3)
        # A new setting: the pod template changes, so the replicas roll.
        await asyncio.to_thread(in_cluster.upgrade, {**SETTINGS, "GATEWAY_LOG_LEVEL": "debug"})
        await asyncio.to_thread(in_cluster.wait_rolled_out)
        await asyncio.sleep(2)
        opened_before_restart = tally["watch opened"]
        await asyncio.to_thread(in_cluster.restart)
        await asyncio.sleep(3)
        resumed_after_restart = tally["watch opened"] - opened_before_restart
    finally:
        stop.set()
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    async with asyncio.timeout(30):
        await session
    failures = {key: count for key, count in tally.items() if "failed" in key or "cut" in key or "broken" in key}
    assert not failures, tally
    assert tally["ok"] > 100, tally
    assert resumed_after_restart >= 5, tally  # every watch resumed on a new replica
    assert tally["exec closed cleanly"] == 1, tally
    assert min(ready_seen) >= 2, ready_seen  # one replica down at most, throughout
    env = in_cluster.pods()[0]["spec"]["containers"][0]["env"]
    assert {"name": "GATEWAY_LOG_LEVEL", "value": "debug"} in env
    # And a new exec session works on the new replicas.
    answered = await tenant.kubectl("exec", pod, "--", "echo", "after-the-restart")
    assert answered.returncode == 0 and answered.stdout.strip() == "after-the-restart", answered.stderr


def test_a_drain_evicts_one_replica_at_a_time(in_cluster: InClusterGateway) -> None:
    """The PodDisruptionBudget (minAvailable 2 of 3): the eviction API lets
    one replica go, and refuses the next until it is back."""
    in_cluster.wait_rolled_out()
    # The disruption controller's count catches up with the rollout first.
    deadline = time.monotonic() + 60
    while in_cluster.cluster.kubectl_run("-n", NAMESPACE, "get", "pdb", "tenant-gateway", "-o",
                                         "jsonpath={.status.disruptionsAllowed}").stdout != "1":
        assert time.monotonic() < deadline, "the PodDisruptionBudget never allowed one disruption"
        time.sleep(0.5)
    outcomes = []
    for pod in in_cluster.pods():
        name = pod["metadata"]["name"]
        eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": NAMESPACE}}
        result = in_cluster.cluster.kubectl_run(
            "create", "--raw", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/eviction", "-f", "-",
            input=json.dumps(eviction), check=False)
        outcomes.append("evicted" if result.returncode == 0 else
                        "refused" if "disruption budget" in result.stderr else result.stderr)
    assert outcomes == ["evicted", "refused", "refused"], outcomes
    in_cluster.wait_rolled_out()
    assert ready_replicas(in_cluster) == 3

