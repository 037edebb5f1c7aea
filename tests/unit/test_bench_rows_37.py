"""Issue 37's benchmark rows, their pure parts: the revocation row's
summary of samples (bench/workloads/revocation.py), and the audit ingest
row's events and batches (bench/workloads/audit_ingest.py), which the
gateway's own reader (provisioning.cluster_events) must read as the API
server's."""

from __future__ import annotations

import base64
import json
import math

from bench.workloads.audit_ingest import (
    BATCH_EVENTS,
    Credential,
    EventMaker,
    batch_sizes,
    event_list,
    ingest_verdicts,
    jti_of,
)
from bench.workloads.revocation import summary
from provisioning.cluster_events import parse_event_list


def test_a_summary_is_nearest_rank_percentiles_in_milliseconds() -> None:
    values = [i / 1000 for i in range(1, 101)]  # 1 ms .. 100 ms
    got = summary(values)
    assert got["samples"] == 100 and got["min_ms"] == 1.0 and got["max_ms"] == 100.0
    assert math.isclose(got["p50_ms"], 51.0) and math.isclose(got["p99_ms"], 100.0)
    # Few samples: p99 is the largest, never past it.
    assert summary([0.010, 0.002])["p99_ms"] == 10.0
    assert math.isnan(summary([])["p50_ms"])


def test_events_are_batched_as_the_webhook_backend_does() -> None:
    assert batch_sizes(1000) == [400, 400, 200]
    assert batch_sizes(800) == [400, 400] and batch_sizes(0) == [] and batch_sizes(5, 2) == [2, 2, 1]
    assert json.loads(event_list([])) == {"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "metadata": {},
                                          "items": []}


def test_a_token_s_jti_is_read_from_its_payload() -> None:
    payload = base64.urlsafe_b64encode(json.dumps({"jti": "abc-123", "sub": "x"}).encode()).decode().rstrip("=")
    assert jti_of(f"header.{payload}.signature") == "abc-123"


def test_a_batch_is_read_by_the_gateway_as_the_api_server_s_with_the_mix_it_says() -> None:
    ours = [Credential(f"jti-{n}", f"tenant-{n % 2}", "sa-tenant-admin") for n in range(4)]
    maker = EventMaker(ours, probe=Credential("jti-probe", "tenant-9", "sa-tenant-admin"))
    batch = maker.batch()
    events = parse_event_list(json.loads(batch.body))
    assert batch.events == len(events) == BATCH_EVENTS
    assert len({e.audit_id for e in events}) == BATCH_EVENTS  # none a duplicate of another
    jtis = [e.jti for e in events]
    assert sum(1 for j in jtis if j in {c.jti for c in ours}) == 344  # 86 of each 100
    outside = [e for e in events if e.namespace == "platform-tools"]
    assert len(outside) == 20 and all(e.jti is None for e in outside)
    assert batch.kept == BATCH_EVENTS - len(outside)
    assert all(e.source_ip == "198.51.100.23" and e.code in (200, 201) and e.stage == "ResponseComplete"
               for e in events)
    # Every event is named after the run, so its rows can be counted; the next batch has new audit ids.
    assert all(e.name and e.name.startswith(f"{maker.run}-") for e in events if e.jti != "jti-probe")
    probed = maker.batch(with_probe=True)
    again = parse_event_list(json.loads(probed.body))
    assert not {e.audit_id for e in again} & {e.audit_id for e in events}
    assert probed.events == BATCH_EVENTS and [e.name for e in again if e.jti == "jti-probe"] == [probed.probe]


def test_the_ingest_row_needs_the_rate_the_lag_and_nothing_lost() -> None:
    def result(ceiling: float, paced: float, lag: float, lost: int = 0, seen: int = 10) -> dict[str, object]:
        return {"target_events_per_s": 5000, "lost": lost,
                "ceiling": {"events_per_s": ceiling, "refused": {}},
                "paced": {"events_per_s": paced, "refused": {}, "lag_p99_s": lag, "probes": 10, "probes_seen": seen}}

    assert all(ok for _, _, ok in ingest_verdicts(result(8000, 5000, 0.5)))
    assert [ok for _, _, ok in ingest_verdicts(result(4999, 4800, 2.1, lost=1, seen=9))] == [False] * 4
    # An unseen probe fails the lag even when the seen ones were quick.
    assert [ok for _, _, ok in ingest_verdicts(result(8000, 5000, 0.1, seen=9))] == [True, True, False, True]
