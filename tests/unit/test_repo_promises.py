"""The repository's promises about itself: the README's first commands, the
manifests' metrics access. Pure (files only)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from devstack.cluster import REPO_ROOT

DEPLOY = REPO_ROOT / "deploy" / "kubernetes"


def test_readme_opens_with_the_commands_ci_runs() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    first_block = re.search(r"```(?:sh|bash)?\n(.*?)```", readme, re.S)
    assert first_block and readme.index("```") < 300
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines() if line.strip()]
    assert commands == ["make run", "make test"]
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert "make test" in ci
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert re.search(r"^run:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    assert Path(REPO_ROOT / "Dockerfile").read_text().count("FROM ") == 2


def test_the_manifests_say_how_prometheus_reaches_the_metrics_and_keep_tenants_out() -> None:
    pod = yaml.safe_load((DEPLOY / "deployment.yaml").read_text())["spec"]["template"]
    container = pod["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["GATEWAY_METRICS_LISTEN"] == f"0.0.0.0:{ports['metrics']}"
    assert env["GATEWAY_LISTEN"] == f"0.0.0.0:{ports['http']}" and ports["http"] != ports["metrics"]
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(ports["metrics"])
    services = {d["metadata"]["name"]: d for d in yaml.safe_load_all((DEPLOY / "service.yaml").read_text())}
    assert [p["targetPort"] for p in services["tenant-gateway"]["spec"]["ports"]] == ["http"]
    assert [p["targetPort"] for p in services["tenant-gateway-metrics"]["spec"]["ports"]] == ["metrics"]
    policy = yaml.safe_load((DEPLOY / "networkpolicy.yaml").read_text())["spec"]
    (metrics_rule,) = [r for r in policy["ingress"] if {"protocol": "TCP", "port": ports["metrics"]} in r["ports"]]
    (source,) = metrics_rule["from"]  # one named namespace, never a tenant's
    selector = source["namespaceSelector"]
    assert set(selector["matchLabels"]) == {"kubernetes.io/metadata.name"} and "podSelector" not in source
    assert {"key": "tenant-gateway.io/workspace-id", "operator": "DoesNotExist"} in selector["matchExpressions"]


def test_what_ends_a_users_streams_is_what_the_user_changed_trigger_fires_on() -> None:
    """README and proxy/passthrough/streams.py say which user changes cut
    streams; the latest `user_changed` trigger decides. (They once promised
    that a password change ends them: nothing changes a password, and the
    trigger does not look at password_hash.)"""
    migrations = sorted((REPO_ROOT / "provisioning" / "db" / "migrations").glob("*.sql"))
    latest = [m.read_text() for m in migrations if "CREATE TRIGGER user_changed" in m.read_text()][-1]
    watched = re.search(r"WHEN \(\((.*?)\)", latest.split("CREATE TRIGGER user_changed", 1)[1], re.S)
    assert watched
    columns = {column.strip().removeprefix("OLD.") for column in watched.group(1).split(",")}
    assert columns == {"status", "is_admin", "email", "oidc_provider"}
    words = {"status": "suspen", "is_admin": "admin", "email": "email", "oidc_provider": "provider"}
    readme = " ".join((REPO_ROOT / "README.md").read_text().split())
    promise = readme.split("**Streams end when their right to exist ends**", 1)[1].split("* **", 1)[0]
    streams = " ".join((REPO_ROOT / "proxy" / "passthrough" / "streams.py").read_text().split('"""')[1].split())
    cuts = streams.split("Its right ends", 1)[1].split("Every one of these", 1)[0]
    for text in (promise, cuts):
        assert "password" not in text, text
        assert all(word in text for word in words.values()), text
