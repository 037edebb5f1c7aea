"""Logging: a client's malformed HTTP is a warning, a bug of ours an error;
the Kubernetes client loads without its generated models."""

from __future__ import annotations

import logging

import pytest
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong

from proxy.logs import MalformedRequestsAreWarnings


@pytest.mark.parametrize("error, level", [
    (BadHttpMessage("Invalid character in Content-Length"), "WARNING"),
    (LineTooLong("header", "16384", "20000"), "WARNING"),
    (RuntimeError("a bug of ours"), "ERROR"),
])
def test_only_the_clients_malformed_http_is_demoted(error: Exception, level: str) -> None:
    record = logging.LogRecord("aiohttp.server", logging.ERROR, __file__, 1, "Error handling request from %s",
                               ("127.0.0.1",), (type(error), error, None))
    assert MalformedRequestsAreWarnings().filter(record) and record.levelname == level


def test_the_kube_client_loads_without_generated_models() -> None:
    """~60 MiB of generated classes stay unloaded (see provisioning.kube.client)."""
    import subprocess
    import sys

    probe = ("import sys, provisioning.kube.client as c; "
             "print(sum(1 for m in sys.modules if m.startswith('kubernetes_asyncio.client.models.')), "
             "c.k8s_client.ApiClient.__name__)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["0", "ApiClient"]
