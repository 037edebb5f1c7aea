"""Several clusters, the pure parts: the registry's settings (a list, or
today's single-cluster variables as `default`), tiers' placement keys,
placement itself, the fleet's kubeconfig, and how the fleet names a
cluster that is down (with a FAKE client that is). Pure, but for one
file check on tmp_path."""

from __future__ import annotations

from pathlib import Path
from typing import Any, AsyncIterator

import pytest
import yaml

from provisioning.clusters import DEFAULT_CLUSTER, ClusterSettings
from provisioning.errors import BadRequest, ClusterUnavailable, Conflict, Forbidden
from provisioning.fleet import Fleet, naming
from provisioning.kube.client import ClusterEndpoint
from provisioning.kubeconfig import FleetContext, exec_credential, render_fleet_kubeconfig, token_credential
from provisioning.placement import eligible_clusters, place
from provisioning.tiers import Tier, parse_tiers
from proxy.settings import SettingsError, load_settings

TWO = """
- name: eu-1
  kubeconfig: /etc/gw/eu-1
  public_server: https://eu-1.example.com:6443/
  public_ca_file: /etc/gw/eu-1-ca.crt
  labels: {region: eu, environment: prod}
- name: us-1
  labels: {region: us}
  kind: dedicated
  tls_server_name: us-1.example.com
"""


def test_without_a_list_todays_settings_are_one_shared_cluster_named_default() -> None:
    settings = load_settings({"GATEWAY_KUBECONFIG": "/k", "GATEWAY_PUBLIC_SERVER": "https://api.example:6443"})
    assert settings.clusters == (ClusterSettings(DEFAULT_CLUSTER, kubeconfig=Path("/k"),
                                                 public_server="https://api.example:6443"),)
    assert load_settings({}).clusters == (ClusterSettings("default"),)


def test_a_cluster_list_from_its_file_or_the_config_file() -> None:
    from_file = load_settings({"GATEWAY_CLUSTERS": "/c.yaml"}, file_texts={"GATEWAY_CLUSTERS": TWO})
    eu, us = from_file.clusters
    assert eu == ClusterSettings("eu-1", kubeconfig=Path("/etc/gw/eu-1"), public_server="https://eu-1.example.com:6443",
                                 public_ca_file=Path("/etc/gw/eu-1-ca.crt"),
                                 labels={"region": "eu", "environment": "prod"})
    assert (us.kind, us.dedicated, us.tls_server_name, us.kubeconfig) == ("dedicated", True, "us-1.example.com", None)
    from_config = load_settings({}, config_text=f"clusters:{TWO.replace(chr(10), chr(10) + '  ')}")
    assert from_config.clusters == from_file.clusters


@pytest.mark.parametrize("text, words", [
    ("[]", "non-empty YAML list"),
    ("{name: a}", "non-empty YAML list"),
    ("- name: Eu_1", "lowercase DNS label"),
    ("- {}", "lowercase DNS label"),
    ("- name: a\n- name: a", "'a' is listed twice"),
    ("- {name: a, kind: private}", "kind must be shared or dedicated"),
    ("- {name: a, server: x}", "unknown keys server"),
    ("- {name: a, public_server: 'http://a'}", "https:// URL"),
    ("- {name: a, labels: [x]}", "mapping of label to value"),
    ("- {name: a, labels: {'bad key!': x}}", "not a label name"),
    ("- {name: a, labels: {region: 'two words'}}", "not a label value"),
    ("- {name: a, kubeconfig: ''}", "kubeconfig must be a non-empty string"),
    ("- name: [", "YAML"),
])
def test_a_cluster_list_the_gateway_must_not_start_with(text: str, words: str) -> None:
    with pytest.raises(SettingsError, match="GATEWAY_CLUSTERS") as refused:
        load_settings({"GATEWAY_CLUSTERS": "/c.yaml"}, file_texts={"GATEWAY_CLUSTERS": text})
    assert words in str(refused.value)


@pytest.mark.parametrize("variable", ["GATEWAY_KUBECONFIG", "GATEWAY_PUBLIC_SERVER", "GATEWAY_PUBLIC_CA_FILE"])
def test_a_list_and_the_single_cluster_variables_together_are_refused_naming_both(variable: str) -> None:
    env = {"GATEWAY_CLUSTERS": "/c.yaml", variable: "https://x.example" if "SERVER" in variable else "/x"}
    with pytest.raises(SettingsError) as refused:
        load_settings(env, file_texts={"GATEWAY_CLUSTERS": TWO})
    assert "GATEWAY_CLUSTERS" in str(refused.value) and variable in str(refused.value)


def test_tiers_say_where_their_workspaces_go() -> None:
    tiers = parse_tiers("""
basic: {requests.cpu: "1"}
eu: {hard: {requests.cpu: "2"}, cluster_selector: {region: eu}}
hard: {hard: {requests.cpu: "8"}, dedicated: true, clusters: [us-1]}
""")
    assert (tiers["basic"].clusters, tiers["basic"].cluster_selector, tiers["basic"].dedicated) == ((), {}, False)
    assert tiers["eu"].cluster_selector == {"region": "eu"}
    assert (tiers["hard"].clusters, tiers["hard"].dedicated) == (("us-1",), True)
    for body, words in (("{hard: {cpu: '1'}, clusters: us-1}", "list of cluster names"),
                        ("{hard: {cpu: '1'}, dedicated: 'yes'}", "true or false"),
                        ("{hard: {cpu: '1'}, cluster_selector: {region: 'a b'}}", "not a label value")):
        with pytest.raises(ValueError, match=words):
            parse_tiers(f"t: {body}")


@pytest.mark.parametrize("tiers, words", [
    ("t: {hard: {cpu: '1'}, clusters: [nowhere]}", "names clusters that are not configured: nowhere"),
    ("t: {hard: {cpu: '1'}, dedicated: true, clusters: [eu-1]}", "allows no configured dedicated cluster"),
    ("t: {hard: {cpu: '1'}, cluster_selector: {region: mars}}", "allows no configured shared cluster"),
])
def test_a_tier_that_could_place_nothing_is_a_start_up_error(tiers: str, words: str) -> None:
    with pytest.raises(SettingsError, match=words):
        load_settings({"GATEWAY_CLUSTERS": "/c.yaml", "GATEWAY_TIERS_FILE": "/t.yaml"},
                      file_texts={"GATEWAY_CLUSTERS": TWO, "GATEWAY_TIERS_FILE": tiers})


FLEET = (ClusterSettings("a", labels={"region": "eu"}), ClusterSettings("b", labels={"region": "us"}),
         ClusterSettings("c", labels={"region": "eu"}),
         ClusterSettings("d1", kind="dedicated", labels={"region": "eu"}), ClusterSettings("d2", kind="dedicated"))
SHARED = Tier("basic", {})
DEDICATED = Tier("hard", {}, dedicated=True)


def test_a_tier_allows_clusters_of_its_kind_narrowed_by_names_and_labels() -> None:
    assert [c.name for c in eligible_clusters(SHARED, FLEET)] == ["a", "b", "c"]
    assert [c.name for c in eligible_clusters(DEDICATED, FLEET)] == ["d1", "d2"]
    assert [c.name for c in eligible_clusters(Tier("t", {}, clusters=("c", "b", "d1")), FLEET)] == ["b", "c"]
    assert [c.name for c in eligible_clusters(Tier("t", {}, cluster_selector={"region": "eu"}), FLEET)] == ["a", "c"]


def test_a_shared_tier_takes_the_allowed_cluster_with_the_fewest_workspaces() -> None:
    assert place(SHARED, FLEET, workspaces={}).name == "a"  # ties: by name, so replicas agree
    assert place(SHARED, FLEET, workspaces={"a": 3, "b": 1, "c": 2}).name == "b"
    assert place(SHARED, FLEET, workspaces={"a": 3, "b": 1, "c": 2}, labels={"region": "eu"}).name == "c"
    assert place(SHARED, FLEET, workspaces={"a": 0, "b": 9}, requested="b").name == "b"


def test_a_cluster_asked_for_must_exist_and_be_allowed() -> None:
    with pytest.raises(BadRequest, match="unknown cluster 'zz'; configured: a, b, c, d1, d2") as unknown:
        place(SHARED, FLEET, workspaces={}, requested="zz")
    assert unknown.value.code == "unknown_cluster"
    with pytest.raises(Forbidden, match="tier basic may not use cluster 'd1'; it may use: a, b, c") as refused:
        place(SHARED, FLEET, workspaces={}, requested="d1")
    assert refused.value.code == "cluster_not_allowed"
    with pytest.raises(BadRequest, match="has the labels region=mars") as nothing:
        place(SHARED, FLEET, workspaces={}, labels={"region": "mars"})
    assert nothing.value.code == "no_matching_cluster"


def test_a_dedicated_tier_takes_a_free_dedicated_cluster_or_409() -> None:
    assert place(DEDICATED, FLEET, workspaces={}).name == "d1"
    assert place(DEDICATED, FLEET, workspaces={"d1": 1}, occupied={"d1"}).name == "d2"
    assert place(DEDICATED, FLEET, workspaces={}, requested="d2").name == "d2"
    with pytest.raises(Conflict, match="no free dedicated cluster for tier hard: d1, d2 are each held") as full:
        place(DEDICATED, FLEET, workspaces={"d1": 1, "d2": 1}, occupied={"d1", "d2"})
    assert full.value.code == "no_free_cluster" and full.value.status == 409
    with pytest.raises(Conflict, match="d2 is each held"):
        place(DEDICATED, FLEET, workspaces={}, occupied={"d2"}, requested="d2")


def test_the_fleet_kubeconfig_has_one_context_per_workspace_with_its_own_cluster_and_user() -> None:
    text = render_fleet_kubeconfig([
        FleetContext("us-1", "tenant-b", "https://us.example:6443", "VVM=", token_credential("t.o.k"),
                     tls_server_name="us-1.example.com"),
        FleetContext("eu-1", "tenant-b", "https://eu.example:6443", "RVU=", exec_credential("https://gw", "w-1")),
        FleetContext("eu-1", "tenant-a", "https://eu.example:6443", "RVU=", token_credential("x.y.z")),
    ])
    config = yaml.safe_load(text)
    names = ["eu-1/tenant-a", "eu-1/tenant-b", "us-1/tenant-b"]  # stable, and the same namespace never collides
    assert [c["name"] for c in config["contexts"]] == names
    assert [c["name"] for c in config["clusters"]] == names and [u["name"] for u in config["users"]] == names
    assert config["current-context"] == "eu-1/tenant-a"
    assert config["contexts"][2]["context"] == {"cluster": "us-1/tenant-b", "namespace": "tenant-b",
                                                "user": "us-1/tenant-b"}
    assert config["clusters"][2]["cluster"] == {"server": "https://us.example:6443",
                                                "certificate-authority-data": "VVM=",
                                                "tls-server-name": "us-1.example.com"}
    assert config["users"][0]["user"] == {"token": "x.y.z"}
    assert config["users"][1]["user"]["exec"]["args"] == ["credential", "--gateway", "https://gw", "--workspace", "w-1"]
    empty = yaml.safe_load(render_fleet_kubeconfig([]))
    assert (empty["contexts"], empty["clusters"], empty["users"]) == ([], [], [])


@pytest.mark.parametrize("hostile", ['tenant"\nusers: []', "tenant\u2028x"])
def test_fleet_kubeconfig_values_cannot_add_structure(hostile: str) -> None:
    with pytest.raises(ValueError):
        render_fleet_kubeconfig([FleetContext("a", hostile, "https://a", "", token_credential("t"))])


class _Down:
    """A FAKE client of a cluster that is down: every call is ClusterUnavailable."""

    endpoint = ClusterEndpoint("https://down.example:6443", None)
    ca_base64 = "RE9XTg=="

    async def get(self, path: str) -> dict[str, Any]:
        raise ClusterUnavailable()

    async def reachable(self) -> bool:
        return False

    async def list_pages(self, path: str, **_: Any) -> AsyncIterator[list[dict[str, Any]]]:
        raise ClusterUnavailable("listing failed")
        yield []


async def test_with_several_clusters_a_cluster_that_is_down_is_named_in_its_503() -> None:
    down = _Down()
    fleet = await Fleet.connect((ClusterSettings("eu-1", public_server="https://eu.example"),
                                 ClusterSettings("us-1")), {"eu-1": down, "us-1": down})  # type: ignore[dict-item]
    eu = fleet.named("eu-1")
    assert (eu.public_server, eu.public_ca_base64) == ("https://eu.example", "RE9XTg==")
    assert fleet.named("us-1").public_server == "https://down.example:6443"  # the credential's, when none is given
    with pytest.raises(ClusterUnavailable, match="^cluster eu-1: the Kubernetes API server is unreachable") as named:
        await eu.kube.get("/version")
    assert named.value.code == "cluster_unavailable" and named.value.status == 503
    with pytest.raises(ClusterUnavailable, match="^cluster us-1: listing failed"):
        async for _page in fleet.named("us-1").kube.list_pages("/api/v1/namespaces"):
            pass
    assert naming("eu-1", named.value) is named.value  # named once
    with pytest.raises(ClusterUnavailable, match="cluster gone is not configured on this gateway"):
        fleet.named("gone")


async def test_one_cluster_keeps_todays_messages() -> None:
    down: Any = _Down()
    fleet = await Fleet.connect((ClusterSettings(DEFAULT_CLUSTER),), {DEFAULT_CLUSTER: down})
    with pytest.raises(ClusterUnavailable) as plain:
        await fleet.named(DEFAULT_CLUSTER).kube.get("/version")
    assert plain.value.message == "the Kubernetes API server is unreachable; retry later"


def test_the_files_a_cluster_names_must_be_there_at_start_up(tmp_path: Path) -> None:
    from proxy.settings import check_files

    kubeconfig = tmp_path / "eu-1"
    kubeconfig.write_text("apiVersion: v1\n")
    listed = load_settings({"GATEWAY_CLUSTERS": "/c"}, file_texts={"GATEWAY_CLUSTERS": f"""
- {{name: eu-1, kubeconfig: {kubeconfig}, public_ca_file: {tmp_path / "missing.crt"}}}
"""})
    with pytest.raises(SettingsError, match="cluster 'eu-1': public_ca_file .*missing.crt is not a file"):
        check_files(listed)
