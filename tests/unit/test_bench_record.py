"""bench/record.py: a run's results become latest.json and one row of
history.csv. Pure (a temporary directory only)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from bench.record import COLUMNS, history_row, record


def _result(**extra: Any) -> dict[str, Any]:
    return {
        "started": "2026-11-26T15:25:59.530331+00:00", "commit": "4ea5d37", "quick": False,
        "idle_rss_mib": 64.44921875,
        "small_get": {
            "c1": {"direct": {"p50_ms": 1.75, "rps": 500.0}, "gateway": {"p50_ms": 2.2, "rps": 400.0}},
            "c32": {"direct": {"rps": 1400.0}, "gateway": {"rps": 1288.0, "cpu_ms_per_request": 0.30333333333333307},
                    "kubectl-proxy": {"rps": 1200.0}},
        },
        "issuance": {"gateway": {"rate": 150.0, "p99_ms": 84.16135900006338}, "raw": {"rate": 300.0}},
        "verdicts": [{"target": "a", "measured": "1", "ok": True}, {"target": "b", "measured": "2", "ok": False}],
        **extra,
    }


def test_the_row_holds_the_run_s_headline_figures_and_leaves_missing_ones_empty() -> None:
    row = history_row(_result())
    assert list(row) == list(COLUMNS)
    assert row["started_utc"] == "2026-11-26T15:25" and row["commit"] == "4ea5d37" and row["run"] == "full"
    assert row["c1_p50_vs_direct"] == "1.257"  # 2.2 / 1.75
    assert row["c32_rps_vs_direct"] == "0.92" and row["c32_rps_vs_kubectl_proxy"] == "1.073"
    assert row["cpu_ms_per_get"] == "0.3033" and row["idle_rss_mib"] == "64.45"
    assert row["issuance_vs_raw"] == "0.5" and row["issuance_p99_ms"] == "84.16"
    assert row["verdicts_met"] == "1" and row["verdicts_total"] == "2"
    # This run had no floor relay, pods, fair share or SSO workload.
    for missing in ("floor_cpu_ms_per_get", "exec_p50_vs_direct", "flood_p99_vs_idle", "sso_p50_vs_session",
                    "list_identity_vs_direct", "kib_rss_per_watch", "audit_rows_per_s", "audit_rows_lost",
                    "member_instructions_vs_owner", "member_cpu_vs_owner", "revocation_idle_p99_ms",
                    "audit_ingest_events_per_s", "audit_ingest_lag_p99_s"):
        assert row[missing] == ""


def test_the_audit_burst_row_is_the_writer_s_rate_and_the_rows_lost_over_its_parts() -> None:
    row = history_row(_result(audit_burst={
        "writer": {"burst": {"lost": 0}, "drain": {"lost": 2, "rows_per_s": 12345.6}}, "gateway": {"lost": 1}}))
    assert row["audit_rows_per_s"] == "12346" and row["audit_rows_lost"] == "3"


def test_the_member_row_is_the_instruction_ratio_with_the_timed_one_beside_it() -> None:
    row = history_row(_result(member_get={"instructions": {"member_vs_owner": 1.0123456},
                                          "cpu": {"member_vs_owner": 0.98765}}))
    assert row["member_instructions_vs_owner"] == "1.012" and row["member_cpu_vs_owner"] == "0.9877"


def test_the_issuance_row_reports_the_gateway_against_both_api_paths_and_what_the_binding_costs() -> None:
    from bench.workloads.issuing import issuance_verdicts

    issuance = {"gateway": {"rate": 80.0, "p99_ms": 40.0}, "raw": {"rate": 400.0}, "raw_bound": {"rate": 100.0}}
    row = history_row(_result(issuance=issuance))
    assert row["issuance_vs_raw"] == "0.2" and row["issuance_vs_raw_bound"] == "0.8"
    assert row["binding_cost_vs_unbound"] == "4"  # a bound issuance takes 4 times as long as a bare TokenRequest
    assert [(name, value, ok) for name, value, ok in issuance_verdicts(issuance)] == [
        ("issuance >= 0.85x raw TokenRequest", "0.20x", False), ("issuance p99 <= 50 ms", "40.0 ms", True),
        ("binding <= 1.15x the cost without", "4.00x", False)]
    assert issuance_verdicts({**issuance, "raw_bound": {"rate": 350.0}})[2][2]  # 400 / 350 = 1.14x
    # A run from before the binding was measured leaves its cells empty.
    old = history_row(_result())
    assert old["issuance_vs_raw_bound"] == "" and old["binding_cost_vs_unbound"] == ""


def test_the_issuance_row_judges_one_workspace_and_eight_side_by_side() -> None:
    from bench.workloads.issuing import issuance_verdicts

    spread = {"gateway": {"rate": 300.0, "p99_ms": 45.0}, "raw": {"rate": 340.0}, "raw_bound": {"rate": 290.0}}
    issuance = {"gateway": {"rate": 80.0, "p99_ms": 60.0}, "raw": {"rate": 400.0}, "raw_bound": {"rate": 100.0},
                "spread": spread}
    assert [(name, value, ok) for name, value, ok in issuance_verdicts(issuance)] == [
        ("issuance >= 0.85x raw TokenRequest", "0.20x", False), ("issuance p99 <= 50 ms", "60.0 ms", False),
        ("binding <= 1.15x the cost without", "4.00x", False),
        ("issuance >= 0.85x raw TokenRequest, 8 workspaces", "0.88x", True),
        ("issuance p99 <= 50 ms, 8 workspaces", "45.0 ms", True),
        ("binding <= 1.15x the cost without, 8 workspaces", "1.17x", False)]
    # The history keeps the one-workspace figures, as every earlier run has them.
    assert history_row(_result(issuance=issuance))["issuance_vs_raw"] == "0.2"


def test_the_revocation_and_audit_ingest_rows_are_their_headline_figures() -> None:
    row = history_row(_result(
        revocation={"idle": {"p50_ms": 14.25, "p99_ms": 18.75}, "in_use": {"p50_ms": 5012.5, "p99_ms": 9876.5}},
        audit_ingest={"ceiling": {"events_per_s": 8091.6}, "paced": {"lag_p99_s": 0.4712}}))
    assert (row["revocation_idle_p50_ms"], row["revocation_idle_p99_ms"]) == ("14.25", "18.75")
    assert (row["revocation_in_use_p50_ms"], row["revocation_in_use_p99_ms"]) == ("5012", "9876")
    assert row["audit_ingest_events_per_s"] == "8092" and row["audit_ingest_lag_p99_s"] == "0.4712"


def test_the_member_verdict_is_judged_by_instructions_within_five_percent() -> None:
    from bench.workloads.members import member_verdicts

    def judged(instructions: float, cpu: float) -> tuple[str, bool]:
        [(_, measured, ok)] = member_verdicts({"instructions": {"member_vs_owner": instructions},
                                               "cpu": {"member_vs_owner": cpu}})
        return measured, ok

    assert judged(1.05, 1.3) == ("1.050x", True)  # the timed ratio is context, not the verdict
    assert judged(1.051, 0.9) == ("1.051x", False)


def test_a_full_run_writes_latest_json_and_appends_a_row(tmp_path: Path) -> None:
    first, second = _result(), _result(commit="abcdef0")
    assert record(first, tmp_path) == tmp_path / "latest.json"
    record(second, tmp_path)
    assert json.loads((tmp_path / "latest.json").read_text()) == second
    with (tmp_path / "history.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["commit"] for r in rows] == ["4ea5d37", "abcdef0"]
    assert rows[1] == history_row(second)


def test_a_smoke_run_leaves_latest_json_and_the_history_alone(tmp_path: Path) -> None:
    record(_result(), tmp_path)
    assert record(_result(quick=True, commit="smoke00"), tmp_path) == tmp_path / "latest-quick.json"
    assert json.loads((tmp_path / "latest.json").read_text())["commit"] == "4ea5d37"
    assert "smoke00" not in (tmp_path / "history.csv").read_text()


def test_a_history_with_other_columns_is_rewritten_keeping_its_rows(tmp_path: Path) -> None:
    (tmp_path / "history.csv").write_text("started_utc,commit,retired_figure\n2026-11-20T10:00,0000000,7\n")
    record(_result(), tmp_path)
    with (tmp_path / "history.csv").open(newline="") as f:
        reader = csv.DictReader(f)
        assert list(reader.fieldnames or []) == [*COLUMNS, "retired_figure"]
        old, new = list(reader)
    assert old["commit"] == "0000000" and old["retired_figure"] == "7" and old["run"] == ""
    assert new["commit"] == "4ea5d37" and new["retired_figure"] == ""


def test_a_workload_run_alone_is_kept_with_its_commit_and_verdicts(tmp_path: Path) -> None:
    import datetime

    from bench.record import record_alone

    started = datetime.datetime(2026, 12, 2, tzinfo=datetime.timezone.utc)
    path = record_alone("stalled-readers", {"x": 1}, [("target", "9 KiB", True)], quick=True, started=started,
                        directory=tmp_path)
    kept = json.loads(path.read_text())
    assert path.name == "stalled-readers-quick.json"
    assert kept["verdicts"] == [{"target": "target", "measured": "9 KiB", "ok": True}]
    assert kept["started"] == started.isoformat() and kept["commit"] and kept["x"] == 1


def test_a_row_run_alone_is_printed_the_same_way_whatever_the_row(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    import datetime

    from bench.record import report_alone

    started = datetime.datetime(2026, 12, 2, tzinfo=datetime.timezone.utc)
    printed: list[dict[str, Any]] = []
    path = report_alone("audit-ingest", {"x": 1}, [("a target", "5 /s", True), ("another", "7 s", False)],
                        printed.append, quick=False, started=started, directory=tmp_path)
    assert path == tmp_path / "audit-ingest.json" and printed[0]["x"] == 1
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[-1] for line in lines if "target" in line or "another" in line] == ["yes", "NO"]
    assert lines[-1] == f"written: {path}"
