"""The gateway's OCI image, built from the repository's Dockerfile without a
daemon or a registry, and cached per machine (`make image`).

No registry is reachable here, so `python:3.11-slim` cannot be pulled: the
base is made from Debian packages instead (mmdebstrap, bookworm's python3 is
3.11 too) and handed to the Dockerfile as BASE_IMAGE. buildah then builds the
Dockerfile itself in a throwaway store, with chroot isolation (its RUN steps
need no runc or crun), and writes an OCI archive. containerd 1.6 names an
imported OCI index entry by its `io.containerd.image.name` annotation (a bare
`org.opencontainers.image.ref.name` would get an `import-<date>` prefix), so
the archive carries both.

Two cache entries, each keyed by what it is made from:
* the base's root filesystem, by the Debian suite, package list and mirrors;
* the image, by the Dockerfile, every file it copies and the base's key.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPOSITORY = "ghcr.io/tenant-gateway/tenant-gateway"
BASE_REPOSITORY = "localhost/tenant-gateway/python-base"
SUITE = "bookworm"
# python3-venv: the Dockerfile makes /opt/gateway a virtual environment (its
# pip comes from ensurepip); ca-certificates: for pip's downloads and the
# gateway's TLS to databases and identity providers.
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
MIRRORS = (
    f"deb http://deb.debian.org/debian {SUITE} main",
    f"deb http://deb.debian.org/debian {SUITE}-updates main",
    f"deb http://deb.debian.org/debian-security {SUITE}-security main",
)
# Documentation and translations are never read in the image.
DPKG_EXCLUDES = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*")
# What the Dockerfile copies (see its COPY lines and .dockerignore).
CONTEXT = ("Dockerfile", ".dockerignore", "pyproject.toml", "README.md", "proxy", "provisioning", "devstack",
           "deploy/kubernetes/admission.yaml")
TOOLS = {"buildah": "buildah", "mmdebstrap": "mmdebstrap"}  # command: Debian package
KEEP_IMAGES = 4  # archives kept in the cache, newest first
# Bump when how the image is assembled here changes, so every cache rebuilds.
_LAYOUT = "1"


class ImageBuildError(RuntimeError):
    """The image could not be built; the message says which step and why."""


# -- keys and names (pure) -------------------------------------------------------


def version(root: Path) -> str:
    return str(tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"])


def image_name(root: Path) -> str:
    return f"{REPOSITORY}:{version(root)}"


def base_key() -> str:
    return _digest([_LAYOUT, SUITE, *BASE_PACKAGES, *MIRRORS, *DPKG_EXCLUDES])[:16]


def context_files(root: Path) -> Iterator[Path]:
    """The files the Dockerfile's COPY lines take, minus what .dockerignore drops
    from them (bytecode caches)."""
    for entry in CONTEXT:
        path = root / entry
        candidates = sorted(path.rglob("*")) if path.is_dir() else [path]
        for candidate in candidates:
            if candidate.is_file() and "__pycache__" not in candidate.parts and candidate.suffix not in {".pyc", ".pyo"}:
                yield candidate


def image_key(root: Path) -> str:
    parts = [_LAYOUT, base_key()]
    for path in context_files(root):
        relative = path.relative_to(root).as_posix()
        executable = "x" if os.access(path, os.X_OK) else "-"
        parts.append(f"{relative} {executable} {hashlib.sha256(path.read_bytes()).hexdigest()}")
    return _digest(parts)[:16]


def _digest(parts: Iterable[str]) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def name_index(index: dict[str, Any], name: str) -> dict[str, Any]:
    """An OCI index whose single manifest entry containerd imports as `name`."""
    manifests = index.get("manifests", [])
    if len(manifests) != 1:
        raise ImageBuildError(f"the built OCI layout holds {len(manifests)} manifests, expected one")
    tag = name.rsplit(":", 1)[1]
    entry = {**manifests[0], "annotations": {**manifests[0].get("annotations", {}),
                                             "io.containerd.image.name": name,
                                             "org.opencontainers.image.ref.name": tag}}
    return {**index, "manifests": [entry]}


# -- reading an archive ------------------------------------------------------------


def _blob(tar: tarfile.TarFile, digest: str) -> bytes:
    algorithm, value = digest.split(":", 1)
    member = tar.extractfile(f"blobs/{algorithm}/{value}")
    if member is None:
        raise ImageBuildError(f"blob {digest} missing from the archive")
    return member.read()


def archive_name(archive: Path) -> str:
    """The name containerd gives the image in `archive`."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        assert member is not None
        return str(json.load(member)["manifests"][0]["annotations"]["io.containerd.image.name"])


def archive_config(archive: Path) -> dict[str, Any]:
    """The image configuration (User, Entrypoint, Env, ...) in `archive`."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        assert member is not None
        manifest = json.loads(_blob(tar, json.load(member)["manifests"][0]["digest"]))
        config: dict[str, Any] = json.loads(_blob(tar, manifest["config"]["digest"]))
        return config


# -- building -------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageCache:
    folder: Path

    def base(self) -> Path:
        return self.folder / f"python-base-{SUITE}-{base_key()}.tar"

    def image(self, root: Path) -> Path:
        return self.folder / f"tenant-gateway-{version(root)}-{image_key(root)}.oci.tar"


def default_cache() -> Path:
    base = os.environ.get("TENANT_GATEWAY_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tenant-gateway")
    return Path(base) / "image"


def ensure_image(root: Path, cache: Path | None = None) -> Path:
    """The image archive for the tree at `root`, from the cache or built now."""
    store = ImageCache(cache or default_cache())
    archive = store.image(root)
    if archive.exists():
        return archive
    store.folder.mkdir(parents=True, exist_ok=True)
    # One build at a time per machine: several worktrees may ask at once.
    with open(store.folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not archive.exists():
            _ensure_tools()
            _build(root, store, _ensure_base(store), archive)
            _keep_newest(store.folder.glob("tenant-gateway-*.oci.tar"), KEEP_IMAGES)
    return archive


def _keep_newest(archives: Iterable[Path], keep: int) -> None:
    """An image per source tree would fill the disk; a few recent ones serve
    worktrees that build in turn."""
    for stale in sorted(archives, key=lambda path: path.stat().st_mtime, reverse=True)[keep:]:
        stale.unlink(missing_ok=True)


def _run(argv: list[str], what: str, **kwargs: Any) -> str:
    try:
        return str(subprocess.run(argv, check=True, capture_output=True, text=True, **kwargs).stdout)
    except FileNotFoundError:
        raise ImageBuildError(f"{what}: {argv[0]} not found") from None
    except subprocess.CalledProcessError as error:
        tail = "\n".join((error.stderr or error.stdout or "no output").strip().splitlines()[-15:])
        raise ImageBuildError(f"{what} failed:\n{tail}") from None


def _ensure_tools() -> None:
    missing = [package for command, package in TOOLS.items() if shutil.which(command) is None]
    if not missing:
        return
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise ImageBuildError(f"building the image needs {', '.join(missing)} (Debian packages); install them as root")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]
    try:
        _run(install, "apt-get install", env=env)
    except ImageBuildError:
        _run(["apt-get", "update", "-q"], "apt-get update", env=env)  # a fresh machine has no package lists
        _run(install, "apt-get install", env=env)


def _ensure_base(store: ImageCache) -> Path:
    """The Debian root filesystem as a tarball (made once per package list)."""
    base = store.base()
    if base.exists():
        return base
    partial = base.with_name(base.name + ".partial")
    argv = ["mmdebstrap", "--variant=minbase", "--mode=root", "--format=tar", f"--include={','.join(BASE_PACKAGES)}",
            *(f"--dpkgopt=path-exclude={pattern}" for pattern in DPKG_EXCLUDES),
            SUITE, str(partial), *MIRRORS]
    try:
        _run(argv, "mmdebstrap (the Debian python3 base)", stdin=subprocess.DEVNULL)
        partial.rename(base)
    finally:
        partial.unlink(missing_ok=True)
    for stale in store.folder.glob(f"python-base-{SUITE}-*.tar"):
        if stale != base:
            stale.unlink()
    return base


class _Buildah:
    """buildah against a throwaway store of its own (containers/image still
    keeps its blob-info cache in /var/lib/containers/cache: not configurable)."""

    def __init__(self, store: Path) -> None:
        self.store = store
        self.flags = ["--root", str(store / "root"), "--runroot", str(store / "run"), "--storage-driver", "overlay"]

    def __call__(self, *args: str, what: str) -> str:
        return _run(["buildah", *self.flags, *args], what).strip()

    def remove_everything(self) -> None:
        subprocess.run(["buildah", *self.flags, "rm", "--all"], check=False, capture_output=True)
        subprocess.run(["buildah", *self.flags, "rmi", "--all", "--force"], check=False, capture_output=True)
        with open("/proc/self/mounts") as mounts:
            inside = [line.split()[1] for line in mounts if line.split()[1].startswith(str(self.store))]
        for mountpoint in sorted(inside, reverse=True):
            subprocess.run(["umount", "-l", mountpoint], check=False, capture_output=True)


def _build(root: Path, store: ImageCache, base: Path, archive: Path) -> None:
    work = Path(tempfile.mkdtemp(prefix="build.", dir=store.folder))
    buildah = _Buildah(work / "store")
    base_image = f"{BASE_REPOSITORY}:{SUITE}-{base_key()}"
    name = image_name(root)
    try:
        container = buildah("from", "scratch", what="buildah from scratch")
        buildah("add", container, str(base), "/", what="adding the Debian root filesystem")
        buildah("config", "--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "--env", "LANG=C.UTF-8", "--cmd", "python3", container, what="configuring the base")
        buildah("commit", "--rm", container, base_image, what="committing the base")
        build = ["bud", "--isolation", "chroot", "--pull=never", "--format", "oci",
                 "--build-arg", f"BASE_IMAGE={base_image}", "--tag", name, "--file", str(root / "Dockerfile")]
        build += _pip_trust()
        buildah(*build, str(root), what="buildah bud (the Dockerfile)")
        layout = work / "layout"
        buildah("push", name, f"oci:{layout}", what="writing the OCI layout")
        index_path = layout / "index.json"
        index_path.write_text(json.dumps(name_index(json.loads(index_path.read_text()), name)))
        _write_archive(layout, archive)
    finally:
        buildah.remove_everything()
        shutil.rmtree(work, ignore_errors=True)


def _pip_trust() -> list[str]:
    """Where this machine reaches PyPI through a TLS-inspecting proxy, pip in
    the build trusts what the host trusts: the host's CA bundle is mounted and
    named in PIP_CERT (a build argument the Dockerfile declares)."""
    bundle = os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt"
    if not Path(bundle).is_file():
        return []
    inside = "/run/host-ca-bundle.crt"
    return ["--volume", f"{bundle}:{inside}:ro", "--build-arg", f"PIP_CERT={inside}"]


def _write_archive(layout: Path, archive: Path) -> None:
    partial = archive.with_name(archive.name + ".partial")
    with tarfile.open(partial, "w") as tar:
        for path in sorted(layout.rglob("*")):
            tar.add(path, arcname=path.relative_to(layout).as_posix(), recursive=False)
    os.chmod(partial, 0o644)
    partial.rename(archive)


def main() -> int:
    parser = argparse.ArgumentParser(description="build the gateway's OCI image (cached); print the archive's path")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args()
    try:
        print(ensure_image(args.root.resolve()))
    except ImageBuildError as error:
        print(f"image: {error}", flush=True, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
