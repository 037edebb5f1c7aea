"""Services in the local cluster: kube-proxy on the node, CoreDNS for the
cluster's names, and the addresses they agree on.

Both are built from Go modules by `deploy/local-cluster/build-services.sh`
and cached per machine. Choices, each for a reason:
* kube-proxy in iptables mode: Debian's `iptables` is all it needs (nftables
  mode would need the `nft` tool too). It never lowers the host's conntrack
  table or sets its timeouts (`maxPerCore: 0`, zero timeouts), NodePorts
  listen on the node's address only and never on localhost (so it leaves
  `route_localnet` alone). The chains it adds are recorded and removed by
  devstack.hoststate;
* one kube-proxy per host: its chains have fixed names, so a second node on
  the same host (tests beside `make run`) runs without one;
* CoreDNS runs on the host, beside the control plane, on the node's address
  and a free port, watching the API server with a kubeconfig. A selectorless
  `kube-dns` Service at the cluster DNS address sends pods there through
  kube-proxy, so nothing needs port 53 on the host.
"""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from devstack.processes import ClusterStartError

REPO_ROOT = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = REPO_ROOT / "deploy" / "local-cluster" / "build-services.sh"
SERVICE_CIDR = "10.96.0.0/24"
KUBERNETES_SERVICE_IP = str(next(ipaddress.ip_network(SERVICE_CIDR).hosts()))
"""The `kubernetes` Service's cluster IP: the API server takes the first address of the range."""
CLUSTER_DNS_IP = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"
KUBE_PROXY_USER = "system:kube-proxy"
"""Bound to system:node-proxier by the API server's bootstrap roles: nothing to grant."""
COREDNS_USER = "system:coredns"


def build_service_binaries() -> Path:
    """The folder with kube-proxy and coredns, built on the first run on a machine."""
    try:
        out = subprocess.run(["bash", str(BUILD_SCRIPT)], check=True, stdout=subprocess.PIPE, text=True).stdout
    except subprocess.CalledProcessError as error:
        raise ClusterStartError(
            f"building kube-proxy and CoreDNS failed (exit {error.returncode}); see the build output above. "
            "It needs Go and the Go module proxy once per machine.") from error
    return Path(out.strip().splitlines()[-1])


def apiserver_hosts(node_address: str) -> tuple[str, ...]:
    """Names and addresses the API server's serving certificate must carry:
    the host's, the node's (where the `kubernetes` Service's endpoint points)
    and the Service's, by IP and every DNS form a pod may use."""
    return ("127.0.0.1", "localhost", node_address, KUBERNETES_SERVICE_IP, "kubernetes", "kubernetes.default",
            "kubernetes.default.svc", f"kubernetes.default.svc.{CLUSTER_DOMAIN}")


def iptables_preflight() -> None:
    for tool in ("iptables", "iptables-save", "iptables-restore"):
        if shutil.which(tool, path="/usr/sbin:/sbin:/usr/bin:/bin") is None:
            raise ClusterStartError(f"kube-proxy needs `{tool}` (Debian's iptables package): "
                                    "apt-get install iptables, or run `make test`, which installs it")


# -- configuration (pure) ------------------------------------------------------


def kube_proxy_config(*, kubeconfig: Path, node_name: str, node_address: str, pod_subnet: str,
                      healthz_port: int, metrics_port: int) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node_name,
        "mode": "iptables",
        "clusterCIDR": pod_subnet,
        "detectLocalMode": "ClusterCIDR",
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        # The host's own conntrack settings stay as they are: 0 leaves each alone.
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s",
                      "udpTimeout": "0s", "udpStreamTimeout": "0s"},
        # NodePorts on the node's address only: localhost NodePorts would set route_localnet.
        "iptables": {"localhostNodePorts": False, "masqueradeAll": False},
        "nodePortAddresses": [f"{node_address}/32"],
        "oomScoreAdj": 0,  # lowering it needs CAP_SYS_RESOURCE
    }


def corefile(*, address: str, port: int, ready_port: int, kubeconfig: Path) -> str:
    """Answers for the cluster's names from the API server; anything else
    goes to the host's resolvers."""
    return f""".:{port} {{
    bind {address}
    errors
    ready 127.0.0.1:{ready_port}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig} local
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    forward . /etc/resolv.conf
    cache 5
}}
"""


def dns_manifests(address: str, port: int) -> str:
    """CoreDNS's read access, and the `kube-dns` Service at the cluster DNS
    address whose one endpoint is CoreDNS on the host (no selector: the
    EndpointSlice is ours, and no controller touches it)."""
    ports = [{"name": "dns", "protocol": "UDP"}, {"name": "dns-tcp", "protocol": "TCP"}]
    objects: list[dict[str, Any]] = [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "local-cluster:coredns"},
         "rules": [{"apiGroups": [""], "resources": ["services", "endpoints", "pods", "namespaces"],
                    "verbs": ["list", "watch"]},
                   {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "local-cluster:coredns"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "local-cluster:coredns"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": COREDNS_USER}]},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "kube-dns", "namespace": "kube-system",
                      "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}},
         "spec": {"clusterIP": CLUSTER_DNS_IP,
                  "ports": [{**p, "port": 53, "targetPort": port} for p in ports]}},
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
         "metadata": {"name": "kube-dns-host", "namespace": "kube-system",
                      "labels": {"kubernetes.io/service-name": "kube-dns",
                                 "endpointslice.kubernetes.io/managed-by": "local-cluster.tenant-gateway.io"}},
         "addressType": "IPv4",
         "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
         "ports": [{**p, "port": port} for p in ports]},
    ]
    return "\n---\n".join(yaml.safe_dump(obj) for obj in objects)
