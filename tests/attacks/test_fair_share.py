"""Fair share at the API server (deploy/kubernetes/flowcontrol.yaml), as the
API server itself reports it: every answer names the priority level that
admitted the request (`X-Kubernetes-PF-PriorityLevel-UID`). A tenant's
LISTs, made with its issued kubeconfig, go to the tenants' LIST level; its
other requests to the tenants' level; another tenant's to the same levels
(each account its own flow there); the gateway's own to workload-high,
its /version calls included, ahead of any tenant's flood. How well the
levels hold under a flood is the benchmark's fairness row
(bench/fairness.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from devstack.cluster import LocalCluster
from tests.support import kubeclients
from tests.support.tenants import onboard

pytestmark = pytest.mark.cluster

_LEVEL = "X-Kubernetes-PF-PriorityLevel-UID"


def level_of(answer: tuple[Any, int, Any], status: int = 200) -> str:
    """The priority level that admitted a request the API server granted."""
    assert answer[1] == status
    return str(answer[2][_LEVEL])


async def test_a_tenants_lists_and_other_requests_and_the_gateways_land_in_their_levels(
        cluster: LocalCluster, gateway: Any, tmp_path: Path) -> None:
    flowcontrol = client.FlowcontrolApiserverV1Api(kubeclients.from_kubeconfig(cluster.admin_kubeconfig))
    levels = {name: flowcontrol.read_priority_level_configuration(name).metadata.uid
              for name in ("tenant-gateway-tenant-lists", "tenant-gateway-tenants", "workload-high")}
    assert len(set(levels.values())) == 3
    seen = {}
    for tenant in (await onboard(gateway, tmp_path), await onboard(gateway, tmp_path)):
        seen[tenant.namespace] = {
            "list": level_of(tenant.core.list_namespaced_config_map_with_http_info(tenant.namespace)),
            "get": level_of(tenant.core.read_namespaced_config_map_with_http_info("kube-root-ca.crt",
                                                                                  tenant.namespace)),
            "write": level_of(tenant.core.create_namespaced_config_map_with_http_info(
                tenant.namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="fair"))), 201),
        }
    for namespace, by_verb in seen.items():
        assert by_verb["list"] == levels["tenant-gateway-tenant-lists"], namespace
        assert by_verb["get"] == by_verb["write"] == levels["tenant-gateway-tenants"], namespace
    own = client.CoreV1Api(kubeclients.from_kubeconfig(cluster.gateway_kubeconfig))
    assert level_of(own.read_namespace_with_http_info(next(iter(seen)))) == levels["workload-high"]
    # Its non-resource calls too (/version: /readyz, reconcile), which the tenants' schema would take.
    assert level_of(client.VersionApi(own.api_client).get_code_with_http_info()) == levels["workload-high"]
