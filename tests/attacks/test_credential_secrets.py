"""The gateway may create and delete Secrets, to bind issued tokens to them
(provisioning.credentials): attacked here with its real restricted
credential, as a thief holding it would, and with tenants' own. Neither
verb may read a Secret (an orphaning or foreground delete answers with the
whole object, a dry run deletes nothing), mint a token (a
service-account-token Secret is filled with one) or touch a tenant's own
Secrets; no tenant may touch the gateway's."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from devstack.cluster import LocalCluster
from provisioning import manifests
from tests.support import kubeclients
from tests.support.tenants import onboard, refusal

pytestmark = pytest.mark.cluster

_DELETES = ({"propagation_policy": "Orphan"}, {"propagation_policy": "Foreground"}, {"dry_run": "All"},
            {"propagation_policy": "Orphan", "dry_run": "All"}, {"orphan_dependents": True})


def _tenant_secret(core: client.CoreV1Api, namespace: str) -> str:
    name = f"tenant-own-{uuid.uuid4().hex[:8]}"
    core.create_namespaced_secret(namespace, {"metadata": {"name": name},
                                              "data": {"password": base64.b64encode(b"hunter2").decode()}})
    return name


def _credential_secret(gateway: client.CoreV1Api, namespace: str) -> str:
    name = manifests.credential_secret_name(f"attack-{uuid.uuid4().hex[:8]}")
    gateway.create_namespaced_secret(namespace, {"metadata": {"name": name},
                                                 "type": manifests.CREDENTIAL_SECRET_TYPE})
    return name


async def test_the_gateways_credential_cannot_read_mint_or_touch_a_tenants_secret(
        cluster: LocalCluster, gateway: Any, tmp_path: Path) -> None:
    tenant = await onboard(gateway, tmp_path)
    thief = client.CoreV1Api(kubeclients.from_kubeconfig(cluster.gateway_kubeconfig))
    own = _tenant_secret(tenant.core, tenant.namespace)
    for options in _DELETES:
        status, message = refusal(lambda: thief.delete_namespaced_secret(own, tenant.namespace, **options))
        assert status == 403, (options, message)
        assert "hunter2" not in message and base64.b64encode(b"hunter2").decode() not in message
    assert refusal(lambda: thief.read_namespaced_secret(own, tenant.namespace))[0] == 403
    assert refusal(lambda: thief.list_namespaced_secret(tenant.namespace))[0] == 403
    assert refusal(lambda: thief.patch_namespaced_secret(own, tenant.namespace, {"type": "x"}))[0] == 403
    assert refusal(lambda: thief.delete_collection_namespaced_secret(tenant.namespace))[0] == 403
    assert tenant.core.read_namespaced_secret(own, tenant.namespace).data["password"]  # still there
    token_secret = {"metadata": {"name": "stolen", "annotations": {"kubernetes.io/service-account.name": "default"}},
                    "type": "kubernetes.io/service-account-token"}
    for dry in ({}, {"dry_run": "All"}):
        assert refusal(lambda: thief.create_namespaced_secret(tenant.namespace, token_secret, **dry))[0] == 403
    with_data = {"metadata": {"name": "smuggled"}, "type": manifests.CREDENTIAL_SECRET_TYPE,
                 "string_data": {"a": "b"}}
    assert refusal(lambda: thief.create_namespaced_secret(tenant.namespace, with_data))[0] == 403
    # Its own kind it may delete, plainly, and only plainly.
    ours = _credential_secret(thief, tenant.namespace)
    for options in _DELETES:
        assert refusal(lambda: thief.delete_namespaced_secret(ours, tenant.namespace, **options))[0] == 403, options
    assert refusal(lambda: thief.delete_namespaced_secret(ours, tenant.namespace))[0] == 200
    # Outside tenant namespaces, nothing at all.
    assert refusal(lambda: thief.create_namespaced_secret(
        "kube-system", {"metadata": {"name": "x"}, "type": manifests.CREDENTIAL_SECRET_TYPE}))[0] == 403


async def test_no_member_may_touch_the_secrets_issued_kubeconfigs_are_bound_to(
        cluster: LocalCluster, gateway: Any, tmp_path: Path) -> None:
    tenant = await onboard(gateway, tmp_path)
    listed = await (await tenant.session.call("GET", "/api/v1/credentials")).json()
    name = manifests.credential_secret_name(listed[0]["id"])
    core = tenant.core
    assert refusal(lambda: core.delete_namespaced_secret(name, tenant.namespace))[0] == 403
    assert refusal(lambda: core.patch_namespaced_secret(name, tenant.namespace, {"metadata": {"labels": {"a": "b"}}}))[0] == 403
    assert refusal(lambda: core.create_namespaced_secret(
        tenant.namespace, {"metadata": {"name": manifests.credential_secret_name(uuid.uuid4())},
                           "type": manifests.CREDENTIAL_SECRET_TYPE}))[0] == 403
    # deletecollection goes through admission one Secret at a time.
    status, _ = refusal(lambda: core.delete_collection_namespaced_secret(tenant.namespace))
    assert status == 403
    assert core.read_namespaced_secret(name, tenant.namespace).type == manifests.CREDENTIAL_SECRET_TYPE
