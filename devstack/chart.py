"""The Helm chart (deploy/helm/tenant-gateway) and the kustomize tree made from it.

deploy/kubernetes is rendered from the chart with its default values, one
file per template, so the two cannot drift: edit the chart, then run
`python -m devstack.chart` (tests/component/test_helm_chart.py fails while
the files differ from a fresh rendering). Two files go the other way:
admission.yaml and clusterroles.yaml are written by hand in deploy/kubernetes
(`tenant-gateway check` and the local cluster read them there) and the chart
includes them verbatim through the links in its files/ folder.

helm is the one built by deploy/local-cluster/build-helm.sh (cached per
machine). `helm template` sorts documents by kind, so a rendered file lists
its objects kind by kind, not in the template's order.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CHART = REPO_ROOT / "deploy" / "helm" / "tenant-gateway"
KUSTOMIZE_TREE = REPO_ROOT / "deploy" / "kubernetes"
HELM_BUILD_SCRIPT = REPO_ROOT / "deploy" / "local-cluster" / "build-helm.sh"

RELEASE = "tenant-gateway"
NAMESPACE = "tenant-gateway-system"
KUBE_VERSION = "1.34.0"
"""What `helm template` assumes of the cluster (the chart needs 1.30+; helm's own default is 1.20)."""
TREE_VALUES = ("namespace.create=true",)
"""The kustomize tree ships the Namespace with its Pod Security labels; a release leaves it to the operator."""
_SOURCE = f"# Source: {CHART.name}/templates/"


def helm_binary() -> Path:
    """The helm client, built from the Go module proxy on first use (cached)."""
    built = subprocess.run(["bash", str(HELM_BUILD_SCRIPT)], check=True, stdout=subprocess.PIPE, text=True)
    return Path(built.stdout.strip().splitlines()[-1])


def helm(helm_path: Path, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run helm with its state in a throwaway folder: nothing is read from or
    written to the user's helm configuration (repositories, plugins, cache)."""
    with tempfile.TemporaryDirectory(prefix="helm-") as home:
        env = {"PATH": os.environ.get("PATH", ""), "HOME": home, "HELM_CACHE_HOME": f"{home}/cache",
               "HELM_CONFIG_HOME": f"{home}/config", "HELM_DATA_HOME": f"{home}/data"}
        return subprocess.run([str(helm_path), *args], capture_output=True, text=True, timeout=timeout, env=env,
                              check=check)


def render(helm_path: Path, *, values_files: Sequence[Path] = (), set_values: Sequence[str] = (),
           namespace: str = NAMESPACE) -> str:
    """`helm template` of the chart: the manifests, each headed by its `# Source:` line."""
    args = ["template", RELEASE, str(CHART), "--namespace", namespace, "--kube-version", KUBE_VERSION]
    for path in values_files:
        args += ["--values", str(path)]
    for assignment in set_values:
        args += ["--set", assignment]
    return helm(helm_path, *args).stdout


def included_files() -> frozenset[str]:
    """deploy/kubernetes files the chart takes verbatim (its files/ links): not generated."""
    return frozenset(path.name for path in (CHART / "files").iterdir())


def kustomize_tree(rendered: str) -> dict[str, str]:
    """deploy/kubernetes's generated files (name -> text) from `helm template`'s
    output: each template's documents in one file of the same name. Pure."""
    documents: dict[str, list[str]] = {}
    for chunk in rendered.split("\n---\n"):
        chunk = chunk.removeprefix("---\n")
        head, _, body = chunk.partition("\n")
        if not head.startswith(_SOURCE):
            raise ValueError(f"a rendered document without its source line: {head!r}")
        name = head.removeprefix(_SOURCE)
        if "/" in name:
            raise ValueError(f"templates are one level deep; found {name}")
        documents.setdefault(name, []).append(body.rstrip("\n") + "\n")
    skip = included_files()
    return {name: _header(name) + "---\n".join(bodies) for name, bodies in documents.items() if name not in skip}


def _header(name: str) -> str:
    return (f"# Generated from deploy/helm/tenant-gateway/templates/{name} with the chart's default values\n"
            "# (python -m devstack.chart): edit the chart, then regenerate.\n")


def expected_tree(helm_path: Path) -> dict[str, str]:
    """What deploy/kubernetes's generated files should hold now."""
    return kustomize_tree(render(helm_path, set_values=TREE_VALUES))


def main() -> int:
    tree = expected_tree(helm_binary())
    for name, text in sorted(tree.items()):
        target = KUSTOMIZE_TREE / name
        if not target.exists() or target.read_text() != text:
            target.write_text(text)
            print(f"wrote {target.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
