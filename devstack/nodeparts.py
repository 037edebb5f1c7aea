"""What a local node runs on, fetched and built once per machine into the cache.

containerd, runc and the CNI plugins come from Debian's packages, fetched
with `apt-get download` and unpacked with `dpkg-deb -x`: nothing is installed
system-wide, and the versions speak CRI v1 to the kubelet. No container
registry is reachable, so the two images are built here and imported into
containerd by the node:

* the sandbox ("pause") image: a few lines of C, linked statically, that
  sleep, reap zombies and exit on SIGTERM;
* the test image: Debian's static busybox with a link per applet (sh, cat,
  tar for `kubectl cp`, nc and httpd for port-forwards).

Each image is a one-layer `docker save` archive, which `ctr images import`
reads. Pods use them with `imagePullPolicy: IfNotPresent` (the tags are not
`latest`, so that is the default).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

PACKAGES = ("containerd", "runc", "containernetworking-plugins", "busybox-static")
# Built on the node, with no registry to pull them from: tenants' pods may
# run them from the node's cache only because the gateway is told they are
# shared (GATEWAY_SHARED_IMAGES), as the test suite and `dev` tell it.
LOCAL_IMAGES = "localhost/tenant-gateway/"
PAUSE_IMAGE = "localhost/tenant-gateway/pause:v1"
BUSYBOX_IMAGE = "localhost/tenant-gateway/busybox:v1"
# Bump when what is built here changes, so every cache rebuilds.
_LAYOUT = "1"

_PAUSE_C = r"""
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
static void reap(int sig) { (void)sig; while (waitpid(-1, 0, WNOHANG) > 0) {} }
static void quit(int sig) { (void)sig; _exit(0); }
int main(void) {
    signal(SIGINT, quit);
    signal(SIGTERM, quit);
    signal(SIGCHLD, reap);
    for (;;) pause();
}
"""


class NodePartsError(RuntimeError):
    """The node's parts could not be fetched or built; the message says which and why."""


@dataclass(frozen=True)
class NodeParts:
    root: Path

    @property
    def bin_dir(self) -> Path:
        """containerd, its shims and ctr; put on the node's PATH."""
        return self.root / "usr" / "bin"

    @property
    def runc(self) -> Path:
        return self.root / "usr" / "sbin" / "runc"

    @property
    def cni_dir(self) -> Path:
        return self.root / "usr" / "lib" / "cni"

    @property
    def images(self) -> tuple[Path, ...]:
        return (self.root / "images" / "pause.tar", self.root / "images" / "busybox.tar")


def ensure_node_parts(cache: Path) -> NodeParts:
    """The unpacked packages and built images, from the cache or made now."""
    parts = NodeParts(cache / f"node-parts-{_LAYOUT}")
    if (parts.root / ".complete").exists():
        return parts
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="node-parts.", dir=cache))
    try:
        _unpack_packages(work)
        (work / "images").mkdir()
        pause = _build_pause(work)
        _write_image(work / "images" / "pause.tar", PAUSE_IMAGE, {"bin/pause": pause}, ["/bin/pause"])
        busybox = (work / "bin" / "busybox").read_bytes()
        _write_image(work / "images" / "busybox.tar", BUSYBOX_IMAGE, _busybox_tree(work / "bin" / "busybox", busybox),
                     ["/bin/sh"])
        (work / ".complete").touch()
        shutil.rmtree(parts.root, ignore_errors=True)
        work.rename(parts.root)  # all or nothing: a crash mid-way leaves no half cache
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return parts


def _run(argv: list[str], what: str, cwd: Path | None = None) -> str:
    try:
        return subprocess.run(argv, cwd=cwd, check=True, capture_output=True, text=True).stdout
    except FileNotFoundError:
        raise NodePartsError(f"{what}: {argv[0]} not found (the local node needs Debian's apt-get, dpkg-deb and gcc)") from None
    except subprocess.CalledProcessError as error:
        last = (error.stderr or error.stdout or "").strip().splitlines()[-1:] or ["no output"]
        raise NodePartsError(f"{what} failed: {last[0]}") from None


def _unpack_packages(work: Path) -> None:
    debs = work / "debs"
    debs.mkdir()
    try:
        _run(["apt-get", "download", *PACKAGES], "apt-get download", cwd=debs)
    except NodePartsError:
        # A fresh machine has no package lists yet.
        _run(["apt-get", "update", "-qq"], "apt-get update")
        _run(["apt-get", "download", *PACKAGES], "apt-get download", cwd=debs)
    for deb in sorted(debs.glob("*.deb")):
        _run(["dpkg-deb", "-x", str(deb), str(work)], f"unpacking {deb.name}")
    shutil.rmtree(debs)


def _build_pause(work: Path) -> bytes:
    source, binary = work / "pause.c", work / "pause"
    source.write_text(_PAUSE_C)
    _run(["gcc", "-static", "-O2", "-o", str(binary), str(source)], "building the pause binary (gcc -static, libc6-dev)")
    data = binary.read_bytes()
    source.unlink()
    binary.unlink()
    return data


def _busybox_tree(busybox_path: Path, busybox: bytes) -> dict[str, bytes | str]:
    applets = _run([str(busybox_path), "--list"], "listing busybox applets").split()
    tree: dict[str, bytes | str] = {"bin/busybox": busybox}
    for applet in applets:
        if applet != "busybox" and "/" not in applet:
            tree[f"bin/{applet}"] = "busybox"  # a relative symlink
    tree["etc/passwd"] = b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"
    tree["etc/group"] = b"root:x:0:\nnobody:x:65534:\n"
    return tree


def _layer(tree: dict[str, bytes | str]) -> bytes:
    """A tar layer: bytes are executable files (or 0644 under etc/), str are symlinks."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory in sorted({"bin", "etc", "tmp", "root", "proc", "sys", "dev"}):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if directory == "tmp" else 0o755
            tar.addfile(info)
        for name, content in sorted(tree.items()):
            info = tarfile.TarInfo(name)
            if isinstance(content, str):
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, content, 0o777
                tar.addfile(info)
            else:
                info.size, info.mode = len(content), 0o644 if name.startswith("etc/") else 0o755
                tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def _write_image(path: Path, tag: str, tree: dict[str, bytes | str], command: list[str]) -> None:
    """A one-layer image in `docker save` form."""
    layer = _layer(tree)
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Cmd": command, "Env": ["PATH=/bin"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }, sort_keys=True).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [tag], "Layers": ["layer/layer.tar"]}]).encode()
    with tarfile.open(path, "w") as archive:
        for name, content in ((config_name, config), ("layer/layer.tar", layer), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(content), 0o644
            archive.addfile(info, io.BytesIO(content))
    os.chmod(path, 0o644)
