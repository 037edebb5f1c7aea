"""Prometheus metrics, one registry per application (tests build many apps in
one process; the default global registry would refuse duplicates)."""

from __future__ import annotations

import bisect

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

__all__ = ["Metrics", "CONTENT_TYPE_LATEST"]

DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # process_open_fds against process_max_fds: every open stream holds
        # two descriptors (proxy.server.open_files), so a replica near its
        # limit shows here before a connection is refused (EMFILE). Also the
        # replica's resident memory, about 100 KiB an open stream.
        ProcessCollector(registry=r)
        self.requests = Counter("tenant_gateway_requests", "HTTP requests answered, by route and status",
                                ["route", "status"], registry=r)
        self.request_duration = Histogram(
            "tenant_gateway_request_duration_seconds", "Time to the response headers, by route", ["route"],
            buckets=DURATION_BUCKETS, registry=r)
        self.token_requests = Counter("tenant_gateway_token_requests", "TokenRequests made, by result",
                                      ["result"], registry=r)
        # By cluster too, as families of their own: the label-less ones keep
        # the names and series dashboards and alerts already read.
        self.cluster_token_requests = Counter("tenant_gateway_cluster_token_requests",
                                              "TokenRequests the proxy made, by cluster and result",
                                              ["cluster", "result"], registry=r)
        self.cluster_proxied = Counter("tenant_gateway_cluster_proxied_requests",
                                       "Proxied requests sent to a cluster's API server, by cluster and kind "
                                       "(read or write)", ["cluster", "kind"], registry=r)
        self.cluster_upstream_failures = Counter(
            "tenant_gateway_cluster_upstream_failures",
            "Proxied exchanges that failed to reach a cluster's API server (503), by cluster", ["cluster"], registry=r)
        self.token_cache_hits = Counter("tenant_gateway_token_cache_hits", "Proxied requests served a cached token",
                                        registry=r)
        self.open_streams = Gauge("tenant_gateway_proxy_open_streams",
                                  "Open long-running proxied streams (watch, follow, exec)", registry=r)
        self.stream_buffered_bytes = Gauge(
            "tenant_gateway_proxy_stream_buffered_bytes",
            "Bytes the open streams hold for their clients, as last noted (proxy.passthrough.stream_buffers)",
            registry=r)
        self.streams_waiting = Gauge(
            "tenant_gateway_proxy_streams_waiting_for_clients",
            "Open streams not reading from the API server until their clients take what they hold", registry=r)
        self.stream_ceiling_waits = Gauge(
            "tenant_gateway_proxy_stream_ceiling_waits",
            "Times a stream stopped reading from the API server because the replica's streams held more than "
            "GATEWAY_STREAM_BUFFER_BYTES (a count since start)", registry=r)
        self.suspensions = Counter("tenant_gateway_suspensions", "Workspaces suspended", registry=r)
        self.rate_limited = Counter("tenant_gateway_rate_limited", "Requests refused by a rate limit, by limit",
                                    ["limit"], registry=r)
        self.requests_in_flight = Gauge("tenant_gateway_requests_in_flight",
                                        "Requests being handled at scrape time, this scrape included "
                                        "(what a stop would drain)", registry=r)
        self.loop_tasks = Gauge("tenant_gateway_event_loop_tasks",
                                "asyncio tasks alive at scrape time (leak detector for soaks)", registry=r)
        self.database_checkouts = Counter(
            "tenant_gateway_database_checkouts",
            "Connections taken from the database pool for requests: every query and transaction takes one",
            registry=r)
        self.proxy_reads = Counter("tenant_gateway_proxy_reads", "Proxied read requests (not audited row by row)",
                                   registry=r)
        self.express_answers = Counter("tenant_gateway_proxy_express_answers",
                                       "Proxied GETs answered by the express lane (proxy.passthrough.express)",
                                       registry=r)
        self.audit_rows = Counter("tenant_gateway_audit_rows",
                                  "Audit rows of proxied writes by where they went: stored, or logged (the "
                                  "database would not take them)", ["outcome"], registry=r)
        self.audit_queue_taken = Gauge("tenant_gateway_audit_queue_taken",
                                       "Places in the audit queue taken: rows reserved, queued or being written",
                                       registry=r)
        self.audit_queue_capacity = Gauge("tenant_gateway_audit_queue_capacity", "Places in the audit queue",
                                          registry=r)
        self.audit_waits = Counter("tenant_gateway_audit_waits",
                                   "Proxied writes that waited for room in the audit queue", registry=r)
        self.audit_refusals = Counter("tenant_gateway_audit_refusals",
                                      "Proxied writes refused unsent (503 audit_unavailable): no room in the "
                                      "audit queue in time", registry=r)
        self._audit_seen = (0, 0, 0, 0)
        """The audit writer's totals at the last scrape (its counters are its own)."""

        # Counted as plain numbers on the hot path and added to their
        # metrics when scraped: a prometheus_client increment is four calls
        # and a lock, an observation six and two. The event loop is the only
        # thread that touches them.
        self._request_counts: dict[tuple[str, int], int] = {}
        self._bounds = (*DURATION_BUCKETS, float("inf"))  # the histogram's, +Inf included
        self._durations: dict[str, list[float]] = {}
        """Route -> observations per bucket (not cumulative), then their sum."""
        self._token_cache_hits = 0
        self._proxy_reads = 0
        self._express_answers = 0
        self._proxied: dict[tuple[str, str], int] = {}
        """(cluster, read|write) -> proxied requests since the last scrape."""

    def cluster_token_request(self, cluster: str, result: str) -> None:
        self.cluster_token_requests.labels(cluster=cluster, result=result).inc()

    def upstream_failure(self, cluster: str) -> None:
        self.cluster_upstream_failures.labels(cluster=cluster).inc()

    def token_cache_hit(self) -> None:
        """tenant_gateway_token_cache_hits, +1."""
        self._token_cache_hits += 1

    def proxy_read(self) -> None:
        """tenant_gateway_proxy_reads, +1."""
        self._proxy_reads += 1

    def proxied(self, cluster: str, kind: str) -> None:
        """tenant_gateway_cluster_proxied_requests{cluster, kind}, +1: a dict's
        add on the hot path, the metric's labels at the scrape."""
        key = (cluster, kind)
        self._proxied[key] = self._proxied.get(key, 0) + 1

    def express_answer(self) -> None:
        """tenant_gateway_proxy_express_answers, +1."""
        self._express_answers += 1

    def observe_request(self, route: str, status: int, seconds: float | None) -> None:
        """Count one answered request, and the time to its headers if known."""
        counts = self._request_counts
        key = (route, status)
        counts[key] = counts.get(key, 0) + 1
        if seconds is not None:
            pending = self._durations.get(route)
            if pending is None:
                pending = self._durations[route] = [0.0] * (len(self._bounds) + 1)
            pending[bisect.bisect_left(self._bounds, seconds)] += 1  # the first bucket whose bound holds it
            pending[-1] += seconds

    def observe_audit(self, *, stored: int, logged: int, waits: int, refusals: int, taken: int,
                      capacity: int) -> None:
        """The audit writer's running totals and queue, read at a scrape."""
        before = self._audit_seen
        self._audit_seen = (stored, logged, waits, refusals)
        self.audit_rows.labels(outcome="stored").inc(stored - before[0])
        self.audit_rows.labels(outcome="logged").inc(logged - before[1])
        self.audit_waits.inc(waits - before[2])
        self.audit_refusals.inc(refusals - before[3])
        self.audit_queue_taken.set(taken)
        self.audit_queue_capacity.set(capacity)

    def _flush(self) -> None:
        """What the hot path counted since the last scrape, into the metrics."""
        counts, self._request_counts = self._request_counts, {}
        for (route, status), count in counts.items():
            self.requests.labels(route=route, status=str(status)).inc(count)
        durations, self._durations = self._durations, {}
        for route, pending in durations.items():
            child = self.request_duration.labels(route=route)
            # prometheus_client observes one value at a time; its buckets and
            # sum take the tally whole (tests/unit/test_metrics.py holds the
            # rendering to what observe() gives).
            for bucket, observed in zip(child._buckets, pending):
                if observed:
                    bucket.inc(observed)
            child._sum.inc(pending[-1])
        if self._token_cache_hits:
            self.token_cache_hits.inc(self._token_cache_hits)
            self._token_cache_hits = 0
        if self._proxy_reads:
            self.proxy_reads.inc(self._proxy_reads)
            self._proxy_reads = 0
        if self._express_answers:
            self.express_answers.inc(self._express_answers)
            self._express_answers = 0
        proxied, self._proxied = self._proxied, {}
        for (cluster, kind), count in proxied.items():
            self.cluster_proxied.labels(cluster=cluster, kind=kind).inc(count)

    def exposition(self) -> bytes:
        self._flush()
        return generate_latest(self.registry)
