"""The shipped API Priority and Fairness objects (deploy/kubernetes/flowcontrol.yaml).

The API server classifies a request into a flow before it authorizes it, so
a flow distinguisher must be something the request cannot name for itself.
A request's namespace is whatever its path says: a tenant sending requests
that name another tenant's namespace would queue them in that tenant's flow
(each refused only once dispatched) and could fill its queues until its own
requests are turned away, or name a new namespace per request for as many
flows as it likes. The authenticated user it cannot forge."""

from __future__ import annotations

from pathlib import Path

import yaml

from provisioning.kube.client import NON_RESOURCE_URLS

_FLOWCONTROL = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "flowcontrol.yaml"


def test_every_shipped_flow_schema_tells_flows_apart_by_who_asks_not_by_what_they_name() -> None:
    schemas = [d for d in yaml.safe_load_all(_FLOWCONTROL.read_text()) if d and d["kind"] == "FlowSchema"]
    tenants = [s for s in schemas if s["metadata"]["name"].startswith("tenant-gateway-tenant")]
    assert len(tenants) == 2, [s["metadata"]["name"] for s in schemas]
    for schema in schemas:
        assert schema["spec"]["distinguisherMethod"]["type"] == "ByUser", schema["metadata"]["name"]


def test_the_gateways_own_schema_takes_every_non_resource_url_its_credential_calls() -> None:
    """Else its /version calls (/readyz, reconcile) match the tenants'
    schema, which takes every ServiceAccount's, and wait behind a flood."""
    schemas = {d["metadata"]["name"]: d for d in yaml.safe_load_all(_FLOWCONTROL.read_text())
               if d and d["kind"] == "FlowSchema"}
    gateways = schemas["tenant-gateway-itself"]["spec"]
    tenants = schemas["tenant-gateway-tenants"]["spec"]
    assert gateways["matchingPrecedence"] < tenants["matchingPrecedence"]
    taken = {url for rule in gateways["rules"] for non_resource in rule.get("nonResourceRules", [])
             if {"get", "*"} & set(non_resource["verbs"]) for url in non_resource["nonResourceURLs"]}
    assert NON_RESOURCE_URLS and NON_RESOURCE_URLS <= taken
