"""Settings: the contract's defaults, every refusal, YAML and environment
precedence, tiers files, the Deployment's shutdown bounds, and each knob
declared once on its field. Pure, but for the loading side's own tests."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import os
import re
import textwrap
from pathlib import Path

import pytest

from provisioning.tiers import SHARED_BOUNDS, parse_tiers
from proxy.settings import VARIABLES, HostPort, Settings, SettingsError, load_settings, settings_from_environment
from proxy.settings.variables import declared, variable_of

DB = {"GATEWAY_DATABASE_URL": "postgresql://u:p@db/gw", "GATEWAY_SESSION_SECRET": "x" * 32}


def test_settings_defaults_follow_the_contract() -> None:
    settings = load_settings({})
    assert settings.listen == HostPort("127.0.0.1", 8080)
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
    ({"GATEWAY_TLS_CERT_FILE": __file__}, "go together"),
    # One line, not urlsplit's or int()'s traceback.
    ({"GATEWAY_PUBLIC_SERVER": "https://[api.example"}, "GATEWAY_PUBLIC_SERVER is not a URL"),
    ({"GATEWAY_PUBLIC_URL": "https://[gw.example"}, "GATEWAY_PUBLIC_URL is not a URL"),
    ({"GATEWAY_CORS_ORIGINS": "https://ok.example, https://[ui.example"}, "GATEWAY_CORS_ORIGINS (entry 2) is not a URL"),
    ({"GATEWAY_LISTEN": "127.0.0.1:\u00b2"}, "host:port"),  # '²' passes isdigit()
    ({"GATEWAY_SHUTDOWN_DRAIN_SECONDS": "soon"}, "number of seconds"),
    ({"GATEWAY_SHUTDOWN_DRAIN_SECONDS": "0"}, "more than 0"),
    ({"GATEWAY_SHUTDOWN_TIMEOUT_SECONDS": "5.5"}, "by at least 1 s"),
    ({"GATEWAY_SHUTDOWN_DRAIN_SECONDS": "30", "GATEWAY_SHUTDOWN_TIMEOUT_SECONDS": "30"}, "by at least 1 s"),
    ({"GATEWAY_RATE_KUBECONFIG": "0/60"}, "positive"),
    # Past the `integer` the database counts hits in: a 500 on every limited route.
    ({"GATEWAY_RATE_LOGIN": "3000000000/60"}, "at most 1000000000 in a window of at most 31536000 seconds"),
    ({"GATEWAY_RATE_INIT": "5/99999999999"}, "at most 31536000 seconds (a year)"),
    # Past what a date holds: every sign-in would fail.
    ({"GATEWAY_SESSION_TTL_SECONDS": "99999999999999"}, "may not exceed 31536000 (a year)"),
    ({"GATEWAY_MAX_STREAMS_PER_WORKSPACE": str(2**63)}, "may not exceed 1000000000"),
    ({"GATEWAY_MAX_STREAMS_PER_WORKSPACE": "0"}, "at least 1"),
    ({"GATEWAY_MAX_STREAMS_PER_WORKSPACE": "many"}, "whole number"),
    ({"GATEWAY_PROXY_TOKEN_TTL_SECONDS": "300"}, "at least 600"),
    ({"GATEWAY_PROXY_TOKEN_REFRESH_SECONDS": "3600"}, "less than GATEWAY_PROXY_TOKEN_TTL_SECONDS"),
    ({"GATEWAY_UPSTREAM_TIMEOUT_SECONDS": "-1"}, "more than 0"),
    ({"GATEWAY_SESSION_CACHE_SECONDS": "86401"}, "at most 86400"),
    ({"GATEWAY_DATABASE_POOL_SIZE": "1"}, "at least 2: a suspension holds one connection"),
    ({"GATEWAY_UPSTREAM_IDLE_CONNECTIONS": "some"}, "whole number"),
    # Kubeconfigs take printable ASCII only: every download would be a 500.
    ({"GATEWAY_PUBLIC_SERVER": "https://k\u00e4se.example"}, "printable ASCII"),
    ({"GATEWAY_PUBLIC_URL": "https://gw.example\n"}, "printable ASCII"),
    ({"GATEWAY_TENANT_CLUSTERROLE": "a/b"}, "name of a Kubernetes object"),
])
def test_settings_refused(env: dict[str, str], words: str) -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings(env)
    assert words in str(refused.value)


@pytest.mark.parametrize("url", [
    "postgresql://gw:Kq9sEcReT/xYz+w@db:5432/gw",  # the rest of the password read as the path
    "postgresql://gw:Kq9sEcReT#xYz+w@db:5432/gw",  # ... as a fragment
    "postgresql://gw:Kq9s?EcReT@db:5432/gw",  # ... as a query
    "postgresql://gw:Kq9s@EcReT@db:5432/gw",  # asyncpg splits at the first '@', urllib at the last
    "postgresql://gw:Kq9sEcReT@db:99999/gw",
    "postgresql://gw:Kq9sEcReT@db/gw?port=EcReT",
    "postgresql://gw:Kq9sEcReT@[db/gw",
])
def test_a_database_url_asyncpg_cannot_read_is_refused_without_quoting_it(url: str) -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings({**DB, "GATEWAY_DATABASE_URL": url})
    message = str(refused.value)
    assert message.startswith("GATEWAY_DATABASE_URL ") and "\n" not in message
    assert "EcReT" not in message and "Kq9s" not in message


def test_a_database_url_asyncpg_reads_is_taken() -> None:
    for url in ("postgresql://gw:Kq9s%2FEcReT%23@db:5432/gw", "postgres://gw@h1:5432,h2,[::1]:5433/gw",
                "postgresql://gw:@/gw?host=/run/postgresql&port=5433", "postgresql:///gw"):
        taken = load_settings({**DB, "GATEWAY_DATABASE_URL": url}).database_url
        assert taken is not None and taken.reveal() == url


def test_yaml_config_and_environment_precedence() -> None:
    config = "GATEWAY_LISTEN: 0.0.0.0:9000\nGATEWAY_CORS_ORIGINS: [https://a.example, https://b.example]\n"
    settings = load_settings({"GATEWAY_LISTEN": "127.0.0.1:7000"}, config)
    assert settings.listen.port == 7000
    assert settings.cors_origins == ("https://a.example", "https://b.example")
    with pytest.raises(SettingsError):
        load_settings({}, "GATEWAY_NOPE: 1\n")
    with pytest.raises(SettingsError) as not_yaml:  # a clear line, not a YAML traceback
        load_settings({}, "GATEWAY_LISTEN: [unclosed\n")
    assert "GATEWAY_CONFIG is not YAML" in str(not_yaml.value)


@pytest.mark.parametrize("config, providers, words", [
    ('GATEWAY_SESSION_SECRET: "Kq9sEcReT-and-more-than-32-characters\n', None,
     "GATEWAY_CONFIG is not YAML (line 2, column 1, in what begins at line 1, column 25)"),
    (None, '- name: corp\n  client_secret: "Kq9sEcReT\n',
     "GATEWAY_OIDC_PROVIDERS is not YAML (line 3, column 1, in what begins at line 2, column 18)"),
    ('oidc_providers:\n- {name: corp, client_secret: "Kq9sEcReT}\n', None, "GATEWAY_CONFIG is not YAML (line "),
])
def test_a_yaml_mistake_is_told_by_where_it_is_never_by_the_line_that_may_hold_a_secret(
        config: str | None, providers: str | None, words: str) -> None:
    with pytest.raises(SettingsError) as not_yaml:
        load_settings({}, config, {"GATEWAY_OIDC_PROVIDERS": providers} if providers else None)
    assert "Kq9sEcReT" not in str(not_yaml.value) and "\n" not in str(not_yaml.value)
    assert str(not_yaml.value).startswith(words)


@pytest.mark.parametrize("env, config", [
    ({"GATEWAY_DATABASE_URL": ""}, None),  # would start dev mode, with a generated session key
    ({"GATEWAY_DATABASE_URL": " "}, None),
    ({"GATEWAY_KUBECONFIG": ""}, None),  # would use ~/.kube/config
    ({"GATEWAY_REGISTRATION": ""}, None),  # would turn registration on
    ({"GATEWAY_CONFIG": ""}, None),  # would read no file
    ({}, "GATEWAY_DATABASE_URL:\n"),  # YAML's null: the file's way of setting nothing
    ({"GATEWAY_DATABASE_URL": ""}, "GATEWAY_DATABASE_URL: postgresql://u:p@db/gw\n"),
])
def test_a_variable_set_but_empty_is_refused_never_taken_for_its_default(env: dict[str, str],
                                                                        config: str | None) -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings(env, config)
    assert "GATEWAY_" in str(refused.value) and "set but empty" in str(refused.value)
    assert load_settings({}).dev_mode  # unset, it is dev mode, as ever


@pytest.mark.parametrize("env", [
    {"GATEWAY_PUBLIC_SERVER": "https://"},  # no host: every kubeconfig would point nowhere
    {"GATEWAY_PUBLIC_SERVER": "https://admin:Kq9sEcReT@api.example:6443"},
    {"GATEWAY_PUBLIC_SERVER": "https://api.example:6443#x"},
    {"GATEWAY_PUBLIC_URL": "https://"},
    {"GATEWAY_PUBLIC_URL": "https://admin:Kq9sEcReT@gw.example"},  # into every redirect URI and sign-in link
    {"GATEWAY_PUBLIC_URL": "https://gw.example#x"},
    {"GATEWAY_PUBLIC_URL": "https://gw.example:99999"},
    {"GATEWAY_CORS_ORIGINS": "https://ui.example, https://admin:Kq9sEcReT@ui.example"},
    {"GATEWAY_CORS_ORIGINS": "https://ui.example#x"},
])
def test_urls_a_browser_or_kubectl_could_not_use_as_written_are_refused(env: dict[str, str]) -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings(env)
    assert "Kq9sEcReT" not in str(refused.value)


def test_origins_are_kept_as_browsers_send_them() -> None:
    """Browsers send an Origin in lowercase and without a default port: one
    kept as written would never match."""
    settings = load_settings({"GATEWAY_CORS_ORIGINS": "HTTPS://UI.Example, https://ui.example:443, http://b.example:8080",
                              "GATEWAY_PUBLIC_URL": "https://GW.example:443/"})
    assert settings.cors_origins == ("https://ui.example", "http://b.example:8080")
    assert settings.gateway_url == "https://gw.example"
    assert load_settings({"GATEWAY_PUBLIC_URL": "http://[::1]:8080"}).gateway_url == "http://[::1]:8080"
    assert load_settings({"GATEWAY_PUBLIC_SERVER": "https://api.example/k8s/clusters/c-1/"}).public_server == \
        "https://api.example/k8s/clusters/c-1"


def test_trusted_proxies_are_spelled_as_the_gateway_sees_peers() -> None:
    settings = load_settings({**DB, "GATEWAY_TRUSTED_PROXIES": "::ffff:10.0.0.1, 2001:DB8::1"})
    assert settings.trusted_proxies == frozenset({"10.0.0.1", "2001:db8::1"})


def test_serve_refuses_to_start_without_its_public_url(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Given a production environment without GATEWAY_PUBLIC_URL, when `serve`
    starts, then it stops at once with one line naming the setting (before the
    cluster or the database is touched); links built from a request's Host would
    be the client's choice. `dev` derives it (tests/integration/test_cli.py runs it)."""
    from proxy.cli import server

    for name in [name for name in os.environ if name.startswith("GATEWAY_")]:
        monkeypatch.delenv(name)
    for name, value in DB.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as stopped:
        server.main(["serve"])
    assert stopped.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("tenant-gateway: GATEWAY_PUBLIC_URL is required by `serve`")
    server.require_public_url(load_settings({**DB, "GATEWAY_PUBLIC_URL": "https://gw.example"}))  # passes


def test_metrics_have_a_listener_of_their_own() -> None:
    settings = load_settings({})
    assert settings.metrics_listen == HostPort("127.0.0.1", 9091)
    moved = load_settings({"GATEWAY_METRICS_LISTEN": "0.0.0.0:9100", "GATEWAY_LISTEN": "0.0.0.0:9091"})
    assert (moved.metrics_listen, moved.listen.port) == (HostPort("0.0.0.0", 9100), 9091)
    assert load_settings({"GATEWAY_METRICS_LISTEN": "127.0.0.1:0",
                          "GATEWAY_LISTEN": "127.0.0.1:0"}).metrics_listen.port == 0
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
    assert tiers["big"].default_limits == {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "1Gi"}
    for bad in ("[]", "x: {cpu: lots}", "Bad_Name: {cpu: '1'}", "t: {hard: {cpu: '1'}, extra: 1}", "t: {}"):
        with pytest.raises(ValueError):
            parse_tiers(bad)


def test_deployment_stops_within_its_grace_period() -> None:
    """The gateway's own bound plus the preStop delay fit in terminationGracePeriodSeconds,
    so a rolling restart never ends in the kubelet's SIGKILL."""
    import yaml

    deployment = yaml.safe_load((Path(__file__).parents[2] / "deploy/kubernetes/deployment.yaml").read_text())
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    settings = load_settings(env)
    pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pre_stop > 0 and settings.shutdown_drain_seconds < settings.shutdown_timeout_seconds
    assert pre_stop + settings.shutdown_timeout_seconds < pod["terminationGracePeriodSeconds"]


def _readme_variables() -> list[str]:
    """The variables named in the first cell of each row of the README's
    configuration table. `A` / `_B` abbreviates A's name with its last part replaced."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    table = readme.split("## Configuration", 1)[1].split("\n\n| variable |", 1)[1].split("\n\n", 1)[0]
    names = []
    for row in table.splitlines()[2:]:
        first = None
        for cell in re.findall(r"`([A-Z_]+)`", row.split("|")[1]):
            if not cell.startswith("GATEWAY_"):
                assert first is not None, row
                cell = first.rsplit("_", 1)[0] + cell
            first = first or cell
            names.append(cell)
    return names


def test_every_variable_is_declared_once_and_in_the_readme_table() -> None:
    declared = [variable.name for variable in VARIABLES]
    assert len(declared) == len(set(declared))
    assert sorted(_readme_variables()) == sorted(declared)


def test_every_field_is_set_by_a_variable_of_its_own() -> None:
    """One field, one variable: none without, none shared (as host and port once were)."""
    names = [variable_of(field).name for field in dataclasses.fields(Settings)]
    assert all(name.startswith("GATEWAY_") for name in names)
    assert len(names) == len(set(names)) == len(VARIABLES)


def test_every_field_says_why_in_its_docstring() -> None:
    """The attribute docstring under each field is the one place for its why."""
    source = ast.parse(textwrap.dedent(inspect.getsource(Settings)))
    body = source.body[0]
    assert isinstance(body, ast.ClassDef)
    why: dict[str, str] = {}
    for statement, following in zip(body.body, body.body[1:]):
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) \
                and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant):
            why[statement.target.id] = str(following.value.value).strip()
    undocumented = [field.name for field in dataclasses.fields(Settings) if not why.get(field.name)]
    assert undocumented == []


def test_a_field_declared_without_its_variable_is_refused() -> None:
    @dataclasses.dataclass(frozen=True)
    class Forgotten:
        knob: int = 1

    with pytest.raises(TypeError, match="knob is declared without setting"):
        list(declared(Forgotten))


def test_load_settings_never_touches_the_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files named, none there, and any look at the disk an error: load_settings still builds Settings."""
    def no_disk(*args: object, **kwargs: object) -> None:
        raise AssertionError("load_settings touched the disk")

    for name in ("stat", "lstat", "is_file", "exists", "read_text", "open"):
        monkeypatch.setattr(Path, name, no_disk)
    monkeypatch.setattr(os, "stat", no_disk)
    env = {**DB, "GATEWAY_CONFIG": "/nonexistent/gateway.yaml", "GATEWAY_PUBLIC_CA_FILE": "/nonexistent/ca.crt",
           "GATEWAY_TLS_CERT_FILE": "/nonexistent/tls.crt", "GATEWAY_TLS_KEY_FILE": "/nonexistent/tls.key",
           "GATEWAY_TIERS_FILE": "/nonexistent/tiers.yaml", "GATEWAY_KUBECONFIG": "/nonexistent/kubeconfig"}
    settings = load_settings(env, "GATEWAY_LOG_LEVEL: debug\n",
                             {"GATEWAY_TIERS_FILE": "small: {requests.cpu: '1'}\n"})
    assert settings.public_ca_file == Path("/nonexistent/ca.crt") and settings.log_level == "DEBUG"
    assert settings.config_file == Path("/nonexistent/gateway.yaml") and list(settings.tiers) == ["small"]


@pytest.mark.parametrize("env", [
    # Read only as serving starts: missing, they are a refusal now, not a traceback then.
    {"GATEWAY_TLS_CERT_FILE": "/nonexistent/tls.crt", "GATEWAY_TLS_KEY_FILE": __file__},
    {"GATEWAY_PUBLIC_CA_FILE": "/nonexistent/ca.crt"},
])
def test_files_read_later_must_be_there_at_start_up(env: dict[str, str]) -> None:
    load_settings(env)  # pure: the disk is not its to check
    with pytest.raises(SettingsError, match="is not a file"):
        settings_from_environment(env)


def test_the_environment_names_the_files_it_reads(tmp_path: Path) -> None:
    (tmp_path / "gateway.yaml").write_text(f"GATEWAY_TIERS_FILE: {tmp_path / 'tiers.yaml'}\n"
                                           f"GATEWAY_PUBLIC_CA_FILE: {__file__}\n")
    (tmp_path / "tiers.yaml").write_text("small: {requests.cpu: '1'}\n")
    settings = settings_from_environment({"GATEWAY_CONFIG": str(tmp_path / "gateway.yaml")})
    assert list(settings.tiers) == ["small"] and settings.public_ca_file == Path(__file__)
    with pytest.raises(SettingsError, match="GATEWAY_TIERS_FILE: cannot read"):
        settings_from_environment({"GATEWAY_TIERS_FILE": str(tmp_path / "missing.yaml")})


def test_timeouts_cache_lifetimes_and_pool_sizes_are_settings() -> None:
    settings = load_settings({})
    assert (settings.upstream_connect_timeout_seconds, settings.upstream_timeout_seconds,
            settings.upstream_keepalive_seconds, settings.upstream_idle_connections) == (5.0, 60.0, 60.0, 512)
    assert (settings.database_timeout_seconds, settings.database_pool_size) == (5.0, 10)
    assert (settings.session_cache_seconds, settings.workspace_cache_seconds, settings.oidc_discovery_seconds) == (
        60.0, 300.0, 3600.0)
    assert (settings.proxy_token_ttl_seconds, settings.proxy_token_refresh_margin_seconds) == (3600, 600)
    tuned = load_settings({"GATEWAY_UPSTREAM_TIMEOUT_SECONDS": "30", "GATEWAY_DATABASE_POOL_SIZE": "4",
                           "GATEWAY_WORKSPACE_CACHE_SECONDS": "0.5", "GATEWAY_PROXY_TOKEN_TTL_SECONDS": "1200",
                           "GATEWAY_PROXY_TOKEN_REFRESH_SECONDS": "300"})
    assert (tuned.upstream_timeout_seconds, tuned.database_pool_size, tuned.workspace_cache_seconds) == (30.0, 4, 0.5)
    assert (tuned.proxy_token_ttl_seconds, tuned.proxy_token_refresh_margin_seconds) == (1200, 300)


def test_the_log_level_is_a_setting() -> None:
    assert load_settings({"GATEWAY_LOG_LEVEL": "warning"}).log_level == "WARNING"
    with pytest.raises(SettingsError):
        load_settings({"GATEWAY_LOG_LEVEL": "loud"})
