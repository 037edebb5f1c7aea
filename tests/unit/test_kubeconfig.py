"""Kubeconfig rendering: the contract's shape, values that cannot inject YAML,
and the credential id read from a token without trusting it. Pure."""

from __future__ import annotations

import jwt
import pytest
import yaml

from provisioning.kube.tokens import credential_id
from provisioning.kubeconfig import render_kubeconfig


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


def test_credential_id_is_read_without_trusting_the_token() -> None:
    token = jwt.encode({"jti": "abc"}, "k" * 32, algorithm="HS256")
    assert credential_id(token) == "abc"
    assert credential_id("not-a-jwt") is None
