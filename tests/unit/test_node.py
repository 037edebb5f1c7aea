"""The local node's configuration and images, without starting anything."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tomllib
from pathlib import Path

from devstack.node import LocalNode, cni_config, containerd_config, kubelet_config
from devstack.nodeparts import NodeParts, _write_image


def test_the_kubelet_answers_only_authenticated_and_authorised_callers(tmp_path: Path) -> None:
    config = kubelet_config(tmp_path, address="192.0.2.2", port=10250, healthz_port=10248, ca_file=tmp_path / "ca.crt",
                            serving=(tmp_path / "k.crt", tmp_path / "k.key"), cgroup_root="/tg-1",
                            socket=tmp_path / "containerd.sock")
    assert config["authentication"]["anonymous"] == {"enabled": False}
    assert config["authentication"]["webhook"] == {"enabled": True}
    assert config["authorization"] == {"mode": "Webhook"}
    assert config["readOnlyPort"] == 0 and config["healthzBindAddress"] == "127.0.0.1"
    assert config["cgroupRoot"] == "/tg-1" and config["cgroupDriver"] == "cgroupfs"
    # Nothing of the node's own state outside its directory.
    for key in ("podLogsDir", "volumePluginDir"):
        assert Path(config[key]).is_relative_to(tmp_path)
    assert config["containerRuntimeEndpoint"] == f"unix://{tmp_path / 'containerd.sock'}"


def test_containerd_keeps_its_state_in_the_node_dir_and_needs_no_cap_sys_resource(tmp_path: Path) -> None:
    parts = NodeParts(tmp_path / "parts")
    config = tomllib.loads(containerd_config(tmp_path / "node", parts, tmp_path / "node" / "cni",
                                             tmp_path / "run" / "containerd.sock"))
    assert Path(config["root"]).is_relative_to(tmp_path / "node")
    assert Path(config["state"]).is_relative_to(tmp_path / "node")
    assert config["grpc"]["address"] == str(tmp_path / "run" / "containerd.sock")
    assert "io.containerd.internal.v1.opt" in config["disabled_plugins"]  # would write /opt/containerd
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True
    assert cri["containerd"]["runtimes"]["runc"]["options"]["BinaryName"] == str(parts.runc)
    assert cri["cni"]["bin_dir"] == str(parts.cni_dir)


def test_the_pod_network_is_a_private_bridge_without_masquerading(tmp_path: Path) -> None:
    network = cni_config("tenant-gateway-x", "tgw12345678", "10.244.3.0/24", tmp_path / "leases")
    bridge = network["plugins"][0]
    assert bridge["type"] == "bridge" and bridge["ipMasq"] is False
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.244.3.0/24"}]]
    assert bridge["ipam"]["dataDir"] == str(tmp_path / "leases")  # not /var/lib/cni/networks


def test_each_node_dir_gets_its_own_cgroup_root_and_a_valid_bridge_name(tmp_path: Path) -> None:
    parts = NodeParts(tmp_path)
    nodes = [LocalNode(tmp_path / name, tmp_path / "kubelet", parts, tmp_path / "kc", tmp_path / "ca",
                       (tmp_path / "c", tmp_path / "k"), "192.0.2.2") for name in ("a", "b")]
    assert nodes[0].cgroup_root != nodes[1].cgroup_root and nodes[0].bridge != nodes[1].bridge
    assert all(len(node.bridge) <= 15 for node in nodes)  # IFNAMSIZ


def test_an_image_archive_is_what_docker_save_writes(tmp_path: Path) -> None:
    archive = tmp_path / "image.tar"
    _write_image(archive, "localhost/x:v1", {"bin/tool": b"\x7fELF", "bin/alias": "tool"}, ["/bin/tool"])
    with tarfile.open(archive) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
        [entry] = manifest
        assert entry["RepoTags"] == ["localhost/x:v1"]
        layer = tar.extractfile(entry["Layers"][0]).read()  # type: ignore[union-attr]
        config = json.load(tar.extractfile(entry["Config"]))  # type: ignore[arg-type]
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer).hexdigest()]
    assert config["config"]["Cmd"] == ["/bin/tool"]
    with tarfile.open(fileobj=io.BytesIO(layer)) as files:
        assert files.getmember("bin/alias").issym() and files.getmember("bin/alias").linkname == "tool"
        assert files.getmember("bin/tool").mode == 0o755
        assert files.getmember("tmp").mode == 0o1777
