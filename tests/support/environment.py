"""What a real deployment would set in the gateway's environment, for the
test gateways (tests/conftest.py's `gateway_env`) and the replicas tests
start as processes."""

from __future__ import annotations

from pathlib import Path

from devstack.nodeparts import LOCAL_IMAGES

SESSION_SECRET = "test-session-secret-" + "x" * 32
"""Every test gateway's; a replica's log must never show it."""


def gateway_environment(kubeconfig: Path, database_url: str) -> dict[str, str]:
    """The environment a real deployment would give the gateway, with rate
    limits loose enough for a test's traffic."""
    return {
        "GATEWAY_DATABASE_URL": database_url,
        "GATEWAY_SESSION_SECRET": SESSION_SECRET,
        "GATEWAY_KUBECONFIG": str(kubeconfig),
        "GATEWAY_RATE_INIT": "1000/60",
        "GATEWAY_RATE_LOGIN": "1000/60",
        "GATEWAY_RATE_REGISTER": "1000/60",
        "GATEWAY_METRICS_LISTEN": "127.0.0.1:0",  # many gateways per process: each its own port
        # The suite's images are loaded onto the node, with no registry to pull them from.
        "GATEWAY_SHARED_IMAGES": LOCAL_IMAGES,
    }
