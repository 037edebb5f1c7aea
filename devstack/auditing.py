"""The local cluster's audit log, sent to the gateway: the API server's
audit policy, its webhook backend's configuration, and their certificates.

What the API server is started with (devstack.cluster adds `flags`):

* `--audit-policy-file`: Metadata level (who, what verb on which object,
  the answer's code; never a request or response body, so no token and no
  Secret's data), without the RequestReceived stage (half the volume).
  Nothing is recorded for requests without an object (discovery, health),
  nor for the control plane's own components (scheduler, controllers,
  kubelet), nor for the gateway's own credential, whose every act the
  gateway audits itself: what is left is people's requests.
* `--audit-webhook-config-file`: a kubeconfig whose `server` is
  `https://127.0.0.1:<port>/audit`, a port chosen at each start and fixed
  for the cluster's life (`LocalCluster.audit_webhook_port`): the gateway's
  audit listener must be there (`make run` and the tests start it there).
  The API server presents a client certificate of a CA of its own
  (`audit-ca.crt`, the gateway's GATEWAY_AUDIT_CLIENT_CA), and trusts the
  listener's serving certificate from the same CA. No other client
  certificate of the cluster is accepted by the listener.
* Batch mode with batches sent at least every second
  (`--audit-webhook-batch-max-wait=1s`), so the timeline lags by about a second.

While no gateway listens there, the API server retries each batch a few
times, then drops it (its log says so): the cluster itself is unaffected.
"""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from devstack import pki

AUDIT_CA = "audit-ca"
AUDIT_CLIENT = "audit-webhook-client"
AUDIT_LISTENER = "audit-listener"

# Level None first: the first rule that matches decides.
POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "None", "nonResourceURLs": ["/*"]},
        {"level": "None", "users": ["system:kube-scheduler", "system:kube-controller-manager", "system:apiserver",
                                    "kube-apiserver-kubelet-client"]},
        {"level": "None", "userGroups": ["system:nodes", "system:serviceaccounts:kube-system"]},
        {"level": "Metadata"},
    ],
}


def ensure_audit_pki(pki_dir: Path) -> None:
    """The audit CA, the API server's client pair and the listener's serving
    pair, made once (a state dir from before them gets them too)."""
    if (pki_dir / f"{AUDIT_CA}.crt").exists() and (pki_dir / f"{AUDIT_LISTENER}.crt").exists():
        return
    ca, ca_key = pki.make_ca("tenant-gateway-local-audit-ca")
    ca.write(pki_dir, AUDIT_CA)
    pki.issue(ca, ca_key, common_name="kube-apiserver-audit").write(pki_dir, AUDIT_CLIENT)
    pki.issue(ca, ca_key, common_name="127.0.0.1", server_hosts=("127.0.0.1", "localhost")).write(
        pki_dir, AUDIT_LISTENER)


def webhook_kubeconfig(pki_dir: Path, port: int) -> str:
    """The webhook backend's configuration (kubeconfig format)."""
    def b64(name: str) -> str:
        return base64.b64encode((pki_dir / name).read_bytes()).decode()

    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "audit",
        "clusters": [{"name": "gateway", "cluster": {"server": f"https://127.0.0.1:{port}/audit",
                                                     "certificate-authority-data": b64(f"{AUDIT_CA}.crt")}}],
        "users": [{"name": "kube-apiserver", "user": {"client-certificate-data": b64(f"{AUDIT_CLIENT}.crt"),
                                                      "client-key-data": b64(f"{AUDIT_CLIENT}.key")}}],
        "contexts": [{"name": "audit", "context": {"cluster": "gateway", "user": "kube-apiserver"}}],
    })


def write_config(state_dir: Path, pki_dir: Path, port: int) -> list[str]:
    """Write the policy and the webhook configuration; the API server's flags for them."""
    policy, webhook = state_dir / "audit-policy.yaml", state_dir / "audit-webhook.kubeconfig"
    policy.write_text(yaml.safe_dump(POLICY))
    webhook.write_text(webhook_kubeconfig(pki_dir, port))
    webhook.chmod(0o600)
    return [f"--audit-policy-file={policy}", f"--audit-webhook-config-file={webhook}", "--audit-webhook-mode=batch",
            "--audit-webhook-batch-max-wait=1s"]
