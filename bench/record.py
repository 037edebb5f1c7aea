"""Where a run's results go: `bench/results/latest.json` holds the newest
full run whole, and `bench/results/history.csv` gets one row per run with
its headline figures. A smoke run (BENCH_QUICK=1) writes
`latest-quick.json` and adds no row: it is not a measurement.

Pure (files only), so the row can be unit-tested from a result dict.
"""

from __future__ import annotations

import csv
import datetime
import json
import subprocess
from pathlib import Path
from typing import Any, Callable

RESULTS = Path(__file__).with_name("results")

COLUMNS = (
    "started_utc", "commit", "run",
    "c1_p50_vs_direct", "direct_c1_p50_ms",
    "c32_rps_vs_direct", "c32_rps_vs_kubectl_proxy", "gateway_c32_rps", "direct_c32_rps",
    "cpu_ms_per_get", "floor_cpu_ms_per_get", "go_relay_cpu_ms_per_get",
    "list_identity_vs_direct", "list_gzip_vs_direct",
    "kib_rss_per_watch", "idle_rss_mib",
    "issuance_vs_raw", "issuance_p99_ms", "issuance_vs_raw_bound", "binding_cost_vs_unbound", "onboarding_vs_raw",
    "exec_p50_vs_direct", "port_forward_vs_direct", "flood_p99_vs_idle",
    "sso_p50_vs_session", "sso_cpu_vs_session",
    "audit_rows_per_s", "audit_rows_lost",
    "member_instructions_vs_owner", "member_cpu_vs_owner",
    "revocation_idle_p50_ms", "revocation_idle_p99_ms", "revocation_in_use_p50_ms", "revocation_in_use_p99_ms",
    "audit_ingest_events_per_s", "audit_ingest_lag_p99_s",
    "verdicts_met", "verdicts_total",
)
"""history.csv's columns. A cell is empty where the run lacks the figure
(older runs had fewer workloads and relays)."""


def _get(result: dict[str, Any], *keys: str) -> Any:
    value: Any = result
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def _ratio(result: dict[str, Any], top: tuple[str, ...], bottom: tuple[str, ...]) -> float | None:
    a, b = _get(result, *top), _get(result, *bottom)
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool) or isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        return format(value, ".4g")
    return str(value)


def run_kind(result: dict[str, Any]) -> str:
    if "small_get" not in result:
        return "sso only"
    return "quick" if result.get("quick") else "full"


def _whole(value: Any) -> int | None:
    """A rate in the thousands, to the unit (4 significant digits would print 1.235e+04)."""
    return round(value) if isinstance(value, (int, float)) else None


def _audit_lost(result: dict[str, Any]) -> int | None:
    """Rows lost over the audit burst's three parts (None: no such workload)."""
    parts = [_get(result, "audit_burst", *keys, "lost")
             for keys in (("writer", "burst"), ("writer", "drain"), ("gateway",))]
    return sum(parts) if all(isinstance(p, int) for p in parts) else None


def history_row(result: dict[str, Any]) -> dict[str, str]:
    """One run's headline figures, as history.csv's cells."""
    verdicts = result.get("verdicts") or []
    sg, lst, pods = ("small_get",), ("list_500",), ("pod_streams",)
    row: dict[str, Any] = {
        "started_utc": str(result.get("started") or "")[:16],
        "commit": result.get("commit"),
        "run": run_kind(result),
        "c1_p50_vs_direct": _ratio(result, (*sg, "c1", "gateway", "p50_ms"), (*sg, "c1", "direct", "p50_ms")),
        "direct_c1_p50_ms": _get(result, *sg, "c1", "direct", "p50_ms"),
        "c32_rps_vs_direct": _ratio(result, (*sg, "c32", "gateway", "rps"), (*sg, "c32", "direct", "rps")),
        "c32_rps_vs_kubectl_proxy": _ratio(result, (*sg, "c32", "gateway", "rps"),
                                           (*sg, "c32", "kubectl-proxy", "rps")),
        "gateway_c32_rps": _get(result, *sg, "c32", "gateway", "rps"),
        "direct_c32_rps": _get(result, *sg, "c32", "direct", "rps"),
        "cpu_ms_per_get": _get(result, *sg, "c32", "gateway", "cpu_ms_per_request"),
        "floor_cpu_ms_per_get": _get(result, *sg, "c32", "aiohttp-floor", "cpu_ms_per_request"),
        "go_relay_cpu_ms_per_get": _get(result, *sg, "c32", "go-relay", "cpu_ms_per_request"),
        "list_identity_vs_direct": _ratio(result, (*lst, "identity", "gateway", "p50_ms"),
                                          (*lst, "identity", "direct", "p50_ms")),
        "list_gzip_vs_direct": _ratio(result, (*lst, "gzip", "gateway", "p50_ms"), (*lst, "gzip", "direct", "p50_ms")),
        "kib_rss_per_watch": _get(result, "watches", "kib_rss_per_watch"),
        "idle_rss_mib": _get(result, "idle_rss_mib"),
        "issuance_vs_raw": _ratio(result, ("issuance", "gateway", "rate"), ("issuance", "raw", "rate")),
        "issuance_p99_ms": _get(result, "issuance", "gateway", "p99_ms"),
        "issuance_vs_raw_bound": _ratio(result, ("issuance", "gateway", "rate"), ("issuance", "raw_bound", "rate")),
        "binding_cost_vs_unbound": _ratio(result, ("issuance", "raw", "rate"), ("issuance", "raw_bound", "rate")),
        "onboarding_vs_raw": _ratio(result, ("onboarding", "gateway", "rate"), ("onboarding", "raw", "rate")),
        "exec_p50_vs_direct": _ratio(result, (*pods, "exec_round_trip", "gateway", "p50_ms"),
                                     (*pods, "exec_round_trip", "direct", "p50_ms")),
        "port_forward_vs_direct": _ratio(result, (*pods, "port_forward_mib_per_s", "gateway"),
                                         (*pods, "port_forward_mib_per_s", "direct")),
        "flood_p99_vs_idle": _get(result, "fair_share", "p99_ratio"),
        "sso_p50_vs_session": _get(result, "sso", "id_token_vs_session", "p50"),
        "sso_cpu_vs_session": _get(result, "sso", "id_token_vs_session", "cpu_per_get"),
        "audit_rows_per_s": _whole(_get(result, "audit_burst", "writer", "drain", "rows_per_s")),
        "audit_rows_lost": _audit_lost(result),
        "member_instructions_vs_owner": _get(result, "member_get", "instructions", "member_vs_owner"),
        "member_cpu_vs_owner": _get(result, "member_get", "cpu", "member_vs_owner"),
        "revocation_idle_p50_ms": _get(result, "revocation", "idle", "p50_ms"),
        "revocation_idle_p99_ms": _get(result, "revocation", "idle", "p99_ms"),
        "revocation_in_use_p50_ms": _get(result, "revocation", "in_use", "p50_ms"),
        "revocation_in_use_p99_ms": _get(result, "revocation", "in_use", "p99_ms"),
        "audit_ingest_events_per_s": _whole(_get(result, "audit_ingest", "ceiling", "events_per_s")),
        "audit_ingest_lag_p99_s": _get(result, "audit_ingest", "paced", "lag_p99_s"),
        "verdicts_met": sum(1 for v in verdicts if v["ok"]) if verdicts else None,
        "verdicts_total": len(verdicts) if verdicts else None,
    }
    return {column: _cell(row[column]) for column in COLUMNS}


def record(result: dict[str, Any], directory: Path = RESULTS) -> Path:
    """Write a run's results: the whole of it to latest.json (a smoke run's
    to latest-quick.json), and a full run's row to history.csv. Returns the
    JSON's path."""
    directory.mkdir(parents=True, exist_ok=True)
    quick = run_kind(result) == "quick"
    latest = directory / ("latest-quick.json" if quick else "latest.json")
    latest.write_text(json.dumps(result, indent=2, default=str) + "\n")
    if not quick:
        append_row(directory / "history.csv", history_row(result))
    return latest


def append_row(history: Path, row: dict[str, str]) -> None:
    """Append one row; a file with other columns (an older harness's) is
    rewritten with today's columns first, its own extra columns kept last."""
    if history.exists():
        with history.open(newline="") as f:
            reader = csv.DictReader(f)
            old_columns, rows = list(reader.fieldnames or []), list(reader)
        if old_columns != list(COLUMNS):
            columns = [*COLUMNS, *(c for c in old_columns if c not in COLUMNS)]
            with history.open("w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=columns, restval="")
                writer.writeheader()
                writer.writerows(rows)
    else:
        with history.open("w", newline="") as f:
            csv.DictWriter(f, fieldnames=COLUMNS).writeheader()
    with history.open(newline="") as f:
        columns = next(csv.reader(f))
    with history.open("a", newline="") as f:
        csv.DictWriter(f, fieldnames=columns, restval="").writerow(row)


def record_alone(name: str, result: dict[str, Any], verdicts: list[tuple[str, str, bool]], *, quick: bool,
                 started: datetime.datetime, directory: Path = RESULTS) -> Path:
    """A workload run on its own: its result, with the commit, the start and
    its verdicts, in results/<name>.json (<name>-quick.json for a smoke run)."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    result.update(started=started.isoformat(), commit=commit or "nogit", quick=quick,
                  verdicts=[{"target": n, "measured": v, "ok": ok} for n, v, ok in verdicts])
    path = directory / (f"{name}-quick.json" if quick else f"{name}.json")
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path


def report_alone(name: str, result: dict[str, Any], verdicts: list[tuple[str, str, bool]],
                 printer: Callable[[dict[str, Any]], None], *, quick: bool, started: datetime.datetime,
                 directory: Path = RESULTS) -> Path:
    """`record_alone`, then the row's table, its verdicts and where it was
    written, printed: the end of every `python -m bench.<row>` run alone."""
    path = record_alone(name, result, verdicts, quick=quick, started=started, directory=directory)
    printer(result)
    for target, measured, ok in verdicts:
        print(f"  {target:<44} {measured:>16}  {'yes' if ok else 'NO'}")
    print(f"\nwritten: {path}")
    return path
