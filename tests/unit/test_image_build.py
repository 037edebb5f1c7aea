"""devstack/image.py's pure parts: what the cache key covers, how the archive
names the image for containerd, and reading an archive's configuration."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile
from pathlib import Path

import pytest

from devstack import image

ROOT = Path(__file__).resolve().parents[2]


def source_tree(folder: Path) -> Path:
    for name, text in {"Dockerfile": "FROM x\n", ".dockerignore": "tests\n", "README.md": "readme\n",
                       "pyproject.toml": '[project]\nname = "tenant-gateway"\nversion = "9.8.7"\n',
                       "proxy/app.py": "app = 1\n", "provisioning/db/migrations/001.sql": "select 1;\n",
                       "devstack/cluster.py": "cluster = 1\n", "deploy/kubernetes/admission.yaml": "a: 1\n",
                       "deploy/kubernetes/deployment.yaml": "d: 1\n", "tests/unit/test_x.py": "x = 1\n"}.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder


def test_the_key_covers_exactly_what_the_dockerfile_copies(tmp_path: Path) -> None:
    root = source_tree(tmp_path)
    before = image.image_key(root)
    (root / "tests/unit/test_x.py").write_text("x = 2\n")
    (root / "deploy/kubernetes/deployment.yaml").write_text("d: 2\n")
    (root / "proxy/__pycache__").mkdir()
    (root / "proxy/__pycache__/app.cpython-311.pyc").write_bytes(b"\0")
    assert image.image_key(root) == before
    for changed in ("proxy/app.py", "provisioning/db/migrations/001.sql", "deploy/kubernetes/admission.yaml",
                    "Dockerfile", "pyproject.toml"):
        original = (root / changed).read_text()
        (root / changed).write_text(original + "#\n")
        assert image.image_key(root) != before, changed
        (root / changed).write_text(original)
    assert image.image_key(root) == before


def test_the_key_covers_executable_bits(tmp_path: Path) -> None:
    root = source_tree(tmp_path)
    before = image.image_key(root)
    (root / "proxy/app.py").chmod(0o755)
    assert image.image_key(root) != before


def test_the_context_matches_the_dockerfiles_copy_lines() -> None:
    copied = re.findall(r"^COPY (?!--from)(.+) \S+$", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    sources = {source for line in copied for source in line.split()}
    assert sources | {"Dockerfile", ".dockerignore"} == set(image.CONTEXT)


def test_the_image_is_named_after_the_project_version(tmp_path: Path) -> None:
    assert image.image_name(source_tree(tmp_path)) == "ghcr.io/tenant-gateway/tenant-gateway:9.8.7"


def test_the_index_names_the_image_for_containerd() -> None:
    index = {"schemaVersion": 2, "manifests": [{"digest": "sha256:ab", "size": 3,
                                                "annotations": {"org.opencontainers.image.ref.name": "x"}}]}
    named = image.name_index(index, "ghcr.io/tenant-gateway/tenant-gateway:1.2.3")
    annotations = named["manifests"][0]["annotations"]
    assert annotations["io.containerd.image.name"] == "ghcr.io/tenant-gateway/tenant-gateway:1.2.3"
    assert annotations["org.opencontainers.image.ref.name"] == "1.2.3"  # a bare tag, as the OCI spec has it
    assert named["manifests"][0]["digest"] == "sha256:ab"


def test_an_index_of_several_manifests_is_refused() -> None:
    with pytest.raises(image.ImageBuildError, match="2 manifests"):
        image.name_index({"manifests": [{}, {}]}, "a/b:1")


def test_the_base_key_follows_the_package_list(monkeypatch: pytest.MonkeyPatch) -> None:
    before = image.base_key()
    monkeypatch.setattr(image, "BASE_PACKAGES", (*image.BASE_PACKAGES, "curl"))
    assert image.base_key() != before


def write_layout_archive(path: Path, config: dict[str, object], name: str) -> None:
    blobs: dict[str, bytes] = {}

    def blob(content: bytes) -> str:
        digest = hashlib.sha256(content).hexdigest()
        blobs[f"blobs/sha256/{digest}"] = content
        return f"sha256:{digest}"

    config_digest = blob(json.dumps(config).encode())
    manifest_digest = blob(json.dumps({"schemaVersion": 2, "config": {"digest": config_digest}, "layers": []}).encode())
    index = image.name_index({"schemaVersion": 2, "manifests": [{"digest": manifest_digest}]}, name)
    with tarfile.open(path, "w") as tar:
        for member, content in {**blobs, "index.json": json.dumps(index).encode()}.items():
            info = tarfile.TarInfo(member)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))


def test_an_archive_is_read_back(tmp_path: Path) -> None:
    archive = tmp_path / "image.oci.tar"
    write_layout_archive(archive, {"config": {"User": "10001", "Entrypoint": ["tenant-gateway"]}}, "a/b:1")
    assert image.archive_name(archive) == "a/b:1"
    assert image.archive_config(archive)["config"] == {"User": "10001", "Entrypoint": ["tenant-gateway"]}


def test_only_the_newest_archives_stay(tmp_path: Path) -> None:
    archives = []
    for age in range(6):
        path = tmp_path / f"tenant-gateway-1-{age}.oci.tar"
        path.write_bytes(b"")
        os.utime(path, (1000 - age, 1000 - age))
        archives.append(path)
    image._keep_newest(archives, 4)
    assert [path.exists() for path in archives] == [True, True, True, True, False, False]
