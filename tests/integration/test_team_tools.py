"""The roles fit the tools tenants run (issue 36): Helm 3, a kopf operator and
the official Python client, used by the members of a team workspace as they
would, through the kubeconfig each downloaded (straight to the API server)
and through the gateway's proxy (`/k8s/{workspace_id}` with their session
token). `admin` and `edit` members may record Events (kopf.info, client-go's
and controller-runtime's recorders); `view` members watch but record nothing.

Members other than the owner are added as test setup by inserting their
membership rows with provisioning.db.members.add_member (tests.support.
members.join; they join through SSO only), then download their kubeconfigs
through the gateway like anyone.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from devstack.chart import helm_binary
from provisioning.models import Role
from tests.support import kubeclients
from tests.support.gatewayclient import tenant
from tests.support.tools import SAMPLE_CHART, Member, kopf_operator, member

pytestmark = pytest.mark.cluster
PATHS = ("direct", "proxy")


async def crew(gateway: Any, tmp_path: Path) -> dict[Role, Member]:
    """A workspace's owner (an admin) with an `edit` and a `view` member."""
    owner, workspace = await tenant(gateway)
    return {
        "admin": await member(gateway, tmp_path, workspace, "admin", session=owner),
        "edit": await member(gateway, tmp_path, workspace, "edit", owner=owner),
        "view": await member(gateway, tmp_path, workspace, "view", owner=owner),
    }


def configmap(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}}


def events_of(core: client.CoreV1Api, namespace: str, name: str) -> list[client.CoreV1Event]:
    return list(core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items)


# kopf ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("path", "scanning"), [("direct", False), ("direct", True), ("proxy", True)],
                         ids=["direct-namespaced", "direct-scanning", "proxy-scanning"])
async def test_a_kopf_operator_of_each_role(gateway: Any, tmp_path: Path, path: str,
                                            scanning: bool) -> None:
    """Each member runs the sample operator (`--standalone --namespace`) at
    once; the admin's and the editor's record their Events, the viewer's
    watches the same ConfigMaps but its Events are refused (403)."""
    team = await crew(gateway, tmp_path)
    ns = team["admin"].namespace
    owner = client.CoreV1Api(kubeclients.from_kubeconfig(team["admin"].downloaded))
    async with contextlib.AsyncExitStack() as stack:
        operators = {role: await stack.enter_async_context(
                         kopf_operator(someone.kubeconfig(path), ns, role, tmp_path / f"kopf-{role}.log",
                                       scanning=scanning))
                     for role, someone in team.items()}
        for made in (configmap("watched", **{"tools-test/watch": "yes"}),
                     configmap("handled-admin", **{"tools-test/handled": "admin"}),
                     configmap("handled-edit", **{"tools-test/handled": "edit"})):
            await asyncio.to_thread(owner.create_namespaced_config_map, ns, made)

        async def recorded(name: str, reason: str, instance: str) -> None:
            while not any(e.reason == reason and e.reporting_instance == instance
                          for e in await asyncio.to_thread(events_of, owner, ns, name)):
                for role, operator in operators.items():
                    assert operator.process.returncode is None, (role, operator.output())
                await asyncio.sleep(0.3)

        try:
            async with asyncio.timeout(45):
                for role in ("admin", "edit"):
                    await recorded("watched", "Seen", role)
                    await recorded(f"handled-{role}", "Handled", role)
                while "Failed to post an event" not in operators["view"].output():
                    await asyncio.sleep(0.3)
        except TimeoutError:
            raise AssertionError({role: o.output()[-4000:] for role, o in operators.items()}) from None

        refused = operators["view"].output()
        assert "Code: 403" in refused and "reason='Seen'" in refused and "saw watched created" in refused, refused
        for role in ("admin", "edit"):
            assert "Failed to post an event" not in operators[role].output(), operators[role].output()
            handled = await asyncio.to_thread(owner.read_namespaced_config_map, f"handled-{role}", ns)
            assert any(key.startswith("kopf.zalando.org/") for key in handled.metadata.annotations or {})
        assert not [e for e in await asyncio.to_thread(events_of, owner, ns, "watched")
                    if e.reporting_instance == "view"]

    # What kopf asked of the cluster beyond its namespace: with scanning on,
    # the Namespaces (listed, then watched) and the CRDs (watched, for its
    # resource discovery); with it off, nothing.
    for role, operator in operators.items():
        log = operator.output()
        if not scanning:
            assert "cluster-wide" not in log and "Not enough permissions" not in log, (role, log)
            continue
        # CRDs are cluster-scoped on both paths: refused (403), and kopf carries on.
        assert "Not enough permissions to watch for resources" in log, (role, log)
        namespaces_refused = "Not enough permissions to watch for namespaces" in log
        listing_refused = "Not enough permissions to list namespaces" in log
        if path == "proxy":  # served as the tenant's own namespace, listed and watched
            assert not namespaces_refused and not listing_refused, (role, log)
            assert "Starting the watch-stream for namespaces.v1 cluster-wide" in log, (role, log)
        else:  # the API server refuses a member's cluster-wide reads; kopf falls back to --namespace
            assert namespaces_refused and listing_refused, (role, log)


# Helm 3 ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def helm() -> Path:
    return helm_binary()


def run_helm(helm: Path, home: Path, kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "HELM_CACHE_HOME": str(home / "cache"),
           "HELM_CONFIG_HOME": str(home / "config"), "HELM_DATA_HOME": str(home / "data")}
    return subprocess.run([str(helm), f"--kubeconfig={kubeconfig}", *args], capture_output=True, text=True,
                          timeout=120, env=env)


@pytest.mark.parametrize("path", PATHS)
async def test_helm_install_list_upgrade_uninstall(gateway: Any, tmp_path: Path, path: str,
                                                   helm: Path) -> None:
    team = await crew(gateway, tmp_path)
    ns = team["edit"].namespace
    owner = client.CoreV1Api(kubeclients.from_kubeconfig(team["admin"].downloaded))

    async def as_(role: Role, *args: str) -> subprocess.CompletedProcess[str]:
        return await asyncio.to_thread(run_helm, helm, tmp_path / f"helm-{role}", team[role].kubeconfig(path),
                                       *args)

    refused = await as_("view", "install", "sample", str(SAMPLE_CHART), "--namespace", ns)
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused.stderr
    listed = await as_("view", "list", "--namespace", ns)  # releases are Secrets: not a viewer's
    assert listed.returncode != 0 and "forbidden" in listed.stderr.lower(), listed.stderr

    for role in ("edit", "admin"):
        release = f"sample-{role}"
        installed = await as_(role, "install", release, str(SAMPLE_CHART), "--namespace", ns)
        assert installed.returncode == 0, installed.stderr
        listed = await as_(role, "list", "--namespace", ns, "--short")
        assert release in listed.stdout.split(), listed.stderr
        upgraded = await as_(role, "upgrade", release, str(SAMPLE_CHART), "--namespace", ns,
                             "--set", "greeting=upgraded")
        assert upgraded.returncode == 0, upgraded.stderr
        settings = await asyncio.to_thread(owner.read_namespaced_config_map, f"{release}-settings", ns)
        assert settings.data == {"greeting": "upgraded"}
        apps = client.AppsV1Api(kubeclients.from_kubeconfig(team["admin"].downloaded))
        deployment = await asyncio.to_thread(apps.read_namespaced_deployment, f"{release}-app", ns)
        assert deployment.spec.template.metadata.annotations["checksum/settings"] == hashlib.sha256(
            b"upgraded").hexdigest()
        history = await as_(role, "history", release, "--namespace", ns, "-o", "json")
        assert history.returncode == 0 and '"revision":2' in history.stdout.replace(" ", ""), history.stderr
        uninstalled = await as_(role, "uninstall", release, "--namespace", ns)
        assert uninstalled.returncode == 0, uninstalled.stderr
        with pytest.raises(ApiException) as gone:
            await asyncio.to_thread(owner.read_namespaced_config_map, f"{release}-settings", ns)
        assert gone.value.status == 404


# The official Python client ------------------------------------------------------------------------

def core_v1_event(namespace: str, about: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"generateName": "tools-test-"},
            "involvedObject": {"apiVersion": "v1", "kind": "ConfigMap", "name": about, "namespace": namespace},
            "reason": "Tried", "message": "recorded with the core/v1 API", "type": "Normal",
            "source": {"component": "tools-test"}}


def events_v1_event(namespace: str, about: str) -> dict[str, Any]:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"generateName": "tools-test-"},
            "eventTime": now, "reportingController": "example.test/tools-test", "reportingInstance": "tools-test-0",
            "action": "Try", "reason": "Tried", "note": "recorded with the events.k8s.io/v1 API", "type": "Normal",
            "regarding": {"apiVersion": "v1", "kind": "ConfigMap", "name": about, "namespace": namespace}}


def watch_configmaps(core: client.CoreV1Api, namespace: str, wanted: str, made: asyncio.Event,
                     loop: asyncio.AbstractEventLoop) -> list[str]:
    seen: list[str] = []
    stream = watch.Watch()
    loop.call_soon_threadsafe(made.set)
    for event in stream.stream(core.list_namespaced_config_map, namespace, timeout_seconds=20):
        seen.append(f"{event['type']} {event['object'].metadata.name}")
        if event["object"].metadata.name == wanted:
            stream.stop()
    return seen


@pytest.mark.parametrize("path", PATHS)
async def test_the_python_client_of_each_role(gateway: Any, tmp_path: Path, path: str) -> None:
    team = await crew(gateway, tmp_path)
    ns = team["admin"].namespace
    owner = client.CoreV1Api(kubeclients.from_kubeconfig(team["admin"].downloaded))
    await asyncio.to_thread(owner.create_namespaced_config_map, ns, configmap("about"))
    for role, someone in team.items():
        api = kubeclients.from_kubeconfig(someone.kubeconfig(path))
        core, events = client.CoreV1Api(api), client.EventsV1Api(api)
        pods = await asyncio.to_thread(core.list_namespaced_pod, ns)
        assert pods.items == [], role

        started = asyncio.Event()
        watcher = asyncio.create_task(asyncio.to_thread(
            watch_configmaps, core, ns, f"watched-by-{role}", started, asyncio.get_running_loop()))
        await started.wait()
        await asyncio.sleep(0.5)
        await asyncio.to_thread(owner.create_namespaced_config_map, ns, configmap(f"watched-by-{role}"))
        seen = await asyncio.wait_for(watcher, 30)
        assert f"ADDED watched-by-{role}" in seen, (role, seen)

        for create, body in ((core.create_namespaced_event, core_v1_event(ns, "about")),
                             (events.create_namespaced_event, events_v1_event(ns, "about"))):
            if role == "view":
                with pytest.raises(ApiException) as refused:
                    await asyncio.to_thread(create, ns, body)
                assert refused.value.status == 403, (role, refused.value.body)
            else:
                made = await asyncio.to_thread(create, ns, body)
                assert made.metadata.namespace == ns  # type: ignore[attr-defined]
    recorded = [e.reason for e in await asyncio.to_thread(events_of, owner, ns, "about")]
    assert recorded == ["Tried"] * 4, recorded  # two each of admin and edit, none of view


async def test_a_watch_of_namespaces_through_the_proxy_is_of_the_tenants_own(
        gateway: Any, tmp_path: Path) -> None:
    team = await crew(gateway, tmp_path)
    ns = team["view"].namespace
    for role, someone in team.items():
        core = client.CoreV1Api(kubeclients.from_kubeconfig(someone.proxied))

        def first_events() -> list[tuple[str, str]]:
            stream = watch.Watch()
            got = []
            started = time.monotonic()
            for event in stream.stream(core.list_namespace, timeout_seconds=3):
                got.append((event["type"], event["object"].metadata.name))
                stream.stop()
            assert time.monotonic() - started < 10
            return got

        assert await asyncio.to_thread(first_events) == [("ADDED", ns)], role
        listed = await asyncio.to_thread(core.list_namespace)
        assert [n.metadata.name for n in listed.items] == [ns]
        # The same watch straight to the API server is the cluster's: refused.
        direct = client.CoreV1Api(kubeclients.from_kubeconfig(someone.downloaded))
        with pytest.raises(ApiException) as refused:
            await asyncio.to_thread(lambda: list(watch.Watch().stream(direct.list_namespace, timeout_seconds=2)))
        assert refused.value.status == 403, role
