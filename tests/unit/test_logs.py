"""Logging: the Kubernetes client loads without its generated models. (A
client's malformed HTTP: tests/component/test_answers.py.)"""

from __future__ import annotations


def test_the_kube_client_loads_without_generated_models() -> None:
    """~60 MiB of generated classes stay unloaded (see provisioning.kube.client)."""
    import subprocess
    import sys

    probe = ("import sys, provisioning.kube.client as c; "
             "print(sum(1 for m in sys.modules if m.startswith('kubernetes_asyncio.client.models.')), "
             "c.k8s_client.ApiClient.__name__)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["0", "ApiClient"]
