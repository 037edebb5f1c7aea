"""What the gateway does to the cluster and the database, as itself.

Invariants:
- A workspace is usable only once all six objects exist (onboarding is
  convergent: a retry finishes what a crash left; nothing half-made can be
  used, because credentials are issued only for `provisioned` workspaces).
- No Kubernetes token is ever written anywhere: kubeconfig tokens go to the
  user, proxy tokens stay in memory; audit rows keep only the token's `jti`.
- Every state change that other replicas cache is published with NOTIFY in
  the same transaction, by table triggers (db/migrations 0003 and 0004;
  events listens).
- Only kube.client talks to the API server with the gateway's credential and
  only db/ (and the event listener) talk to PostgreSQL.

This package does not know about HTTP serving: functions take explicit
arguments (a Tier, a ttl, a KubeClient) rather than the settings object.
"""
