"""The local cluster's certificates, without starting it."""

from __future__ import annotations

from pathlib import Path

import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from devstack import pki
from devstack.cluster import GATEWAY_GROUPS, GATEWAY_USER, SERVICE_ACCOUNT_ISSUER, LocalCluster, fleet_issuer
from devstack.fleet import Member, clusters_yaml, further_name


def _subject(cert_path: Path) -> tuple[str, list[str]]:
    subject = x509.load_pem_x509_certificate(cert_path.read_bytes()).subject
    return (str(subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value),
            [str(a.value) for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)])


def test_gateway_certificate_carries_the_service_account_identity(tmp_path: Path) -> None:
    cluster = LocalCluster(state_dir=tmp_path, bin_dir=tmp_path)
    cluster.ensure_pki(tmp_path / "pki")
    assert _subject(tmp_path / "pki" / "gateway.crt") == (GATEWAY_USER, list(GATEWAY_GROUPS))


def test_a_dev_state_dir_from_before_gets_its_gateway_certificate_reissued(tmp_path: Path) -> None:
    """Its etcd data and CA stay; only the gateway's identity changes, so the
    shipped ClusterRoleBinding and policies apply to it."""
    cluster = LocalCluster(state_dir=tmp_path, bin_dir=tmp_path)
    pki_dir = tmp_path / "pki"
    cluster.ensure_pki(pki_dir)
    ca, ca_key = pki.load_ca(pki_dir)
    pki.issue(ca, ca_key, common_name="tenant-gateway", organizations=("tenant-gateway",)).write(pki_dir, "gateway")
    ca_before = (pki_dir / "ca.crt").read_bytes()
    cluster.ensure_pki(pki_dir)
    assert _subject(pki_dir / "gateway.crt") == (GATEWAY_USER, list(GATEWAY_GROUPS))
    assert (pki_dir / "ca.crt").read_bytes() == ca_before
    issued = x509.load_pem_x509_certificate((pki_dir / "gateway.crt").read_bytes())
    issued.verify_directly_issued_by(x509.load_pem_x509_certificate(ca_before))


def test_the_audit_policy_records_metadata_at_most_and_the_webhook_presents_its_own_certificate(
        tmp_path: Path) -> None:
    from devstack import auditing

    levels = {rule["level"] for rule in auditing.POLICY["rules"]}  # type: ignore[index, union-attr]
    assert levels <= {"None", "Metadata"}  # no request or response bodies: no token, no Secret's data
    assert auditing.POLICY["omitStages"] == ["RequestReceived"]
    cluster = LocalCluster(state_dir=tmp_path, bin_dir=tmp_path)
    cluster.ensure_pki(tmp_path / "pki")
    flags = auditing.write_config(tmp_path, tmp_path / "pki", 12345)
    assert "--audit-webhook-batch-max-wait=1s" in flags
    webhook = yaml.safe_load((tmp_path / "audit-webhook.kubeconfig").read_text())
    assert webhook["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:12345/audit"
    assert pki.common_name(cluster.audit_listener_pair[0]) == "127.0.0.1"
    assert cluster.audit_client_ca.read_bytes() != (tmp_path / "pki" / "ca.crt").read_bytes()


def test_a_further_cluster_has_its_own_ca_and_signing_key_and_shares_the_audit_listener(tmp_path: Path) -> None:
    """A token or certificate of one cluster means nothing to the other; both
    send their audit log to the one gateway's listener, which trusts one CA."""
    first = LocalCluster(state_dir=tmp_path / "a", bin_dir=tmp_path)
    first.ensure_pki(tmp_path / "a" / "pki")
    second = LocalCluster(state_dir=tmp_path / "b", bin_dir=tmp_path, with_node=False,
                          service_account_issuer=fleet_issuer("beta"), audit_shared_with=first)
    second.ensure_pki(tmp_path / "b" / "pki")
    a, b = tmp_path / "a" / "pki", tmp_path / "b" / "pki"
    for own in ("ca.crt", "ca.key", "sa.key", "gateway.crt"):
        assert (a / own).read_bytes() != (b / own).read_bytes(), own
    for shared in ("audit-ca.crt", "audit-webhook-client.key", "audit-listener.crt", "audit-listener.key"):
        assert (a / shared).read_bytes() == (b / shared).read_bytes(), shared
    assert (b / "audit-listener.key").stat().st_mode & 0o077 == 0
    assert fleet_issuer("beta") != SERVICE_ACCOUNT_ISSUER


def test_the_clusters_file_names_each_member_as_the_gateway_reads_it(tmp_path: Path) -> None:
    first = LocalCluster(state_dir=tmp_path / "a", bin_dir=tmp_path, server="https://127.0.0.1:6443")
    second = LocalCluster(state_dir=tmp_path / "b", bin_dir=tmp_path, server="https://127.0.0.1:7443")
    text = clusters_yaml([Member.of("default", first, labels={"region": "north"}),
                          Member.of("cluster-2", second, "dedicated")])
    assert yaml.safe_load(text) == [
        {"name": "default", "kubeconfig": str(tmp_path / "a" / "gateway.kubeconfig"),
         "public_server": "https://127.0.0.1:6443", "public_ca_file": str(tmp_path / "a" / "pki" / "ca.crt"),
         "labels": {"region": "north"}, "kind": "shared"},
        {"name": "cluster-2", "kubeconfig": str(tmp_path / "b" / "gateway.kubeconfig"),
         "public_server": "https://127.0.0.1:7443", "public_ca_file": str(tmp_path / "b" / "pki" / "ca.crt"),
         "labels": {}, "kind": "dedicated"},
    ]
    assert further_name(2) == "cluster-2"
