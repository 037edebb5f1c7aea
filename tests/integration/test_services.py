"""Services in the local cluster work as in a real one: the `kubernetes`
Service has the API server's endpoint, a pod reaches the API server at
https://kubernetes.default.svc (CoreDNS, the Service's cluster IP, kube-proxy)
and gets its real answers, and a Service in front of a tenant's pod is
reached by its DNS name from another pod of the namespace. Teardown leaves
the host as it was: the chains kube-proxy adds are removed.

Not asserted: that another tenant's pod is kept from the Service. The
tenant's NetworkPolicy (provisioning.manifests) says so, but nothing in the
local cluster enforces NetworkPolicy: the CNI is the plain bridge plugin and
kube-proxy does not."""

from __future__ import annotations

import ipaddress
import json
import socket
import ssl
import subprocess
from typing import Any
from urllib.parse import urlparse

import pytest

from devstack import hoststate, services
from devstack.cluster import LocalCluster
from tests.support.pods import HTTP_SERVER, Tenant, pod_manifest

pytestmark = pytest.mark.cluster

TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
# busybox's wget checks no certificate; the certificate's names are checked
# from the host (test_the_api_servers_certificate_holds_for_its_service_names).
WGET = "wget -q -O - --no-check-certificate"
SELF_REVIEW = '{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}'


def test_the_kubernetes_service_has_the_api_servers_endpoint(cluster: LocalCluster) -> None:
    assert cluster.node is not None
    found = cluster.kubectl_run("-n", "default", "get", "endpointslice", "kubernetes", "-o", "json")
    endpoints = json.loads(found.stdout)
    addresses = [address for endpoint in endpoints["endpoints"] for address in endpoint["addresses"]]
    assert addresses == [cluster.node.address]
    assert not ipaddress.ip_address(addresses[0]).is_loopback
    assert [port["port"] for port in endpoints["ports"]] == [urlparse(cluster.server).port]
    service = json.loads(cluster.kubectl_run("-n", "default", "get", "service", "kubernetes", "-o", "json").stdout)
    assert service["spec"]["clusterIP"] == services.KUBERNETES_SERVICE_IP


def test_the_api_servers_certificate_holds_for_its_service_names(cluster: LocalCluster) -> None:
    """From the host, through kube-proxy's rules for the cluster IP, with the
    hostnames a pod's client checks (Python's ssl verifies them)."""
    context = ssl.create_default_context(cafile=str(cluster.ca_file))
    for name in ("kubernetes.default.svc", "kubernetes.default.svc.cluster.local", services.KUBERNETES_SERVICE_IP):
        with socket.create_connection((services.KUBERNETES_SERVICE_IP, 443), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname=name) as tls:
                tls.sendall(f"GET /version HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n".encode())
                answer = b""
                while chunk := tls.recv(65536):
                    answer += chunk
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        assert b'"gitVersion": "v1.' in answer


async def test_a_pod_reaches_the_api_server_at_kubernetes_default_svc(tenant: Tenant) -> None:
    pod = await tenant.run_pod("exec sleep 3600")
    version = await tenant.kubectl("exec", pod, "--", "sh", "-c", f"{WGET} https://kubernetes.default.svc/version")
    assert version.returncode == 0, version.stderr
    assert json.loads(version.stdout)["gitVersion"].startswith("v1.")
    # Anonymous callers may read /version only: the API server's own authorizer answers.
    refused = await tenant.kubectl("exec", pod, "--", "sh", "-c",
                                   f"{WGET} https://kubernetes.default.svc/api/v1/namespaces 2>&1; true")
    assert "403 Forbidden" in refused.stdout, refused.stdout
    # With the pod's token it is the namespace's ServiceAccount.
    review = await tenant.kubectl("exec", pod, "--", "sh", "-c",
                                  f"{WGET} --header 'Content-Type: application/json' "
                                  f"--header \"Authorization: Bearer $(cat {TOKEN})\" --post-data '{SELF_REVIEW}' "
                                  "https://kubernetes.default.svc/apis/authentication.k8s.io/v1/selfsubjectreviews")
    assert review.returncode == 0, review.stdout + review.stderr
    user = json.loads(review.stdout)["status"]["userInfo"]["username"]
    assert user == f"system:serviceaccount:{tenant.namespace}:default"


def _web_pod_and_service(name: str) -> list[dict[str, Any]]:
    pod = pod_manifest(name, HTTP_SERVER)
    pod["metadata"]["labels"] = {"app": name}
    pod["spec"]["containers"][0]["readinessProbe"] = {"tcpSocket": {"port": 8080}, "periodSeconds": 1}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
               "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 8080}]}}
    return [pod, service]


async def test_a_service_in_front_of_a_tenants_pod_is_reached_by_its_name(tenant: Tenant) -> None:
    manifests = {"apiVersion": "v1", "kind": "List", "items": _web_pod_and_service("web")}
    applied = await tenant.kubectl("apply", "-f", "-", input=json.dumps(manifests))
    assert applied.returncode == 0, applied.stderr
    ready = await tenant.kubectl("wait", "--for=condition=Ready", "pod/web", "--timeout=90s", timeout=100)
    assert ready.returncode == 0, ready.stderr
    client = await tenant.run_pod("exec sleep 3600")
    # The endpoint slice controller may take a moment after the pod is Ready;
    # kube-proxy, a moment more after the slice.
    # (busybox 1.35's `wget -T` crashes: `timeout` bounds each try instead.)
    script = "for i in $(seq 1 40); do timeout 3 wget -q -O - http://web/ && exit 0; sleep 0.5; done; exit 1"
    for name in ("web", f"web.{tenant.namespace}.svc.cluster.local"):
        reached = await tenant.kubectl("exec", client, "--", "sh", "-c", script.replace("http://web/", f"http://{name}/"),
                                       timeout=60)
        assert reached.returncode == 0 and reached.stdout.strip() == "hello-from-the-pod", (name, reached.stderr)
    await tenant.kubectl("delete", "service", "web", "--wait=false")


def test_the_chains_kube_proxy_added_are_removed_and_nothing_else(cluster: LocalCluster) -> None:
    """hoststate's undo, on the host's real iptables, beside the running
    cluster: chains added after the record go, with the jumps to them;
    kube-proxy's own chains (there before the record) stay."""
    before = {"iptables": hoststate.parse_chains(hoststate.iptables_save("iptables"))}
    snapshot = hoststate.host_snapshot()
    assert any(line == ":KUBE-SERVICES -" for line in snapshot["iptables"]["iptables"])  # kube-proxy's, running
    for rule in (["-N", "KUBE-TGW-PROBE"], ["-N", "KUBE-TGW-PROBE-2"], ["-A", "KUBE-TGW-PROBE", "-j", "KUBE-TGW-PROBE-2"],
                 ["-A", "OUTPUT", "-d", "192.0.2.77/32", "-m", "comment", "--comment", "a probe", "-j",
                  "KUBE-TGW-PROBE"]):
        subprocess.run(["iptables", "-t", "nat", *rule], check=True, capture_output=True)
    assert hoststate.host_snapshot() != snapshot
    hoststate.remove_new_kube_chains(before)
    after = hoststate.host_snapshot()
    # kube-proxy may have resynced in between: compare what is not its.
    assert {k: v for k, v in after.items() if k != "iptables"} == {k: v for k, v in snapshot.items() if k != "iptables"}
    assert not any("KUBE-TGW-PROBE" in line for line in after["iptables"]["iptables"])
    assert any(line == ":KUBE-SERVICES -" for line in after["iptables"]["iptables"])
