"""What a local node changes on the host outside its own directory, and how
it is put back, by the node's own teardown or by the next run after a crash.

A node touches: one cgroup per hierarchy (its `cgroupRoot`), a bridge, the
mounts under its directory and its short run folder in /run/tenant-gateway
(overlay rootfs, shm, projected volumes), network
namespaces under /run/netns, shim processes and their sockets under
/run/containerd/s, CNI result files, /var/log/containers links, the kubelet's
device-plugin socket, a few sysctls (the bridge plugin turns on
ip_forward; the kubelet sets its kernel tunables; kube-proxy is told to leave
conntrack and route_localnet alone, and they are saved in case), and, on
the node that runs kube-proxy, iptables chains: the KUBE- chains that were
not there when it started are removed with every rule that jumps to them.
Each running node is
recorded in /run/tenant-gateway/nodes (gone at reboot, like everything it
describes); a record whose owner process is dead is swept before a new node
starts. Sysctls are saved before the first node and restored after the last.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

REGISTRY = Path("/run/tenant-gateway/nodes")
_SYSCTLS_SAVED = REGISTRY.parent / "sysctls.json"
CGROUP_FS = Path("/sys/fs/cgroup")
# ip_forward: the CNI bridge plugin; then the kubelet's kernel tunables; then
# what kube-proxy sets unless told not to (devstack.services tells it).
SYSCTLS = (
    "net/ipv4/ip_forward", "vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic",
    "kernel/panic_on_oops", "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
    "net/ipv4/conf/all/route_localnet", "net/netfilter/nf_conntrack_max",
    "net/netfilter/nf_conntrack_tcp_timeout_established", "net/netfilter/nf_conntrack_tcp_timeout_close_wait",
)
IPTABLES = ("iptables", "ip6tables")
# kube-proxy's chains, and the kubelet's canaries, all start so.
_KUBE_CHAIN_PREFIX = "KUBE-"
_SBIN_PATH = "/usr/sbin:/sbin:/usr/bin:/bin"
_SHARED_SOCKET_DIRS = (Path("/run/containerd/s"), Path("/var/lib/kubelet/device-plugins"))
_NETNS_DIRS = (Path("/run/netns"), Path("/var/run/netns"))
_CNI_RESULTS = Path("/var/lib/cni/results")
_CONTAINER_LOG_LINKS = Path("/var/log/containers")
# A live node's netns or shim socket exists a moment before a process uses it.
_ORPHAN_AGE_SECONDS = 60


@dataclass(frozen=True)
class NodeRecord:
    node_dir: str
    cgroup_root: str
    bridge: str
    network: str
    containerd_socket: str
    subnet: str
    owner_pid: int
    owner_start: str
    kube_proxy_chains: dict[str, dict[str, list[str]]] | None = None
    """On the node that runs kube-proxy: per tool (iptables, ip6tables),
    the chains of each table before it started."""

    def owner_alive(self) -> bool:
        return _process_start(self.owner_pid) == self.owner_start


def _process_start(pid: int) -> str | None:
    """The process's start time in ticks: with the pid, it names one process for ever."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def record_for(node_dir: Path, cgroup_root: str, bridge: str, network: str, socket: Path, subnet: str) -> NodeRecord:
    pid = os.getpid()
    return NodeRecord(str(node_dir), cgroup_root, bridge, network, str(socket), subnet, pid, _process_start(pid) or "")


def subnets_in_use() -> set[str]:
    """Pod subnets of live nodes: a bridge (and its route) exists only once a pod runs."""
    return {record.subnet for _path, record in _records() if record.owner_alive()}


def live_nodes() -> list[NodeRecord]:
    """Nodes on this host whose owner process still runs."""
    return [record for _path, record in _records() if record.owner_alive()]


def _records() -> list[tuple[Path, NodeRecord]]:
    found = []
    for path in sorted(REGISTRY.glob("*.json")):
        try:
            found.append((path, NodeRecord(**json.loads(path.read_text()))))
        except (OSError, ValueError, TypeError):
            path.unlink(missing_ok=True)
    return found


def _record_path(record: NodeRecord) -> Path:
    return REGISTRY / (record.cgroup_root.strip("/") + ".json")


def sweep_dead() -> None:
    """Before a node starts: put back what nodes whose owner died left."""
    REGISTRY.mkdir(parents=True, exist_ok=True)
    for path, old in _records():
        if not old.owner_alive():
            sweep(old)
            path.unlink(missing_ok=True)


def claim(record: NodeRecord) -> None:
    """Record a starting node; save the sysctls if it is the only one."""
    if not _records():
        if _SYSCTLS_SAVED.exists():
            restore_sysctls()  # left by a run that crashed
        _SYSCTLS_SAVED.write_text(json.dumps({name: _sysctl(name) for name in SYSCTLS}))
    _record_path(record).write_text(json.dumps(asdict(record)))


def claim_kube_proxy(record: NodeRecord) -> NodeRecord | None:
    """Make this node the host's kube-proxy node, recording the iptables
    chains as they are now; None if a live node already is (its chains have
    fixed names: two kube-proxies would rewrite each other's)."""
    mine = _record_path(record)
    if any(path != mine and other.kube_proxy_chains is not None and other.owner_alive()
           for path, other in _records()):
        return None
    updated = replace(record, kube_proxy_chains={tool: parse_chains(iptables_save(tool)) for tool in IPTABLES})
    mine.write_text(json.dumps(asdict(updated)))
    return updated


def _run_dir(record: NodeRecord) -> Path:
    """The node's short folder for sockets and the kubelet (devstack.node)."""
    return Path(record.containerd_socket).parent


def release(record: NodeRecord) -> None:
    """After a node stopped: put back what it changed."""
    sweep(record)
    remove_tree(_run_dir(record))
    _record_path(record).unlink(missing_ok=True)
    if not live_nodes():
        # The last node: no other is making a netns or socket this moment,
        # so the orphans of its last pods go now, whatever their age.
        sweep_orphans(Path(record.node_dir), min_age=0)
        restore_sysctls()


def _sysctl(name: str) -> str | None:
    try:
        return (Path("/proc/sys") / name).read_text().strip()
    except OSError:
        return None  # a kernel without it: nothing to save or restore


def restore_sysctls() -> None:
    try:
        saved = json.loads(_SYSCTLS_SAVED.read_text())
    except (OSError, ValueError):
        return
    for name, value in saved.items():
        try:
            if value is not None and _sysctl(name) != value:
                (Path("/proc/sys") / name).write_text(value)
        except OSError:
            pass
    _SYSCTLS_SAVED.unlink(missing_ok=True)


# -- the sweep ------------------------------------------------------------


def sweep(record: NodeRecord) -> None:
    """Everything of this node's that outlives its kubelet and containerd:
    containers and shims first (they hold the mounts), then mounts, network
    and files. Safe to run twice, and while other nodes run."""
    _kill_cgroup_processes(record.cgroup_root)
    _kill_shims(record.containerd_socket)
    _unmount_below(Path(record.node_dir))
    _unmount_below(_run_dir(record))
    _remove_cgroups(record.cgroup_root)
    subprocess.run(["ip", "link", "delete", record.bridge], capture_output=True)
    # Results are named <network>-<sandbox id>-<interface>; the loopback
    # plugin's network is shared by every node, its sandbox ids are not.
    sandboxes = {path.name for path in Path(record.node_dir).glob("containerd/*/io.containerd.grpc.v1.cri/sandboxes/*")}
    for result in _CNI_RESULTS.glob("*"):
        if result.name.startswith(f"{record.network}-") or any(f"-{sandbox}-" in result.name for sandbox in sandboxes):
            result.unlink(missing_ok=True)
    if record.kube_proxy_chains is not None:
        remove_new_kube_chains(record.kube_proxy_chains)
    sweep_orphans(Path(record.node_dir))


def sweep_orphans(node_dir: Path, min_age: float = _ORPHAN_AGE_SECONDS) -> None:
    """Shared places whose entries name no owner: drop what no live process
    uses and is older than `min_age` seconds."""
    _remove_orphan_netns(min_age)
    listening = _listening_unix_sockets()
    for folder in _SHARED_SOCKET_DIRS:
        for entry in folder.glob("*"):
            if entry.is_socket() and str(entry) not in listening and _old(entry, min_age):
                entry.unlink(missing_ok=True)
    for link in _CONTAINER_LOG_LINKS.glob("*.log"):
        if link.is_symlink() and (not link.exists() or str(link.resolve()).startswith(str(node_dir) + "/")):
            link.unlink(missing_ok=True)
    # Made for us if they were not there; a host's own containerd keeps them.
    for folder in (*_SHARED_SOCKET_DIRS, Path("/run/containerd"), Path("/var/lib/kubelet"), _CONTAINER_LOG_LINKS, _CNI_RESULTS,
                   _CNI_RESULTS.parent, *_NETNS_DIRS):
        _remove_if_empty(folder)


def _old(path: Path, min_age: float) -> bool:
    try:
        return time.time() - path.lstat().st_mtime >= min_age
    except OSError:
        return False


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass


def _hierarchies() -> list[Path]:
    """The mounted cgroup hierarchies (v1 controllers, or the one v2 tree)."""
    if (CGROUP_FS / "cgroup.controllers").exists():
        return [CGROUP_FS]
    return [path for path in CGROUP_FS.iterdir() if path.is_dir() and not path.is_symlink()]


def make_cgroups(cgroup_root: str) -> None:
    """The kubelet refuses a cgroupRoot that does not exist."""
    for hierarchy in _hierarchies():
        folder = hierarchy / cgroup_root.strip("/")
        folder.mkdir(exist_ok=True)
        if hierarchy.name == "cpuset":  # v1 cpusets start empty: no task could join
            for name in ("cpuset.cpus", "cpuset.mems"):
                (folder / name).write_text((hierarchy / name).read_text())


def _cgroup_dirs(cgroup_root: str) -> list[Path]:
    """Every cgroup below the root, deepest first, in every hierarchy."""
    found: list[Path] = []
    for hierarchy in _hierarchies():
        top = hierarchy / cgroup_root.strip("/")
        if top.is_dir():
            found.extend(Path(path) for path, _dirs, _files in os.walk(top))
    return sorted(found, key=lambda path: len(path.parts), reverse=True)


def _kill_cgroup_processes(cgroup_root: str) -> None:
    for _attempt in range(50):
        pids: set[int] = set()
        for folder in _cgroup_dirs(cgroup_root):
            try:
                pids.update(int(line) for line in (folder / "cgroup.procs").read_text().split())
            except OSError:
                continue
        if not pids:
            return
        for pid in pids:
            _kill(pid)
        time.sleep(0.1)


def _remove_cgroups(cgroup_root: str) -> None:
    for _attempt in range(50):
        left = False
        for folder in _cgroup_dirs(cgroup_root):
            try:
                folder.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                left = True  # a process is still leaving
        if not left:
            return
        time.sleep(0.1)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _kill_shims(containerd_socket: str) -> None:
    """Shims outlive containerd by design; ours name our containerd's socket."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and containerd_socket.encode() in argv:
            _kill(int(entry.name))


def _mount_points() -> list[str]:
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        field = line.split()[4]
        # mountinfo escapes space, tab, newline and backslash in octal
        points.append(field.encode().decode("unicode_escape"))
    return points


def _unmount_below(folder: Path) -> None:
    prefix = str(folder) + "/"
    for point in sorted((p for p in _mount_points() if p.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "--lazy", point], capture_output=True)


def _remove_orphan_netns(min_age: float) -> None:
    """A pod's network namespace is a bind mount named cni-<uuid>; one that no
    process is in belongs to a pod that is gone (every live pod holds its
    sandbox process in it), unless it was made a moment ago for a pod that
    another node is starting."""
    live = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                live.add(os.stat(entry / "ns" / "net").st_ino)
            except OSError:
                continue
    mounted = set(_mount_points())
    orphans = []
    for folder in _NETNS_DIRS:
        for namespace in folder.glob("cni-*"):
            try:
                inode = os.stat(namespace).st_ino
            except OSError:
                continue
            if inode not in live and _old(namespace, min_age):
                orphans.append(namespace)
    if not orphans:
        return
    veths = _veths_into({namespace.name for namespace in orphans})  # named only while the netns is
    for namespace in orphans:
        if str(namespace) in mounted:
            subprocess.run(["umount", "--lazy", str(namespace)], capture_output=True)
        namespace.unlink(missing_ok=True)
    # The kernel frees a namespace, and the pod's veth pair with it, a moment
    # after its last reference goes: teardown ends when they are gone.
    deadline = time.monotonic() + 5
    while veths & _links() and time.monotonic() < deadline:
        time.sleep(0.1)


def _veths_into(namespaces: set[str]) -> set[str]:
    """Host ends of veth pairs whose other end is in one of `namespaces`."""
    listed = subprocess.run(["ip", "-d", "-o", "link", "show", "type", "veth"], capture_output=True, text=True).stdout
    names = set()
    for line in listed.splitlines():
        words = line.split()
        if "link-netns" in words and words[words.index("link-netns") + 1] in namespaces:
            names.add(words[1].rstrip(":").split("@")[0])
    return names


def _links() -> set[str]:
    listed = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in listed.splitlines() if ":" in line}


def _listening_unix_sockets() -> set[str]:
    paths = set()
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[7].startswith("/"):
            paths.add(fields[7])
    return paths


def remove_tree(folder: Path) -> None:
    """A node directory, once nothing is mounted below it."""
    _unmount_below(folder)
    shutil.rmtree(folder, ignore_errors=True)


# -- iptables ------------------------------------------------------------


def iptables_save(tool: str) -> str:
    """The tool's rules, or nothing if it is not installed or its family is off."""
    binary = shutil.which(f"{tool}-save", path=_SBIN_PATH)
    if binary is None:
        return ""
    try:
        return subprocess.run([binary], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def parse_chains(saved: str) -> dict[str, list[str]]:
    """Table -> chain names, from iptables-save's output. Pure."""
    chains: dict[str, list[str]] = {}
    table = None
    for line in saved.splitlines():
        if line.startswith("*"):
            table = line[1:].strip()
            chains[table] = []
        elif line.startswith(":") and table is not None:
            chains[table].append(line[1:].split()[0])
    return chains


def _jump_target(rule: str) -> str | None:
    try:
        words = shlex.split(rule)
    except ValueError:
        return None
    for flag, target in zip(words, words[1:]):
        if flag in ("-j", "--jump", "-g", "--goto"):
            return target
    return None


def undo_script(before: dict[str, list[str]], saved_now: str) -> str:
    """An `iptables-restore --noflush` script removing the KUBE- chains that
    `saved_now` has and `before` had not, and every other chain's rules that
    jump to them; empty when there are none. Pure."""
    script: list[str] = []
    table: str | None = None
    new: list[str] = []
    deletes: list[str] = []
    for line in saved_now.splitlines():
        if line.startswith("*"):
            table, new, deletes = line[1:].strip(), [], []
        elif table is None:
            continue
        elif line.startswith(":"):
            chain = line[1:].split()[0]
            if chain.startswith(_KUBE_CHAIN_PREFIX) and chain not in before.get(table, []):
                new.append(chain)
        elif line.startswith("-A "):
            chain = line.split()[1]
            if chain not in new and _jump_target(line) in new:
                deletes.append("-D " + line[3:])
        elif line.strip() == "COMMIT" and new:
            script += [f"*{table}", *deletes, *(f"-F {c}" for c in new), *(f"-X {c}" for c in new), "COMMIT"]
    return "\n".join(script) + "\n" if script else ""


def remove_new_kube_chains(before_by_tool: dict[str, dict[str, list[str]]]) -> None:
    """Put iptables back as recorded (devstack.services' kube-proxy)."""
    for tool, before in before_by_tool.items():
        script = undo_script(before, iptables_save(tool))
        binary = shutil.which(f"{tool}-restore", path=_SBIN_PATH)
        if script and binary is not None:
            subprocess.run([binary, "--noflush"], input=script, capture_output=True, text=True, timeout=30)


_BUILT_IN_CHAINS = frozenset({"INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING"})


def comparable_rules(saved: str) -> list[str]:
    """iptables-save's output as a comparable value. Pure. Chains' packet
    counters are left out (they change with any traffic), and so are tables
    and built-in chains that say nothing: a table exists from the first
    command that touches it (on a fresh host, kube-proxy's), and stays,
    empty, with its built-in chains accepting, after every rule is gone."""
    kept = []
    for line in saved.splitlines():
        if line.startswith(":"):
            line = line.rsplit(" [", 1)[0]
            name, _, policy = line[1:].partition(" ")
            if name in _BUILT_IN_CHAINS and policy == "ACCEPT":
                continue
        elif not line.startswith("-"):
            continue  # comments, table headers, COMMIT
        kept.append(line)
    return sorted(kept)


def host_snapshot() -> dict[str, Any]:
    """What a node may change on the host, as comparable values: the
    sysctls, iptables' chains and rules, network links and cgroup roots."""
    rules = {tool: comparable_rules(iptables_save(tool)) for tool in IPTABLES}
    return {
        "sysctls": {name: _sysctl(name) for name in SYSCTLS},
        "iptables": rules,
        "links": sorted(_links()),
        "cgroups": sorted(str(path.name) for hierarchy in _hierarchies() for path in hierarchy.glob("tenant-gateway-*")),
    }
