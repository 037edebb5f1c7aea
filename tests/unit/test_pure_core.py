"""Settings, tiers, manifests, kubeconfig rendering, sessions, client
addresses, rate-limit arithmetic, permission diffing. Pure functions."""

from __future__ import annotations

import datetime
import logging
import uuid
from typing import Any

import jwt
import pytest
import yaml
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong

from provisioning import manifests
from provisioning.errors import Unauthenticated
from provisioning.kube.tokens import credential_id
from provisioning.kubeconfig import render_kubeconfig
from provisioning.permissions import (FORBIDDEN, POLICIES, UNCONFINED, Permission, confinement_probes, evaluate,
                                      policy_gaps, required_permissions)
from provisioning.secrets import Secret
from provisioning.tiers import SHARED_BOUNDS, parse_tiers
from proxy.addresses import client_address, rate_subject
from proxy.logs import MalformedRequestsAreWarnings
from proxy.auth import sessions
from proxy.ratelimit import retry_after
from proxy.settings import RateLimit, SettingsError, load_settings

SECRET = Secret("s" * 64)  # long enough that the HS512 forgery below draws no key-length warning
DB = {"GATEWAY_DATABASE_URL": "postgresql://u:p@db/gw", "GATEWAY_SESSION_SECRET": "x" * 32}


def test_settings_defaults_follow_the_contract() -> None:
    settings = load_settings({})
    assert (settings.listen_host, settings.listen_port) == ("127.0.0.1", 8080)
    assert settings.dev_mode and settings.token_ttl_seconds == 7200
    assert settings.tiers["basic"].hard == {"requests.cpu": "4", "limits.memory": "8Gi", **SHARED_BOUNDS}
    assert settings.tenant_clusterrole == "tenant-admin" and settings.cors_origins == ()
    # Under the deployment's terminationGracePeriodSeconds (30) minus its preStop delay (5).
    assert (settings.shutdown_drain_seconds, settings.shutdown_timeout_seconds) == (5.0, 20.0)
    tuned = load_settings({"GATEWAY_SHUTDOWN_DRAIN_SECONDS": "1.5", "GATEWAY_SHUTDOWN_TIMEOUT_SECONDS": "4"})
    assert (tuned.shutdown_drain_seconds, tuned.shutdown_timeout_seconds) == (1.5, 4.0)
    assert (settings.rate_kubeconfig.limit, settings.rate_kubeconfig.window_seconds) == (30, 60)
    assert settings.max_streams_per_workspace == 100
    limits = load_settings({"GATEWAY_RATE_KUBECONFIG": "2/10", "GATEWAY_MAX_STREAMS_PER_WORKSPACE": "3"})
    assert (limits.rate_kubeconfig.limit, limits.max_streams_per_workspace) == (2, 3)


@pytest.mark.parametrize("env, words", [
    ({"GATEWAY_CORS_ORIGINS": "*"}, "'*' is refused"),
    ({"GATEWAY_CORS_ORIGINS": "https://*.example.com"}, "'*' is refused"),
    ({"GATEWAY_CORS_ORIGINS": "https://ui.example.com/path"}, "nothing after"),
    ({"GATEWAY_TOKEN_TTL_SECONDS": "7201"}, "may not exceed 7200"),
    ({"GATEWAY_TOKEN_TTL_SECONDS": "60"}, "at least 600"),
    ({"GATEWAY_TOKEN_TTL_SECONDS": "2h"}, "whole number"),
    ({"GATEWAY_LISTEN": "nope"}, "host:port"),
    ({"GATEWAY_DATABASE_URL": "mysql://x"}, "postgresql://"),
    ({"GATEWAY_DATABASE_URL": "postgresql://x/y"}, "SESSION_SECRET is required"),
    ({"GATEWAY_SESSION_SECRET": "short"}, "at least 32"),
    ({"GATEWAY_TRUSTED_PROXIES": "10.0.0.1, proxy.local"}, "not an IP"),
    ({"GATEWAY_PUBLIC_SERVER": "http://api"}, "https://"),
    ({"GATEWAY_RATE_INIT": "lots"}, "COUNT/SECONDS"),
    ({"GATEWAY_TLS_CERT_FILE": "/c"}, "go together"),
    ({"GATEWAY_SHUTDOWN_DRAIN_SECONDS": "soon"}, "number of seconds"),
    ({"GATEWAY_SHUTDOWN_DRAIN_SECONDS": "0"}, "more than 0"),
    ({"GATEWAY_SHUTDOWN_TIMEOUT_SECONDS": "5.5"}, "by at least 1 s"),
    ({"GATEWAY_SHUTDOWN_DRAIN_SECONDS": "30", "GATEWAY_SHUTDOWN_TIMEOUT_SECONDS": "30"}, "by at least 1 s"),
    ({"GATEWAY_RATE_KUBECONFIG": "0/60"}, "positive"),
    ({"GATEWAY_MAX_STREAMS_PER_WORKSPACE": "0"}, "at least 1"),
    ({"GATEWAY_MAX_STREAMS_PER_WORKSPACE": "many"}, "whole number"),
])
def test_settings_refused(env: dict[str, str], words: str) -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings(env)
    assert words in str(refused.value)


def test_yaml_config_and_environment_precedence() -> None:
    config = "GATEWAY_LISTEN: 0.0.0.0:9000\nGATEWAY_CORS_ORIGINS: [https://a.example, https://b.example]\n"
    settings = load_settings({"GATEWAY_LISTEN": "127.0.0.1:7000"}, config)
    assert settings.listen_port == 7000
    assert settings.cors_origins == ("https://a.example", "https://b.example")
    with pytest.raises(SettingsError):
        load_settings({}, "GATEWAY_NOPE: 1\n")


def test_trusted_proxies_are_spelled_as_the_gateway_sees_peers() -> None:
    settings = load_settings({**DB, "GATEWAY_TRUSTED_PROXIES": "::ffff:10.0.0.1, 2001:DB8::1"})
    assert settings.trusted_proxies == frozenset({"10.0.0.1", "2001:db8::1"})


def test_metrics_have_a_listener_of_their_own() -> None:
    settings = load_settings({})
    assert (settings.metrics_host, settings.metrics_port) == ("127.0.0.1", 9091)
    moved = load_settings({"GATEWAY_METRICS_LISTEN": "0.0.0.0:9100", "GATEWAY_LISTEN": "0.0.0.0:9091"})
    assert (moved.metrics_host, moved.metrics_port, moved.listen_port) == ("0.0.0.0", 9100, 9091)
    assert load_settings({"GATEWAY_METRICS_LISTEN": "127.0.0.1:0", "GATEWAY_LISTEN": "127.0.0.1:0"}).metrics_port == 0
    for env in ({"GATEWAY_METRICS_LISTEN": "0.0.0.0:8080"}, {"GATEWAY_METRICS_LISTEN": "nowhere"},
                {"GATEWAY_LISTEN": "127.0.0.1:9091"}):
        with pytest.raises(SettingsError):
            load_settings(env)


def test_secrets_do_not_print() -> None:
    settings = load_settings(DB)
    assert "p@db" not in repr(settings) and "x" * 32 not in repr(settings)


def test_tiers_file_forms_and_errors() -> None:
    tiers = parse_tiers("small: {requests.cpu: '1', limits.memory: 2Gi}\n"
                        "big: {hard: {requests.cpu: '16', pods: '100'}, defaultLimits: {cpu: '1', memory: 1Gi}}\n")
    assert tiers["small"].summary() == {"cpu": "1", "memory": "2Gi"}
    assert tiers["big"].default_limits == {"cpu": "1", "memory": "1Gi"}
    for bad in ("[]", "x: {cpu: lots}", "Bad_Name: {cpu: '1'}", "t: {hard: {cpu: '1'}, extra: 1}", "t: {}"):
        with pytest.raises(ValueError):
            parse_tiers(bad)


def test_manifests_carry_the_workspace_label_and_bind_only_in_namespace() -> None:
    tier = parse_tiers("basic: {requests.cpu: '4'}")["basic"]
    steps = manifests.onboarding_steps("tenant-u", "wid", tier, "tenant-admin")
    assert [s.kind for s in steps] == ["Namespace", "ResourceQuota", "LimitRange", "NetworkPolicy",
                                       "ServiceAccount", "RoleBinding"]
    assert all(s.body["metadata"]["labels"][manifests.WORKSPACE_LABEL] == "wid" for s in steps)
    binding = steps[-1].body
    assert binding["kind"] == "RoleBinding" and binding["metadata"]["namespace"] == "tenant-u"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "sa-tenant-admin", "namespace": "tenant-u"}]
    assert steps[-2].body["automountServiceAccountToken"] is False
    assert steps[0].body["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"


def test_network_isolation_admits_the_namespace_itself_and_the_platform_never_another_tenant() -> None:
    spec = manifests.network_isolation("tenant-u", "wid")["spec"]
    assert spec["podSelector"] == {} and spec["policyTypes"] == ["Ingress"]
    (rule,) = spec["ingress"]
    assert rule["from"] == [
        {"podSelector": {}},
        {"namespaceSelector": {"matchExpressions": [
            {"key": manifests.WORKSPACE_LABEL, "operator": "DoesNotExist"}]}},
    ]


def test_kubeconfig_has_the_contract_shape() -> None:
    config = yaml.safe_load(render_kubeconfig(server="https://api:6443", ca_base64="Q0E=", namespace="tenant-x",
                                              token="eyJhbGciOi.x-y_z.sig"))
    assert config == {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "internal-cluster", "cluster": {"server": "https://api:6443",
                                                              "certificate-authority-data": "Q0E="}}],
        "contexts": [{"name": "tenant-context",
                      "context": {"cluster": "internal-cluster", "namespace": "tenant-x", "user": "sa-tenant-admin"}}],
        "current-context": "tenant-context",
        "users": [{"name": "sa-tenant-admin", "user": {"token": "eyJhbGciOi.x-y_z.sig"}}],
    }
    without_ca = yaml.safe_load(render_kubeconfig(server="https://api", ca_base64="", namespace="n", token="t"))
    assert without_ca["clusters"][0]["cluster"] == {"server": "https://api"}


@pytest.mark.parametrize("hostile", [
    'tok", users: [evil], x: "', "tok\\", "tok' # comment", "&anchor *alias !!python/object:os.system",
    "tok\" \\\" }", "- [a]: {b: c}", "%YAML 1.1", "---", "...", "null", "true", "0x1F", "~", "",
])
def test_kubeconfig_values_cannot_inject_yaml(hostile: str) -> None:
    text = render_kubeconfig(server=f"https://api/{hostile}", ca_base64=hostile or "Q0E=", namespace=hostile,
                             token=hostile)
    config = yaml.safe_load(text)
    assert config["users"] == [{"name": "sa-tenant-admin", "user": {"token": hostile}}]
    assert config["contexts"][0]["context"]["namespace"] == hostile
    assert config["clusters"][0]["cluster"]["server"] == f"https://api/{hostile}"
    assert list(config) == ["apiVersion", "kind", "clusters", "contexts", "current-context", "users"]


@pytest.mark.parametrize("value", ["tok\nusers: [evil]", "tok\r", "tok\x7f", "tok\u00e9", "tok\U0001F600", "\x00"])
def test_kubeconfig_refuses_values_no_credential_could_hold(value: str) -> None:
    with pytest.raises(ValueError):
        render_kubeconfig(server="https://api", ca_base64="Q0E=", namespace="n", token=value)


def test_sessions_pin_the_algorithm_and_require_every_claim() -> None:
    now = datetime.datetime.now(datetime.timezone.utc)
    user, session = uuid.uuid4(), uuid.uuid4()
    token, _ = sessions.mint(SECRET, user, session, now, 3600)
    assert sessions.verify(SECRET, token).session_id == session
    claims = {"iss": sessions.ISSUER, "aud": sessions.AUDIENCE, "sub": str(user), "jti": str(session),
              "iat": int(now.timestamp()), "exp": int(now.timestamp()) + 60}
    forgeries = [
        jwt.encode(claims, SECRET.reveal(), algorithm="HS512"),
        jwt.encode(claims, None, algorithm="none"),
        jwt.encode(claims, "another secret of sufficient length!!", algorithm="HS256"),
        jwt.encode({**claims, "aud": "someone-else"}, SECRET.reveal(), algorithm="HS256"),
        jwt.encode({**claims, "iss": "someone-else"}, SECRET.reveal(), algorithm="HS256"),
        jwt.encode({k: v for k, v in claims.items() if k != "exp"}, SECRET.reveal(), algorithm="HS256"),
        jwt.encode({k: v for k, v in claims.items() if k != "jti"}, SECRET.reveal(), algorithm="HS256"),
        jwt.encode({**claims, "exp": int(now.timestamp()) - 60}, SECRET.reveal(), algorithm="HS256"),
        "x" * 5000,
    ]
    for forged in forgeries:
        with pytest.raises(Unauthenticated):
            sessions.verify(SECRET, forged)


def test_csrf_is_bound_to_the_session() -> None:
    session = uuid.uuid4()
    good = sessions.csrf_token(SECRET, session)
    assert sessions.csrf_valid(SECRET, session, good, good)
    assert not sessions.csrf_valid(SECRET, session, good, None)
    assert not sessions.csrf_valid(SECRET, session, "x", "x")
    # aiohttp hands non-UTF-8 header bytes over as surrogates: unequal, never an exception.
    assert not sessions.csrf_valid(SECRET, session, "\udcff", good)
    assert not sessions.csrf_valid(SECRET, uuid.uuid4(), good, good)


@pytest.mark.parametrize("peer, xff, expected", [
    ("203.0.113.9", ["198.51.100.1"], "203.0.113.9"),  # untrusted peer: header ignored
    ("10.0.0.1", ["198.51.100.1"], "198.51.100.1"),
    ("10.0.0.1", ["6.6.6.6, 198.51.100.1"], "198.51.100.1"),  # left part is client-written
    ("10.0.0.1", ["198.51.100.1, 10.0.0.2"], "198.51.100.1"),  # skip trusted hops
    ("10.0.0.1", ["garbage"], "10.0.0.1"),
    ("10.0.0.1", [], "10.0.0.1"),
    ("fe80::1%eth0", [], "fe80::1"),  # the zone is this host's interface, not the client
    ("10.0.0.1", ["[fe80::2%25eth0]:443, fe80::3%lo"], "fe80::3"),
    ("::ffff:10.0.0.1", ["198.51.100.1"], "198.51.100.1"),  # dual-stack: the mapped trusted proxy
    # A proxy that appends its own line: the client's forged first line is not the rightmost.
    ("10.0.0.1", ["6.6.6.6", "198.51.100.1"], "198.51.100.1"),
    ("10.0.0.1", ["6.6.6.6", "198.51.100.1, 10.0.0.2"], "198.51.100.1"),
    ("10.0.0.1", ["198.51.100.1", "10.0.0.2"], "198.51.100.1"),
])
def test_client_address(peer: str, xff: list[str], expected: str) -> None:
    assert client_address(peer, xff, frozenset({"10.0.0.1", "10.0.0.2"})) == expected


@pytest.mark.parametrize("address, subject", [
    (None, "unknown"),
    ("198.51.100.7", "198.51.100.7"),
    ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
    ("2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"),  # the same subscriber's other address
    ("2001:db8:1:3::1", "2001:db8:1:3::/64"),
])
def test_per_address_limits_count_an_ipv6_slash_64_as_one_address(address: str | None, subject: str) -> None:
    assert rate_subject(address) == subject


def test_rate_limit_arithmetic() -> None:
    limit = RateLimit(3, 60)
    assert retry_after(3, 10.0, limit) is None
    assert retry_after(4, 10.2, limit) == 11
    assert retry_after(9, 0.0, limit) == 1


def test_permission_report() -> None:
    required = required_permissions("tenant-admin")
    allowed = {p: True for p in required} | {p: False for p in FORBIDDEN}
    assert evaluate(required, allowed).ok
    assert evaluate(required, allowed, bypasses=(UNCONFINED,)).excessive == (UNCONFINED,)
    allowed[Permission("create", "serviceaccounts", subresource="token")] = False
    allowed[Permission("get", "secrets")] = True
    report = evaluate(required, allowed)
    assert [str(p) for p in report.missing] == ["create serviceaccounts/token cluster-wide"]
    assert [str(p) for p in report.excessive] == ["get secrets cluster-wide"]


def _installed(name: str, selector: Any, **binding: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    match = {"namespaceSelector": selector} if selector is not None else {}
    spec = {"policyName": name, "validationActions": ["Deny"], "matchResources": match, **binding}
    return {"metadata": {"name": name}, "spec": {"failurePolicy": "Fail"}}, {"metadata": {"name": name}, "spec": spec}


def test_policy_gaps_name_every_bypass_of_the_shipped_policy_set() -> None:
    shipped = [_installed(name, selector) for name, selector in POLICIES.items()]
    policies, bindings = [p for p, _ in shipped], [b for _, b in shipped]
    assert policy_gaps(policies, bindings) == ()
    # Missing, failing open, warning only, narrowed, bound elsewhere: each is a bypass.
    assert policy_gaps(policies[1:], bindings) == (
        "ValidatingAdmissionPolicy tenant-gateway-no-long-lived-tokens (deploy/kubernetes/admission.yaml) is not installed",)
    ignore = [{**policies[2], "spec": {"failurePolicy": "Ignore"}}]
    assert "fails open" in policy_gaps(policies[:2] + ignore + policies[3:], bindings)[0]
    name, selector = "tenant-gateway-rolebinding-subjects", POLICIES["tenant-gateway-rolebinding-subjects"]
    others = [b for b in bindings if b["spec"]["policyName"] != name]
    for weakened in (_installed(name, selector, validationActions=["Warn"])[1],
                     _installed(name, {"matchLabels": {"x": "y"}})[1],
                     _installed(name, {**selector, "matchLabels": {"x": "y"}})[1],
                     {**_installed(name, selector)[1], "spec": {**_installed(name, selector)[1]["spec"],
                      "matchResources": {"namespaceSelector": selector, "objectSelector": {"matchLabels": {"a": "b"}}}}},
                     _installed("something-else", selector)[1]):
        assert policy_gaps(policies, others + [weakened]) == (
            f"ValidatingAdmissionPolicy {name} (deploy/kubernetes/admission.yaml) "
            "has no binding that denies in every namespace it guards",), weakened


def test_confinement_probes_aim_at_a_tenant_namespace_when_there_is_one() -> None:
    assert [p.method for p in confinement_probes(None)] == ["POST", "POST"]
    probes = confinement_probes("tenant-x")
    assert [(p.method, p.path) for p in probes[2:]] == [("PATCH", "/api/v1/namespaces/tenant-x")] * 2
    assert probes[1].body["metadata"]["ownerReferences"] and probes[1].body["metadata"]["name"].startswith("tenant-")


def test_credential_id_is_read_without_trusting_the_token() -> None:
    token = jwt.encode({"jti": "abc"}, "k" * 32, algorithm="HS256")
    assert credential_id(token) == "abc"
    assert credential_id("not-a-jwt") is None


def test_suspension_label_patch_sets_and_removes() -> None:
    assert manifests.suspended_label_patch(True) == {"metadata": {"labels": {manifests.SUSPENDED_LABEL: "true"}}}
    # A merge patch removes a key with null.
    assert manifests.suspended_label_patch(False) == {"metadata": {"labels": {manifests.SUSPENDED_LABEL: None}}}


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


def test_deployment_stops_within_its_grace_period() -> None:
    """The gateway's own bound plus the preStop delay fit in terminationGracePeriodSeconds,
    so a rolling restart never ends in the kubelet's SIGKILL."""
    from pathlib import Path

    import yaml

    deployment = yaml.safe_load((Path(__file__).parents[2] / "deploy/kubernetes/deployment.yaml").read_text())
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    settings = load_settings(env)
    pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pre_stop > 0 and settings.shutdown_drain_seconds < settings.shutdown_timeout_seconds
    assert pre_stop + settings.shutdown_timeout_seconds < pod["terminationGracePeriodSeconds"]
