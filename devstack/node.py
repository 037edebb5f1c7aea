"""A real node beside the local control plane: containerd, runc and a kubelet
running pods, so exec, attach, logs, port-forward and cp reach real processes.

The node's own state lives under its directory (containerd's root and state,
the kubelet's root, pod logs, CNI address leases, the volume plugin dir). What
it must change on the host (its cgroupRoot, a bridge, sysctls, a few shared
paths hard-coded upstream) is recorded and put back by devstack.hoststate.

Choices, each for a reason measured on these machines:
* a private `bridge` + `host-local` network with its own /24 and no
  masquerading: containerd 1.6 cannot run a non-hostNetwork pod on a
  loopback-only CNI config, and no iptables is needed;
* the node address is the default route's source address: the kubelet
  refuses a loopback node IP. It listens there with client-certificate and
  webhook authentication and anonymous access off;
* containerd's `restrict_oom_score_adj`: without CAP_SYS_RESOURCE runc
  cannot lower the sandbox's oom_score_adj and every sandbox fails;
* a cgroupRoot of its own, so two nodes on one machine (tests beside
  `make run`) never delete each other's pods;
* kube-proxy beside the kubelet when given one (devstack.services), so
  Services work; the kubelet points pods at the cluster DNS.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import logging
import os
import subprocess
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from devstack import hoststate, services
from devstack.nodeparts import PAUSE_IMAGE, NodeParts
from devstack.processes import Children, ClusterStartError, free_port

NODE_NAME = "local-node"
log = logging.getLogger(__name__)


def node_address() -> str:
    """The default route's source address (the kubelet refuses loopback)."""
    try:
        routes = json.loads(subprocess.run(["ip", "-j", "-4", "route", "show", "default"],
                                           capture_output=True, text=True, check=True).stdout or "[]")
        for route in routes:
            if route.get("prefsrc"):
                return str(route["prefsrc"])
            addresses = json.loads(subprocess.run(["ip", "-j", "-4", "addr", "show", "dev", route["dev"]],
                                                  capture_output=True, text=True, check=True).stdout or "[]")
            for link in addresses:
                for info in link.get("addr_info", []):
                    if info.get("family") == "inet" and not ipaddress.ip_address(info["local"]).is_loopback:
                        return str(info["local"])
    except (OSError, subprocess.CalledProcessError, ValueError, KeyError):
        pass
    raise ClusterStartError("the local node needs an IPv4 default route with a non-loopback address "
                            "(the kubelet refuses a loopback node IP); `ip -4 route show default` shows none")


def free_pod_subnet() -> str:
    """A /24 for pod addresses that no route on this host and no other live node uses."""
    routes = json.loads(subprocess.run(["ip", "-j", "-4", "route"], capture_output=True, text=True).stdout or "[]")
    used = [ipaddress.ip_network(r["dst"], strict=False) for r in routes if r.get("dst", "default") != "default"]
    used += [ipaddress.ip_network(subnet) for subnet in hoststate.subnets_in_use()]
    for third in range(256):
        candidate = ipaddress.ip_network(f"10.244.{third}.0/24")
        if not any(candidate.overlaps(network) for network in used):
            return str(candidate)
    raise ClusterStartError("no free /24 in 10.244.0.0/16 for the local node's pods")


def preflight() -> None:
    """One clear line instead of a kubelet crash loop."""
    if os.geteuid() != 0:
        raise ClusterStartError("the local node (kubelet, containerd) needs root: run the tests or `make run` as root")
    if not os.access(hoststate.CGROUP_FS, os.W_OK) or not any(hoststate.CGROUP_FS.iterdir()):
        raise ClusterStartError(f"the local node needs writable cgroups under {hoststate.CGROUP_FS}")
    if "overlay" not in Path("/proc/filesystems").read_text():
        raise ClusterStartError("the local node needs the overlay filesystem (containerd's snapshotter)")


# -- configuration (pure) ------------------------------------------------------


def containerd_config(node_dir: Path, parts: NodeParts, cni_conf_dir: Path, socket: Path) -> str:
    def quoted(value: object) -> str:
        return json.dumps(str(value))

    return f"""version = 2
root = {quoted(node_dir / "containerd" / "root")}
state = {quoted(node_dir / "containerd" / "state")}
# Plugins that would write outside the node's directory, or that need
# devices this host does not have.
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = {quoted(socket)}

[metrics]
  address = ""

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = {quoted(PAUSE_IMAGE)}
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = {quoted(parts.runc)}
        Root = {quoted(node_dir / "runc")}
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = {quoted(parts.cni_dir)}
    conf_dir = {quoted(cni_conf_dir)}
"""


def cni_config(network: str, bridge: str, subnet: str, lease_dir: Path) -> dict[str, Any]:
    return {
        "cniVersion": "0.4.0",
        "name": network,
        "plugins": [{
            "type": "bridge",
            "bridge": bridge,
            "isGateway": True,
            "ipMasq": False,
            "hairpinMode": True,
            "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]], "routes": [{"dst": "0.0.0.0/0"}],
                     "dataDir": str(lease_dir)},
        }],
    }


def kubelet_config(node_dir: Path, *, address: str, port: int, healthz_port: int, ca_file: Path,
                   serving: tuple[Path, Path], cgroup_root: str, socket: Path) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": address,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        # Only the API server (client certificate) and callers it vouches for.
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(ca_file)}},
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(serving[0]),
        "tlsPrivateKeyFile": str(serving[1]),
        "containerRuntimeEndpoint": f"unix://{socket}",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root,
        "failSwapOn": False,
        "oomScoreAdj": 0,  # lowering it needs CAP_SYS_RESOURCE
        "podLogsDir": str(node_dir / "pod-logs"),
        "volumePluginDir": str(node_dir / "volume-plugins"),
        "resolvConf": "/etc/resolv.conf",
        "registerNode": True,
        # The built images are the only ones there are: never collect them,
        # and never evict pods of a test machine for a nearly full disk.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                         "nodefs.inodesFree": "1%"},
        "serializeImagePulls": False,
        # CoreDNS behind the kube-dns Service (devstack.services).
        "clusterDNS": [services.CLUSTER_DNS_IP],
        "clusterDomain": services.CLUSTER_DOMAIN,
    }


def _short_id(node_dir: Path) -> str:
    return hashlib.sha256(str(node_dir.resolve()).encode()).hexdigest()[:8]


# -- the running node ------------------------------------------------------------


@dataclass
class LocalNode:
    """One node under `node_dir`, joined to the cluster behind `kubeconfig`."""

    node_dir: Path
    kubelet: Path
    parts: NodeParts
    kubeconfig: Path
    ca_file: Path
    serving: tuple[Path, Path]
    address: str
    kube_proxy: tuple[Path, Path] | None = None
    """kube-proxy's binary and kubeconfig; without them the node runs no Services."""
    children: Children = field(init=False)
    _record: hoststate.NodeRecord | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.children = Children(self.node_dir / "logs")
        short = _short_id(self.node_dir)
        self.cgroup_root = f"/tenant-gateway-{short}"
        self.bridge = f"tgw{short}"
        self.network = f"tenant-gateway-{short}"

    @property
    def run_dir(self) -> Path:
        """Where the node's unix sockets live: a socket path may hold 108
        bytes, and a node dir under a test's temporary folder can be longer
        than that with the kubelet's socket names added."""
        return hoststate.REGISTRY.parent / f"node-{_short_id(self.node_dir)}"

    @property
    def socket(self) -> Path:
        return self.run_dir / "containerd.sock"

    def start(self) -> None:
        """containerd, the images, then the kubelet; Ready is the cluster's to wait for."""
        preflight()
        hoststate.sweep_dead()  # a crashed run's leftovers first
        if self.kube_proxy is not None:
            services.iptables_preflight()
        subnet = free_pod_subnet()
        record = hoststate.record_for(self.node_dir, self.cgroup_root, self.bridge, self.network, self.socket, subnet)
        hoststate.claim(record)
        self._record = record
        # Volatile state from a previous run is meaningless now: containers died with it.
        for volatile in ("containerd/state", "runc", "pod-logs", "cni"):
            hoststate.remove_tree(self.node_dir / volatile)
        hoststate.remove_tree(self.run_dir)
        self.run_dir.mkdir(parents=True)
        cni_conf, leases = self.node_dir / "cni" / "net.d", self.node_dir / "cni" / "leases"
        for folder in (cni_conf, leases, self.run_dir / "kubelet", self.node_dir / "pod-logs"):
            folder.mkdir(parents=True, exist_ok=True)
        (cni_conf / "10-tenant-gateway.conflist").write_text(
            json.dumps(cni_config(self.network, self.bridge, subnet, leases), indent=1))
        config = self.node_dir / "containerd.toml"
        config.write_text(containerd_config(self.node_dir, self.parts, cni_conf, self.socket))
        hoststate.make_cgroups(self.cgroup_root)
        env = {**os.environ, "PATH": f"{self.parts.bin_dir}:{self.parts.runc.parent}:/usr/sbin:/usr/bin:/sbin:/bin"}
        self.children.spawn("containerd", [str(self.parts.bin_dir / "containerd"), "--config", str(config)], env)
        self._wait_for_containerd()
        self._import_images()
        kubelet_yaml = self.node_dir / "kubelet.yaml"
        kubelet_yaml.write_text(yaml.safe_dump(kubelet_config(
            self.node_dir, address=self.address, port=free_port(), healthz_port=free_port(), ca_file=self.ca_file,
            serving=self.serving, cgroup_root=self.cgroup_root, socket=self.socket)))
        self.children.spawn("kubelet", [
            str(self.kubelet), f"--config={kubelet_yaml}", f"--kubeconfig={self.kubeconfig}",
            f"--root-dir={self.run_dir / 'kubelet'}", f"--hostname-override={NODE_NAME}",
            f"--node-ip={self.address}", "--v=0",
        ], env)
        if self.kube_proxy is not None:
            self._start_kube_proxy(subnet, env)

    def _start_kube_proxy(self, subnet: str, env: dict[str, str]) -> None:
        assert self.kube_proxy is not None and self._record is not None
        owner = hoststate.claim_kube_proxy(self._record)
        if owner is None:
            log.warning("another local node on this host runs kube-proxy: this one runs without Services")
            return
        self._record = owner
        binary, kubeconfig = self.kube_proxy
        config = self.node_dir / "kube-proxy.yaml"
        config.write_text(yaml.safe_dump(services.kube_proxy_config(
            kubeconfig=kubeconfig, node_name=NODE_NAME, node_address=self.address, pod_subnet=subnet,
            healthz_port=free_port(), metrics_port=free_port())))
        self.children.spawn("kube-proxy", [str(binary), f"--config={config}", "--v=0"], env)

    def stop(self) -> None:
        """The kubelet first (so it starts nothing new), then every container,
        then containerd, then what they left on the host. kube-proxy goes
        first, so it cannot put back the chains the sweep removes."""
        self.children.stop("kube-proxy")
        self.children.stop("kubelet")
        if self._record is not None:
            hoststate.sweep(self._record)  # kills containers and shims while containerd still runs
        self.children.stop()
        if self._record is not None:
            hoststate.release(self._record)
            self._record = None

    def _ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.parts.bin_dir / "ctr"), "--address", str(self.socket), "-n", "k8s.io", *args],
                              capture_output=True, text=True, timeout=120)

    def _wait_for_containerd(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            self.children.check()
            if self.socket.exists() and self._ctr("version").returncode == 0:
                return
            time.sleep(0.1)
        raise ClusterStartError(f"containerd did not answer in time; log in {self.children.log_dir}")

    def import_image(self, archive: Path) -> None:
        """Load an image archive (docker-save or OCI) into the node's containerd:
        pods run it with `imagePullPolicy: IfNotPresent` or `Never`."""
        result = self._ctr("images", "import", str(archive))
        if result.returncode != 0:
            raise ClusterStartError(f"importing {archive.name} into containerd failed: {result.stderr.strip()}")

    def _import_images(self) -> None:
        present = set(self._ctr("images", "list", "--quiet").stdout.split())
        for archive in self.parts.images:
            if _tag_of(archive) not in present:
                self.import_image(archive)


def _tag_of(archive: Path) -> str:
    with tarfile.open(archive) as tar:
        member = tar.extractfile("manifest.json")
        assert member is not None
        return str(json.load(member)[0]["RepoTags"][0])

