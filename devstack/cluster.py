"""A throwaway Kubernetes cluster on this machine: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler on 127.0.0.1, built from the Go
module proxy by `deploy/local-cluster/build.sh` and started as child
processes, and one real node (kubelet, containerd, runc: devstack.node) so
pods run and exec, attach, logs, port-forward and cp reach real processes.

Why the controller manager: without it the aggregated `admin`/`edit`/`view`
roles are empty, quota is never enforced and namespaces never finish deleting,
so every RBAC or quota test would pass for the wrong reason. Why the
scheduler: ordinary manifests (no `nodeName`) must run.

The cluster writes two kubeconfigs: `admin.kubeconfig` (system:masters, for
tests and operators) and `gateway.kubeconfig`, a client certificate carrying
the username and groups of the in-cluster gateway's ServiceAccount. So the
ClusterRoleBinding and admission policies in deploy/kubernetes apply to it
unchanged, and the suite proves exactly what a real installation grants. The
scheduler and the kubelet have identities of their own (system:kube-scheduler,
system:node:<name> under the Node authorizer), as in a real cluster, and so
does each controller (`--use-service-account-credentials`, as kubeadm and
managed clusters run them: system:serviceaccount:kube-system:<controller>).
Were the controllers cluster administrators, the admission policies that let
only administrators through (a suspended namespace) would let the garbage
collector through too, and the suite would not see what a real cluster does.

The API server sends its audit log (metadata only) to the gateway's audit
listener on `audit_webhook_port` (devstack.auditing says what it records and
the files it writes: `audit-policy.yaml`, `audit-webhook.kubeconfig`, and
the audit CA and its two certificates under pki/); `audit_environment()` is
the gateway's side.

More than one cluster (a fleet, `tenant-gateway dev --clusters N` and the
two-cluster tests): each further cluster is a control plane of its own, with
its own state dir, ports, CA, ServiceAccount signing key and issuer (so a
token one cluster minted is refused by the other), etcd, and the same deploy/
manifests; it has no node (`with_node=False`: a second kubelet on one machine
buys the tests nothing), so no scheduler either, and its pods stay Pending.
Its audit webhook shares the first cluster's audit CA and port, so the
gateway's one audit listener hears both (`audit_shared_with`).

Services are real (devstack.services): the API server listens on every
address and advertises the node's, so the `kubernetes` Service has an
endpoint pods reach; kube-proxy runs with the node and CoreDNS beside the
control plane, and the endpoint slice controller gives Services in front of
pods their endpoints.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import yaml

from devstack import auditing, pki, services
from devstack.node import NODE_NAME, LocalNode, node_address
from devstack.nodeparts import NodeParts, NodePartsError, ensure_node_parts
from devstack.processes import Children, ClusterStartError, free_port, wait_for
from devstack.services import build_service_binaries

REPO_ROOT = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = REPO_ROOT / "deploy" / "local-cluster" / "build.sh"
DEPLOY = REPO_ROOT / "deploy" / "kubernetes"
CLUSTERROLES = DEPLOY / "clusterroles.yaml"
# Applied as shipped; the gateway's own Deployment and namespace are not needed here.
CLUSTER_MANIFESTS = (CLUSTERROLES, DEPLOY / "admission.yaml", DEPLOY / "clusterrolebinding.yaml",
                     DEPLOY / "flowcontrol.yaml")

GATEWAY_NAMESPACE = "tenant-gateway-system"
GATEWAY_USER = f"system:serviceaccount:{GATEWAY_NAMESPACE}:tenant-gateway"
GATEWAY_GROUPS = ("system:serviceaccounts", f"system:serviceaccounts:{GATEWAY_NAMESPACE}")
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
"""The first cluster's issuer, as in any cluster; a further cluster's names it (`fleet_issuer`)."""
# Controllers the gateway's behaviour depends on; see the module docstring.
CONTROLLERS = (
    "clusterrole-aggregation-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "garbage-collector-controller",
    "resourcequota-controller",
    # Lifts the node's not-ready taint once the kubelet reports Ready.
    "node-lifecycle-controller",
    # Deployments are what tenants (and the console) run pods with.
    "deployment-controller",
    "replicaset-controller",
    # Keeps a ControllerRevision per template change, which tiers count.
    "statefulset-controller",
    # Services' endpoints, which kube-proxy and CoreDNS follow.
    "endpointslice-controller",
    "endpoints-controller",
    # PodDisruptionBudgets' status, without which every eviction is refused
    # (the gateway's own PDB when it runs in the cluster, and tenants').
    "disruption-controller",
)
CACHE = Path(os.environ.get("TENANT_GATEWAY_CACHE")
             or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tenant-gateway")
# The API server's identity towards kubelets, allowed their whole API (exec, logs, port-forward).
KUBELET_CLIENT = "kube-apiserver-kubelet-client"
_KUBELET_CLIENT_BINDING = f"""
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: local-cluster:kube-apiserver-kubelet-client}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:kubelet-api-admin}}
subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: {KUBELET_CLIENT}}}]
"""
WORKSPACE_LABEL = "tenant-gateway.io/workspace-id"
SUSPENDED_LABEL = "tenant-gateway.io/suspended"
_EXTERNAL_NAME_SERVICE = """apiVersion: v1
kind: Service
metadata: {name: probe}
spec: {type: ExternalName, externalName: example.invalid}
"""
_USER_ROLEBINDING = """apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: probe}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: probe@example.test}]
"""
_NFS_POD = """apiVersion: v1
kind: Pod
metadata: {name: probe}
spec:
  containers: [{name: c, image: registry.invalid/none}]
  volumes: [{name: v, nfs: {server: nfs.invalid, path: /}}]
"""
_PLACED_POD = """apiVersion: v1
kind: Pod
metadata: {name: probe}
spec:
  containers: [{name: c, image: registry.invalid/none}]
  nodeName: probe
"""
_CRITICAL_POD = """apiVersion: v1
kind: Pod
metadata: {name: probe}
spec:
  containers: [{name: c, image: registry.invalid/none}]
  priorityClassName: system-node-critical
"""
_FINALIZED_POD = """apiVersion: v1
kind: Pod
metadata: {name: probe, finalizers: [example.com/keep]}
spec:
  containers: [{name: c, image: registry.invalid/none}]
"""
# Client identities other than the gateway's: file stem -> (user, groups).
_CLIENT_IDENTITIES = {
    "admin": ("cluster-admin", ("system:masters",)),
    "kubelet-client": (KUBELET_CLIENT, ()),
    "scheduler": ("system:kube-scheduler", ()),
    "node": (f"system:node:{NODE_NAME}", ("system:nodes",)),
    "kube-proxy": (services.KUBE_PROXY_USER, ()),
    "coredns": (services.COREDNS_USER, ()),
}



def fleet_issuer(name: str) -> str:
    """The ServiceAccount issuer of a further cluster called `name`: its own,
    so its tokens' issuer (and default audience) is no other cluster's. Pure."""
    return f"https://kubernetes.default.svc.{name}.fleet.local"


def build_binaries() -> Path:
    """Build (first run on a machine) or find the cached binaries."""
    try:
        out = subprocess.run(
            ["bash", str(BUILD_SCRIPT)], check=True, stdout=subprocess.PIPE, text=True
        ).stdout
    except subprocess.CalledProcessError as error:
        raise ClusterStartError(
            f"building the local control plane failed (exit {error.returncode}); see the build output above. "
            "It needs Go and the Go module proxy once per machine."
        ) from error
    return Path(out.strip().splitlines()[-1])


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _kubeconfig(server: str, ca_pem: bytes, user: str, pair: pki.KeyPair) -> str:
    return yaml.safe_dump({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)}}],
        "users": [{"name": user, "user": {"client-certificate-data": _b64(pair.cert_pem), "client-key-data": _b64(pair.key_pem)}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
        "current-context": "local",
    })


def concurrency_limits(cpus: int) -> list[str]:
    """The API server's total concurrency, sized to the CPUs it has. Pure.

    API Priority and Fairness divides this total among priority levels by
    their shares, and queues a level's requests only once its seats are
    full. The defaults (400 + 200 seats) are sized for large control planes:
    on two cores the tenant level's share is about 65 seats, so a tenant's
    64 concurrent LISTs never queue and simply take the CPU from everyone
    (deploy/kubernetes/flowcontrol.yaml). With 30 seats per core, the level
    holds about 3 per core and a flood waits in its own queues."""
    return [f"--max-requests-inflight={20 * cpus}", f"--max-mutating-requests-inflight={10 * cpus}"]


@dataclass
class LocalCluster:
    """A cluster whose state lives under `state_dir`.

    Reusing a state dir keeps etcd data, certificates and imported images (a
    dev gateway's database keeps pointing at namespaces that still exist);
    ports are new on every start.
    """

    state_dir: Path
    bin_dir: Path
    services_dir: Path | None = None
    """kube-proxy and coredns (devstack.services); without them the cluster runs no Services."""
    server: str = ""
    audit_webhook_port: int = 0
    """Where the API server sends its audit batches (devstack.auditing):
    the gateway's GATEWAY_AUDIT_LISTEN is 127.0.0.1 and this port."""
    node: LocalNode | None = None
    with_node: bool = True
    """False for a further cluster of a fleet: a control plane only (no kubelet, no scheduler)."""
    service_account_issuer: str = SERVICE_ACCOUNT_ISSUER
    audit_shared_with: "LocalCluster | None" = None
    """Send the audit log where this (started) cluster's goes: one gateway,
    one audit listener. Its audit CA and pairs are copied, its port taken."""
    started_in: float = 0.0
    """Seconds the last `start` took (the bench's cluster start time)."""
    _children: Children = field(init=False)
    _apiserver_argv: list[str] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self._children = Children(self.state_dir / "logs")

    @property
    def admin_kubeconfig(self) -> Path:
        return self.state_dir / "admin.kubeconfig"

    @property
    def gateway_kubeconfig(self) -> Path:
        return self.state_dir / "gateway.kubeconfig"

    @property
    def ca_file(self) -> Path:
        return self.state_dir / "pki" / "ca.crt"

    @property
    def audit_client_ca(self) -> Path:
        """GATEWAY_AUDIT_CLIENT_CA: the CA of the API server's audit client certificate."""
        return self.state_dir / "pki" / f"{auditing.AUDIT_CA}.crt"

    @property
    def audit_listener_pair(self) -> tuple[Path, Path]:
        """GATEWAY_AUDIT_TLS_CERT_FILE and _KEY_FILE: the certificate the API server trusts there."""
        pki_dir = self.state_dir / "pki"
        return pki_dir / f"{auditing.AUDIT_LISTENER}.crt", pki_dir / f"{auditing.AUDIT_LISTENER}.key"

    def audit_environment(self) -> dict[str, str]:
        """The gateway's GATEWAY_AUDIT_* variables for this cluster's audit webhook."""
        cert, key = self.audit_listener_pair
        return {"GATEWAY_AUDIT_LISTEN": f"127.0.0.1:{self.audit_webhook_port}", "GATEWAY_AUDIT_TLS_CERT_FILE": str(cert),
                "GATEWAY_AUDIT_TLS_KEY_FILE": str(key), "GATEWAY_AUDIT_CLIENT_CA": str(self.audit_client_ca)}

    @property
    def kubectl(self) -> Path:
        return self.bin_dir / "kubectl"

    def _kubeconfig_for(self, stem: str) -> Path:
        return self.state_dir / f"{stem}.kubeconfig"

    # -- lifecycle ---------------------------------------------------------

    def start(self, timeout: float = 120.0) -> None:
        began = time.monotonic()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        pki_dir = self.state_dir / "pki"
        self.ensure_pki(pki_dir)
        deadline = began + timeout
        try:
            parts = None
            if self.with_node:
                try:
                    parts = ensure_node_parts(CACHE)
                except NodePartsError as error:
                    raise ClusterStartError(f"the local node's parts: {error}") from None
            address = node_address()
            # Issued at every start: the node's address may have changed.
            self._issue_apiserver_cert(pki_dir, address)
            etcd_url = self._start_etcd()
            self._wait_for(lambda: self._http_ok(f"{etcd_url}/health"), "etcd", deadline)
            port = free_port()
            self.server = f"https://127.0.0.1:{port}"
            shared = self.audit_shared_with
            self.audit_webhook_port = shared.audit_webhook_port if shared is not None else free_port()
            self._write_kubeconfigs(pki_dir)
            self._start_apiserver(pki_dir, etcd_url, port, address)
            self._wait_for(self._apiserver_ready, "kube-apiserver", deadline)
            self._start_controller_manager(pki_dir)
            if parts is not None:
                self._start_scheduler()
            self._bootstrap_rbac()
            if parts is not None:
                dns_ready = self._start_coredns(address) if self.services_dir is not None else None
                self.node = self._node(pki_dir, parts, address)
                self.node.start()
                if dns_ready is not None:
                    self._wait_for(lambda: self._http_ok(dns_ready), "CoreDNS", deadline)
            self._wait_for(self._controllers_working, "kube-controller-manager", deadline)
            self._wait_for(self._policies_enforced, "the gateway's confinement policy", deadline)
            self._wait_for_tenant_walls(deadline)
            if parts is not None:
                self._wait_for(self._node_ready, "the local node", deadline)
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - began

    def stop(self) -> None:
        if self.node is not None:
            self.node.stop()
            self.node = None
        self._children.stop()

    def __enter__(self) -> "LocalCluster":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- pieces ------------------------------------------------------------

    def ensure_pki(self, pki_dir: Path) -> None:
        if not (pki_dir / "ca.crt").exists():
            self._write_pki(pki_dir)
        elif pki.common_name(pki_dir / "gateway.crt") != GATEWAY_USER:
            # A state dir from before the gateway took its ServiceAccount's name.
            self._issue_gateway_cert(pki_dir)
        self._issue_missing_identities(pki_dir)  # a state dir from before the node
        if self.audit_shared_with is not None:
            self._copy_audit_pki(self.audit_shared_with.state_dir / "pki", pki_dir)
        auditing.ensure_audit_pki(pki_dir)  # and from before the audit webhook

    @staticmethod
    def _copy_audit_pki(source: Path, pki_dir: Path) -> None:
        for stem in (auditing.AUDIT_CA, auditing.AUDIT_CLIENT, auditing.AUDIT_LISTENER):
            for suffix in (".crt", ".key"):
                target = pki_dir / f"{stem}{suffix}"
                shutil.copyfile(source / f"{stem}{suffix}", target)
                target.chmod(0o600 if suffix == ".key" else 0o644)

    def _write_pki(self, pki_dir: Path) -> None:
        tmp = pki_dir.with_name("pki.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        ca, ca_key = pki.make_ca()
        ca.write(tmp, "ca")
        (tmp / "ca.key").write_bytes(ca.key_pem)
        self._issue_gateway_cert(tmp)
        self._issue_missing_identities(tmp)
        sa_key = tmp / "sa.key"
        sa_key.write_bytes(pki.make_service_account_signing_key())
        sa_key.chmod(0o600)
        tmp.rename(pki_dir)  # all or nothing: a crash mid-way leaves no half PKI

    @staticmethod
    def _issue_apiserver_cert(pki_dir: Path, address: str) -> None:
        ca, ca_key = pki.load_ca(pki_dir)
        pki.issue(ca, ca_key, common_name="kube-apiserver",
                  server_hosts=services.apiserver_hosts(address)).write(pki_dir, "apiserver")

    @staticmethod
    def _issue_gateway_cert(pki_dir: Path) -> None:
        ca, ca_key = pki.load_ca(pki_dir)
        pki.issue(ca, ca_key, common_name=GATEWAY_USER, organizations=GATEWAY_GROUPS).write(pki_dir, "gateway")

    @staticmethod
    def _issue_missing_identities(pki_dir: Path) -> None:
        ca, ca_key = pki.load_ca(pki_dir)
        for stem, (user, groups) in _CLIENT_IDENTITIES.items():
            if not (pki_dir / f"{stem}.crt").exists():
                pki.issue(ca, ca_key, common_name=user, organizations=groups).write(pki_dir, stem)

    def _write_kubeconfigs(self, pki_dir: Path) -> None:
        ca = (pki_dir / "ca.crt").read_bytes()
        users = {stem: user for stem, (user, _groups) in _CLIENT_IDENTITIES.items()}
        users["gateway"] = "tenant-gateway"
        for stem, user in users.items():
            pair = pki.KeyPair((pki_dir / f"{stem}.crt").read_bytes(), (pki_dir / f"{stem}.key").read_bytes())
            path = self._kubeconfig_for(stem)
            path.write_text(_kubeconfig(self.server, ca, user, pair))
            path.chmod(0o600)

    def serving_certificate(self, stem: str, hosts: tuple[str, ...]) -> tuple[Path, Path]:
        """A serving certificate from the cluster's CA (`ca_file`), for a
        local process such as the dev gateway; issued anew every time."""
        ca, ca_key = pki.load_ca(self.state_dir / "pki")
        return pki.issue(ca, ca_key, common_name=hosts[0], server_hosts=hosts).write(self.state_dir / "pki", stem)

    def _node(self, pki_dir: Path, parts: NodeParts, address: str) -> LocalNode:
        ca, ca_key = pki.load_ca(pki_dir)
        # Issued at every start: the node's address may have changed.
        serving = pki.issue(ca, ca_key, common_name=NODE_NAME, server_hosts=(address, NODE_NAME)).write(
            pki_dir, "kubelet-serving")
        kube_proxy = None
        if self.services_dir is not None:
            kube_proxy = (self.services_dir / "kube-proxy", self._kubeconfig_for("kube-proxy"))
        return LocalNode(self.state_dir / "node", self.bin_dir / "kubelet", parts, self._kubeconfig_for("node"),
                         self.ca_file, serving, address, kube_proxy)

    def _start_coredns(self, address: str) -> str:
        """CoreDNS on the node's address behind the kube-dns Service; returns its readiness URL."""
        assert self.services_dir is not None
        port, ready_port = free_port(), free_port()
        corefile = self.state_dir / "Corefile"
        corefile.write_text(services.corefile(address=address, port=port, ready_port=ready_port,
                                              kubeconfig=self._kubeconfig_for("coredns")))
        self.kubectl_run("apply", "--server-side", "--force-conflicts", "-f", "-",
                         input=services.dns_manifests(address, port))
        self._children.spawn("coredns", [str(self.services_dir / "coredns"), "-conf", str(corefile)])
        return f"http://127.0.0.1:{ready_port}/ready"

    def _start_etcd(self) -> str:
        client, peer = free_port(), free_port()
        url = f"http://127.0.0.1:{client}"
        self._children.spawn("etcd", [
            str(self.bin_dir / "etcd"),
            "--name=local",
            f"--data-dir={self.state_dir / 'etcd'}",
            f"--listen-client-urls={url}", f"--advertise-client-urls={url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=local=http://127.0.0.1:{peer}",
            "--listen-metrics-urls=", "--log-level=warn",
            # A throwaway cluster: durability is not worth the fsync latency.
            "--unsafe-no-fsync",
        ])
        return url

    def pids(self) -> dict[str, int]:
        """The control plane's processes (not the node's), by name: for the bench's memory figures."""
        return self._children.pids()

    def stop_apiserver(self) -> None:
        """Take the API server away (connections refused), the rest running:
        a cluster that is down, for the gateway's tests. Killed after a
        second: asked to stop, it takes ten (it is a crash, not a drain)."""
        self._children.stop("kube-apiserver", timeout=1.0)

    def restart_apiserver(self, timeout: float = 60.0) -> None:
        """Start the API server again, as before and on the same port; back when ready."""
        self._children.spawn("kube-apiserver", self._apiserver_argv)
        self._wait_for(self._apiserver_ready, "kube-apiserver", time.monotonic() + timeout)

    def _start_apiserver(self, pki_dir: Path, etcd_url: str, port: int, address: str) -> None:
        self._apiserver_argv = [
            str(self.bin_dir / "kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            # Old revisions a write loop leaves in etcd live until compaction:
            # a minute of the tenants' measured write rate fits the quota
            # beside their budgets (README, "How fast a tenant can write").
            "--etcd-compaction-interval=1m",
            *concurrency_limits(os.cpu_count() or 1),
            # Every address, so pods reach it at the node's address, which it
            # advertises: the `kubernetes` Service's endpoint (a loopback one is
            # refused). Callers on the host keep using 127.0.0.1.
            "--bind-address=0.0.0.0", f"--advertise-address={address}", f"--secure-port={port}",
            f"--tls-cert-file={pki_dir / 'apiserver.crt'}", f"--tls-private-key-file={pki_dir / 'apiserver.key'}",
            f"--client-ca-file={pki_dir / 'ca.crt'}",
            # Node: the kubelet sees only its own pods' objects, as in any real cluster.
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            f"--service-account-issuer={self.service_account_issuer}",
            f"--service-account-key-file={pki_dir / 'sa.key'}",
            f"--service-account-signing-key-file={pki_dir / 'sa.key'}",
            # 24 h: above the gateway's 2 h, so the requested lifetime is the one granted.
            "--service-account-max-token-expiration=24h",
            f"--service-cluster-ip-range={services.SERVICE_CIDR}",
            # As kubeadm and managed clusters run it, so Pod Security admission
            # (not this flag) is what keeps tenants' privileged pods out.
            "--allow-privileged=true",
            # Reaching pods (exec, logs, port-forward): dial the node's address,
            # prove who we are, and verify the kubelet. Set from the first start:
            # restarting an API server with open watches takes up to a minute.
            "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-client-certificate={pki_dir / 'kubelet-client.crt'}",
            f"--kubelet-client-key={pki_dir / 'kubelet-client.key'}",
            f"--kubelet-certificate-authority={pki_dir / 'ca.crt'}",
            "--profiling=false",
            # The audit log, sent to the gateway's audit listener (devstack.auditing).
            *auditing.write_config(self.state_dir, pki_dir, self.audit_webhook_port),
        ]
        self._children.spawn("kube-apiserver", self._apiserver_argv)

    def _start_controller_manager(self, pki_dir: Path) -> None:
        self._children.spawn("kube-controller-manager", [
            str(self.bin_dir / "kube-controller-manager"),
            f"--kubeconfig={self.admin_kubeconfig}",
            f"--controllers={','.join(CONTROLLERS)}",
            "--leader-elect=false", "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki_dir / 'sa.key'}",
            f"--root-ca-file={pki_dir / 'ca.crt'}",
            "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
            "--concurrent-namespace-syncs=5", "--profiling=false",
            # The quota controller counts from its caches, and a new tenant's
            # first count can miss an object made that moment (kube-root-ca.crt):
            # its full recount corrects it, every 5 minutes by default.
            "--resource-quota-sync-period=15s",
        ])

    def _start_scheduler(self) -> None:
        self._children.spawn("kube-scheduler", [
            str(self.bin_dir / "kube-scheduler"),
            f"--kubeconfig={self._kubeconfig_for('scheduler')}",
            f"--authentication-kubeconfig={self._kubeconfig_for('scheduler')}",
            f"--authorization-kubeconfig={self._kubeconfig_for('scheduler')}",
            "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
            "--profiling=false",
        ])

    def _bootstrap_rbac(self) -> None:
        manifests = "\n---\n".join([*(path.read_text() for path in CLUSTER_MANIFESTS), _KUBELET_CLIENT_BINDING])
        self.kubectl_run("apply", "--server-side", "--force-conflicts", "-f", "-", input=manifests)

    # -- probes ------------------------------------------------------------

    def kubectl_run(self, *args: str, input: str | None = None, kubeconfig: Path | None = None,
                    check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run the real kubectl; `kubeconfig` defaults to the admin one."""
        result = subprocess.run(
            [str(self.kubectl), f"--kubeconfig={kubeconfig or self.admin_kubeconfig}", *args],
            input=input, capture_output=True, text=True, timeout=60,
        )
        if check and result.returncode != 0:
            raise ClusterStartError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def _admin_ssl(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        pki_dir = self.state_dir / "pki"
        context.load_cert_chain(pki_dir / "admin.crt", pki_dir / "admin.key")
        return context

    def _http_ok(self, url: str, context: ssl.SSLContext | None = None) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2, context=context) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def _apiserver_ready(self) -> bool:
        return self._http_ok(f"{self.server}/readyz", self._admin_ssl())

    def _controllers_working(self) -> bool:
        """Aggregated roles filled in and the default ServiceAccount made."""
        admin_role = self.kubectl_run("get", "clusterrole", "admin", "-o", "json", check=False)
        if admin_role.returncode != 0 or not json.loads(admin_role.stdout).get("rules"):
            return False
        return self.kubectl_run("get", "serviceaccount", "default", "-n", "default", check=False).returncode == 0

    def _policies_enforced(self) -> bool:
        """Policies load through an informer; tests must not race it."""
        probe = self.kubectl_run("-n", "kube-system", "create", "serviceaccount", "policy-probe", "--dry-run=server",
                                 kubeconfig=self.gateway_kubeconfig, check=False)
        return probe.returncode != 0 and "tenant-gateway-confined" in probe.stderr

    def _wait_for_tenant_walls(self, deadline: float) -> None:
        """Every tenant wall refuses a dry run with its own message, in a
        throwaway namespace labelled as a suspended workspace."""
        ns = f"policy-probe-{uuid.uuid4().hex[:8]}"
        self.kubectl_run("create", "namespace", ns)
        try:
            # An ordinary identity with `edit` there, bound before the namespace
            # is a tenant's (afterwards the subjects policy would refuse it).
            self.kubectl_run("-n", ns, "create", "serviceaccount", "prober")
            self.kubectl_run("-n", ns, "create", "rolebinding", "prober", "--clusterrole=edit",
                             f"--serviceaccount={ns}:prober")
            self.kubectl_run("label", "namespace", ns, f"{WORKSPACE_LABEL}=policy-probe", f"{SUSPENDED_LABEL}=true")
            probes = {
                "tenant-gateway-no-external-names": ("may not be of type ExternalName", ["create", "-f", "-"],
                                                     _EXTERNAL_NAME_SERVICE),
                "tenant-gateway-rolebinding-subjects": ("only that namespace's own ServiceAccounts",
                                                        ["create", "-f", "-"], _USER_ROLEBINDING),
                "tenant-gateway-no-gateway-grade-tokens": ("reserved for the gateway",
                                                           ["create", "serviceaccount", "tenant-gateway"], None),
                "tenant-gateway-volume-sources": ("csi volumes only", ["create", "-f", "-"], _NFS_POD),
                "tenant-gateway-node-placement": ("may not name their node", ["create", "-f", "-"], _PLACED_POD),
                "tenant-gateway-pod-priority": ("system- priority classes", ["create", "-f", "-"], _CRITICAL_POD),
                "tenant-gateway-pod-finalizers": ("only Kubernetes' own", ["create", "-f", "-"], _FINALIZED_POD),
                "tenant-gateway-suspended": ("this workspace is suspended",
                                             ["create", "configmap", "probe", f"--as=system:serviceaccount:{ns}:prober"],
                                             None),
            }
            for name, (message, args, manifest) in probes.items():
                def refused(message: str = message, args: list[str] = args, manifest: str | None = manifest) -> bool:
                    result = self.kubectl_run("-n", ns, *args, "--dry-run=server", input=manifest, check=False)
                    return result.returncode != 0 and message in result.stderr
                self._wait_for(refused, f"admission policy {name}", deadline)
        finally:
            self.kubectl_run("delete", "namespace", ns, "--wait=false", check=False)

    def _node_ready(self) -> bool:
        found = self.kubectl_run("get", "node", NODE_NAME, "-o", "json", check=False)
        if found.returncode != 0:
            return False
        node = json.loads(found.stdout)
        conditions = node.get("status", {}).get("conditions", [])
        tainted = any(t.get("key") == "node.kubernetes.io/not-ready" for t in node.get("spec", {}).get("taints", []))
        return not tainted and any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    def _wait_for(self, probe: Callable[[], bool], what: str, deadline: float) -> None:
        groups = [self._children] + ([self.node.children] if self.node is not None else [])
        wait_for(probe, what, deadline, *groups)


def start_local_cluster(state_dir: Path) -> LocalCluster:
    cluster = LocalCluster(state_dir=state_dir, bin_dir=build_binaries(), services_dir=build_service_binaries())
    cluster.start()
    return cluster


def start_further_cluster(state_dir: Path, name: str, first: LocalCluster) -> LocalCluster:
    """Another control plane beside `first` (see the module docstring): no
    node, an issuer of its own, its audit log sent where `first`'s goes."""
    cluster = LocalCluster(state_dir=state_dir, bin_dir=first.bin_dir, with_node=False,
                           service_account_issuer=fleet_issuer(name), audit_shared_with=first)
    cluster.start()
    return cluster
