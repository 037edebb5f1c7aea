"""The pod-stream row's pure parts (bench/pods.py): the port-forward ratio
per batch, and where a round's CPU went."""

from __future__ import annotations

from bench.pods import _cpu_spent, paired_ratios, pod_verdicts


def test_each_batchs_gateway_round_is_divided_by_its_own_direct_round() -> None:
    rounds = {"direct": [200.0, 100.0, 150.0], "gateway": [160.0, 90.0, 120.0]}
    assert paired_ratios(rounds) == [0.8, 0.9, 0.8]


def test_cpu_spent_is_by_process_name_and_counts_processes_started_during_the_round() -> None:
    before = {10: ("kube-apiserver", 5.0), 11: ("kubectl", 1.0), 12: ("kubectl", 2.0), 14: ("etcd", 7.0)}
    after = {10: ("kube-apiserver", 5.25), 11: ("kubectl", 1.125), 12: ("kubectl", 2.125), 13: ("httpd", 0.5),
             14: ("etcd", 7.001)}
    # A process that began during the round counts from zero; one that barely ran is left out.
    assert _cpu_spent(before, after) == {"httpd": 0.5, "kube-apiserver": 0.25, "kubectl": 0.25}


def test_the_port_forward_verdict_is_the_ratio_of_the_medians() -> None:
    result = {"exec_round_trip": {"direct": {"p50_ms": 1.0}, "gateway": {"p50_ms": 1.2}},
              "port_forward_mib_per_s": {"direct": 150.0, "gateway": 120.0}, "kib_per_exec_session": 50.0}
    assert [(name, ok) for name, _, ok in pod_verdicts(result)] == [
        ("exec round trip p50 <= 1.3x direct", True), ("port-forward >= 0.8x direct", True),
        ("<= 150 KiB per exec session", True)]
