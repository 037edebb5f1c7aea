"""Issue 38's figure: how long a second local cluster takes to start, and
what it holds in memory. The first cluster (with its node) is started once;
the second control plane (devstack.fleet: etcd, kube-apiserver,
kube-controller-manager, no node) is started `ROUNDS` times from a fresh
state dir (cold: new PKI, empty etcd, the deploy/ manifests applied and their
policies waited for) and `ROUNDS` times on its kept state dir (warm: a
`make run` restarted), each until the gateway could use it. RSS of each of
its processes is read from /proc once it is ready. Writes
bench/results/cluster-start.json.

    flock /tmp/cluster.lock .venv/bin/python -m bench.cluster_start
"""

from __future__ import annotations

import datetime
import json
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from devstack.cluster import LocalCluster, fleet_issuer, start_local_cluster
from devstack.fleet import further_name

RESULTS = Path(__file__).with_name("results") / "cluster-start.json"
ROUNDS = 3


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _second(state_dir: Path, first: LocalCluster) -> LocalCluster:
    return LocalCluster(state_dir=state_dir, bin_dir=first.bin_dir, with_node=False,
                        service_account_issuer=fleet_issuer(further_name(2)), audit_shared_with=first)


def measure(root: Path) -> dict[str, Any]:
    first = start_local_cluster(root / "first")
    try:
        cold: list[float] = []
        rss: dict[str, float] = {}
        for round_ in range(ROUNDS):
            second = _second(root / f"cold-{round_}", first)
            second.start()
            cold.append(second.started_in)
            rss = {name: _rss_mib(pid) for name, pid in second.pids().items()}
            second.stop_apiserver()
            second.stop()
        warm: list[float] = []
        for _ in range(ROUNDS):
            second = _second(root / "cold-0", first)
            second.start()
            warm.append(second.started_in)
            second.stop_apiserver()
            second.stop()
        return {
            "first_start_s": round(first.started_in, 2),
            "second_cold_start_s": [round(s, 2) for s in cold],
            "second_cold_start_median_s": round(statistics.median(cold), 2),
            "second_warm_start_s": [round(s, 2) for s in warm],
            "second_warm_start_median_s": round(statistics.median(warm), 2),
            "second_rss_mib": {name: round(mib, 1) for name, mib in rss.items()},
            "second_rss_total_mib": round(sum(rss.values()), 1),
        }
    finally:
        first.stop()


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-cluster-start-"))
    try:
        result = measure(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    result = {"started_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M"),
              "commit": commit, "rounds": ROUNDS, **result}
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
