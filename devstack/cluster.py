"""A throwaway Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver and
kube-controller-manager, built from the Go module proxy by
`deploy/local-cluster/build.sh` and started as child processes.

Why the controller manager: without it the aggregated `admin`/`edit`/`view`
roles are empty, quota is never enforced and namespaces never finish deleting,
so every RBAC or quota test would pass for the wrong reason.

The cluster writes two kubeconfigs: `admin.kubeconfig` (system:masters, for
tests and operators) and `gateway.kubeconfig`, a client certificate carrying
the username and groups of the in-cluster gateway's ServiceAccount. So the
ClusterRoleBinding and admission policies in deploy/kubernetes apply to it
unchanged, and the suite proves exactly what a real installation grants. Children
get PR_SET_PDEATHSIG, so a killed parent never leaves a control plane behind.
"""

from __future__ import annotations

import base64
import ctypes
import json
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Callable

import yaml

from devstack import pki

REPO_ROOT = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = REPO_ROOT / "deploy" / "local-cluster" / "build.sh"
DEPLOY = REPO_ROOT / "deploy" / "kubernetes"
CLUSTERROLES = DEPLOY / "clusterroles.yaml"
# Applied as shipped; the gateway's own Deployment and namespace are not needed here.
CLUSTER_MANIFESTS = (CLUSTERROLES, DEPLOY / "admission.yaml", DEPLOY / "clusterrolebinding.yaml")

GATEWAY_NAMESPACE = "tenant-gateway-system"
GATEWAY_USER = f"system:serviceaccount:{GATEWAY_NAMESPACE}:tenant-gateway"
GATEWAY_GROUPS = ("system:serviceaccounts", f"system:serviceaccounts:{GATEWAY_NAMESPACE}")
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
# Controllers the gateway's behaviour depends on; see the module docstring.
CONTROLLERS = (
    "clusterrole-aggregation-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "garbage-collector-controller",
    "resourcequota-controller",
)


class ClusterStartError(RuntimeError):
    """The local control plane could not be built or started; the message says which part and where its log is."""


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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    # PR_SET_PDEATHSIG = 1: the kernel sends SIGTERM when the parent exits.
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


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


@dataclass
class LocalCluster:
    """A control plane whose state lives under `state_dir`.

    Reusing a state dir keeps etcd data and certificates (a dev gateway's
    database keeps pointing at namespaces that still exist); ports are new on
    every start.
    """

    state_dir: Path
    bin_dir: Path
    server: str = ""
    _processes: list[tuple[str, subprocess.Popen[bytes], IO[bytes]]] = field(default_factory=list)

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
    def kubectl(self) -> Path:
        return self.bin_dir / "kubectl"

    # -- lifecycle ---------------------------------------------------------

    def start(self, timeout: float = 90.0) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / "logs").mkdir(exist_ok=True)
        pki_dir = self.state_dir / "pki"
        self.ensure_pki(pki_dir)
        deadline = time.monotonic() + timeout
        try:
            etcd_url = self._start_etcd()
            self._wait_for(lambda: self._http_ok(f"{etcd_url}/health"), "etcd", deadline)
            port = _free_port()
            self.server = f"https://127.0.0.1:{port}"
            self._write_kubeconfigs(pki_dir)
            self._start_apiserver(pki_dir, etcd_url, port)
            self._wait_for(self._apiserver_ready, "kube-apiserver", deadline)
            self._start_controller_manager(pki_dir)
            self._bootstrap_rbac()
            self._wait_for(self._controllers_working, "kube-controller-manager", deadline)
            self._wait_for(self._policies_enforced, "admission policies", deadline)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for _name, process, log in reversed(self._processes):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            log.close()
        self._processes.clear()

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

    def _write_pki(self, pki_dir: Path) -> None:
        tmp = pki_dir.with_name("pki.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        ca, ca_key = pki.make_ca()
        ca.write(tmp, "ca")
        (tmp / "ca.key").write_bytes(ca.key_pem)
        pki.issue(ca, ca_key, common_name="kube-apiserver",
                  server_hosts=("127.0.0.1", "localhost", "kubernetes.default.svc")).write(tmp, "apiserver")
        pki.issue(ca, ca_key, common_name="cluster-admin", organizations=("system:masters",)).write(tmp, "admin")
        self._issue_gateway_cert(tmp)
        sa_key = tmp / "sa.key"
        sa_key.write_bytes(pki.make_service_account_signing_key())
        sa_key.chmod(0o600)
        tmp.rename(pki_dir)  # all or nothing: a crash mid-way leaves no half PKI

    @staticmethod
    def _issue_gateway_cert(pki_dir: Path) -> None:
        ca, ca_key = pki.load_ca(pki_dir)
        pki.issue(ca, ca_key, common_name=GATEWAY_USER, organizations=GATEWAY_GROUPS).write(pki_dir, "gateway")

    def _write_kubeconfigs(self, pki_dir: Path) -> None:
        ca = (pki_dir / "ca.crt").read_bytes()
        for stem, path in (("admin", self.admin_kubeconfig), ("gateway", self.gateway_kubeconfig)):
            pair = pki.KeyPair((pki_dir / f"{stem}.crt").read_bytes(), (pki_dir / f"{stem}.key").read_bytes())
            user = "cluster-admin" if stem == "admin" else "tenant-gateway"
            path.write_text(_kubeconfig(self.server, ca, user, pair))
            path.chmod(0o600)

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.state_dir / "logs" / f"{name}.log", "ab")
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
        self._processes.append((name, process, log))

    def _start_etcd(self) -> str:
        client, peer = _free_port(), _free_port()
        url = f"http://127.0.0.1:{client}"
        self._spawn("etcd", [
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

    def _start_apiserver(self, pki_dir: Path, etcd_url: str, port: int) -> None:
        self._spawn("kube-apiserver", [
            str(self.bin_dir / "kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={port}",
            f"--tls-cert-file={pki_dir / 'apiserver.crt'}", f"--tls-private-key-file={pki_dir / 'apiserver.key'}",
            f"--client-ca-file={pki_dir / 'ca.crt'}",
            "--authorization-mode=RBAC",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki_dir / 'sa.key'}",
            f"--service-account-signing-key-file={pki_dir / 'sa.key'}",
            # 24 h: above the gateway's 2 h, so the requested lifetime is the one granted.
            "--service-account-max-token-expiration=24h",
            "--service-cluster-ip-range=10.96.0.0/24",
            # As kubeadm and managed clusters run it, so Pod Security admission
            # (not this flag) is what keeps tenants' privileged pods out.
            "--allow-privileged=true",
            # The lease reconciler would publish 127.0.0.1 as an endpoint, which validation rejects.
            "--endpoint-reconciler-type=none",
            "--profiling=false",
        ])

    def _start_controller_manager(self, pki_dir: Path) -> None:
        self._spawn("kube-controller-manager", [
            str(self.bin_dir / "kube-controller-manager"),
            f"--kubeconfig={self.admin_kubeconfig}",
            f"--controllers={','.join(CONTROLLERS)}",
            "--leader-elect=false", "--use-service-account-credentials=false",
            f"--service-account-private-key-file={pki_dir / 'sa.key'}",
            f"--root-ca-file={pki_dir / 'ca.crt'}",
            "--bind-address=127.0.0.1", f"--secure-port={_free_port()}",
            "--concurrent-namespace-syncs=5", "--profiling=false",
        ])

    def _bootstrap_rbac(self) -> None:
        manifests = "\n---\n".join(path.read_text() for path in CLUSTER_MANIFESTS)
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

    def _wait_for(self, probe: Callable[[], bool], what: str, deadline: float) -> None:
        while time.monotonic() < deadline:
            for name, process, _log in self._processes:
                if process.poll() is not None:
                    log_path = self.state_dir / "logs" / f"{name}.log"
                    tail = log_path.read_text(errors="replace").splitlines()[-15:]
                    raise ClusterStartError(f"{name} exited with {process.returncode}; last lines of {log_path}:\n" + "\n".join(tail))
            if probe():
                return
            time.sleep(0.25)
        raise ClusterStartError(f"{what} did not become ready in time; logs in {self.state_dir / 'logs'}")


def start_local_cluster(state_dir: Path) -> LocalCluster:
    cluster = LocalCluster(state_dir=state_dir, bin_dir=build_binaries())
    cluster.start()
    return cluster
