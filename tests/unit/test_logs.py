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


def test_a_bug_is_logged_with_its_frames_never_its_message() -> None:
    """A 500's log line says where the bug is (file, line, function of each
    frame) but not the exception's message, which can quote a secret."""
    import json
    import logging
    import sys

    from proxy.http.logs import JsonFormatter

    def handler_with_a_bug() -> None:
        raise ValueError("Bearer eyJhbGciOiJSUzI1NiJ9.secret")

    try:
        handler_with_a_bug()
    except ValueError:
        record = logging.LogRecord("proxy", logging.ERROR, __file__, 1, "unhandled error", None, sys.exc_info())
    line = json.loads(JsonFormatter().format(record))
    assert line["error"] == "ValueError"
    assert line["traceback"][-1].endswith(" in handler_with_a_bug")
    assert __file__ in line["traceback"][-1]
    assert "secret" not in json.dumps(line) and "eyJ" not in json.dumps(line)
