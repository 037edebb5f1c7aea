"""The hot path's tallies (proxy.http.metrics) render as prometheus_client's own counters and histogram would."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import generate_latest

from proxy.http.metrics import DURATION_BUCKETS, Metrics


def lines(text: bytes, prefix: str) -> list[str]:
    return [line for line in text.decode().splitlines() if line.startswith(prefix) and "_created" not in line]


def test_tallies_render_as_observed_one_by_one() -> None:
    metrics = Metrics()
    registry = CollectorRegistry()
    requests = Counter("tenant_gateway_requests", "HTTP requests answered, by route and status", ["route", "status"],
                       registry=registry)
    duration = Histogram("tenant_gateway_request_duration_seconds", "Time to the response headers, by route",
                         ["route"], buckets=DURATION_BUCKETS, registry=registry)
    hits = Counter("tenant_gateway_token_cache_hits", "Proxied requests served a cached token", registry=registry)
    observed = [("/k8s/{workspace_id}/{tail}", 200, 0.0004), ("/k8s/{workspace_id}/{tail}", 200, 0.001),
                ("/k8s/{workspace_id}/{tail}", 404, 0.0011), ("/healthz", 200, 0.003), ("/healthz", 200, 42.0),
                ("/healthz", 503, None), ("/k8s/{workspace_id}/{tail}", 200, 10.0)]
    for scrape in range(2):  # tallies add up across scrapes
        for route, status, seconds in observed:
            metrics.observe_request(route, status, seconds)
            requests.labels(route=route, status=str(status)).inc()
            if seconds is not None:
                duration.labels(route=route).observe(seconds)
        for _ in range(3):
            metrics.token_cache_hit()
            hits.inc()
        ours, theirs = metrics.exposition(), generate_latest(registry)
        for family in ("tenant_gateway_requests_total", "tenant_gateway_request_duration_seconds",
                       "tenant_gateway_token_cache_hits_total"):
            assert sorted(lines(ours, family)) == sorted(lines(theirs, family)), family
    assert 'tenant_gateway_request_duration_seconds_bucket{le="0.001",route="/k8s/{workspace_id}/{tail}"} 4.0' in \
        lines(metrics.exposition(), "tenant_gateway_request_duration_seconds")


def test_the_process_descriptors_and_memory_are_exposed() -> None:
    """What a replica near its open-files limit shows before it refuses a connection."""
    exposed = Metrics().exposition().decode()
    for family in ("process_open_fds ", "process_max_fds ", "process_resident_memory_bytes "):
        assert any(line.startswith(family) for line in exposed.splitlines()), family
