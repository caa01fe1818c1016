"""Prometheus metrics through ``prometheus_client``, right under ``--workers N`` too.

Each app has its own :class:`Metrics` (its own registry, so several apps in one process
count apart); the server records one request at a time through :meth:`Metrics.record`
and ``GET /metrics`` returns :meth:`Metrics.render`.

With several worker processes, ``prometheus_client``'s multiprocess mode: when
``PROMETHEUS_MULTIPROC_DIR`` names a directory as the process starts (``dsmlkit serve
--workers N`` makes a private one for its workers, see
:func:`dsmlkit.server.runtime.metrics_directory`), every process writes its values to
files there and a scrape of any worker adds up the files of all of them. A worker that
died keeps its files, so its counts stay in the totals (counters never go back). The
gauges add up the live processes only (``livesum``: the requests a dead worker had in
flight are gone with it) or take the largest value (``max``: the build info, 1 in each).

No ``_created`` series: they double the series of every counter and histogram and no
chart uses them.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.multiprocess import MultiProcessCollector

if TYPE_CHECKING:
    from dsmlkit.server.reqlog import RequestRecord

#: The environment variable that turns on ``prometheus_client``'s multiprocess mode.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: What :meth:`Metrics.render` returns (the text format, version 0.0.4).
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

#: Seconds; spans a fast parse (sub-millisecond) to a long generation.
TIME_BUCKETS = (0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0, 600.0)
#: Seconds of the gateway's own work: tens of microseconds per chunk to a long render.
OVERHEAD_BUCKETS = (
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.5,
    1.0,
)


#: Seconds between the parts of a streamed answer, and to its first part, as agents see
#: them: a token every few milliseconds to a long prefill or tool-call wait.
CHUNK_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

#: A metric with labels (its children are of the same type).
_Labelled = TypeVar("_Labelled", Counter, Gauge, Histogram)


class Metrics:
    """Every metric the server exports."""

    def __init__(self) -> None:
        from dsmlkit._version import __version__

        disable_created_metrics()  # type: ignore[no-untyped-call]  # not annotated
        self._multiprocess = MULTIPROC_ENV in os.environ
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._registry = registry = CollectorRegistry()
        self.build_info = Gauge(
            "dsmlkit_build_info",
            "Always 1; the version of dsmlkit serving.",
            ("version",),
            registry=registry,
            multiprocess_mode="max",
        )
        self.build_info.labels(__version__).set(1)
        self.in_flight = Gauge(
            "dsmlkit_requests_in_flight",
            "Gateway requests being answered, by API and served model.",
            ("api", "model"),
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.first_chunk = Histogram(
            "dsmlkit_time_to_first_chunk_seconds",
            "Streamed answers: time from the request to the first part of the response body, "
            "by route.",
            ("route",),
            buckets=CHUNK_BUCKETS,
            registry=registry,
        )
        self.between_chunks = Histogram(
            "dsmlkit_time_between_chunks_seconds",
            "Streamed answers: time between the parts of the response body, by route.",
            ("route",),
            buckets=CHUNK_BUCKETS,
            registry=registry,
        )
        self.requests = Counter(
            "dsmlkit_requests_total",
            "Requests answered, by route and HTTP status.",
            ("route", "status"),
            registry=registry,
        )
        self.errors = Counter(
            "dsmlkit_request_errors_total",
            "Requests that ended in an error (also mid-stream), by route and error type.",
            ("route", "type"),
            registry=registry,
        )
        self.diagnostics = Counter(
            "dsmlkit_parse_diagnostics_total",
            "Parser diagnostics (recovered or set-aside model output), by kind.",
            ("kind",),
            registry=registry,
        )
        self.tokens = Counter(
            "dsmlkit_tokens_total",
            "Tokens reported for gateway requests, by kind.",
            ("kind",),
            registry=registry,
        )
        self.duration = Histogram(
            "dsmlkit_request_duration_seconds",
            "Wall time from request to last byte, by route.",
            ("route",),
            buckets=TIME_BUCKETS,
            registry=registry,
        )
        self.parse_time = Histogram(
            "dsmlkit_parse_seconds",
            "Time spent in the DSML parser per request.",
            buckets=TIME_BUCKETS,
            registry=registry,
        )
        self.upstream_time = Histogram(
            "dsmlkit_upstream_seconds",
            "Time from sending the upstream request to its end.",
            buckets=TIME_BUCKETS,
            registry=registry,
        )
        self.overhead = Histogram(
            "dsmlkit_gateway_overhead_seconds",
            "The gateway's own time per gateway request: its wall time minus the time spent "
            "waiting on the upstream, by route.",
            ("route",),
            buckets=OVERHEAD_BUCKETS,
            registry=registry,
        )
        self.chunk_overhead = Histogram(
            "dsmlkit_gateway_chunk_overhead_seconds",
            "The gateway's own time per read of the upstream stream: from its arrival to "
            "the next read (parse, convert, write to the client), by route.",
            ("route",),
            buckets=OVERHEAD_BUCKETS,
            registry=registry,
        )

    def in_flight_now(self, api: str, model: str) -> Gauge:
        """Count a request in flight for ``api`` and ``model``; the gauge to ``dec()`` when
        it ends."""
        gauge = self._child(self.in_flight, api, model)
        gauge.inc()
        return gauge

    def record(self, record: RequestRecord) -> None:
        """Account for one finished request."""
        route, child = record.route, self._child
        child(self.requests, route, str(record.status)).inc()
        if record.error_type is not None:
            child(self.errors, route, record.error_type).inc()
        for kind, count in record.diagnostics.items():
            child(self.diagnostics, kind).inc(count)
        if record.prompt_tokens is not None:
            child(self.tokens, "prompt").inc(record.prompt_tokens)
        if record.completion_tokens is not None:
            child(self.tokens, "completion").inc(record.completion_tokens)
        child(self.duration, route).observe(record.duration)
        if record.parsed:
            self.parse_time.observe(record.parse_seconds)
        if record.upstream_seconds is not None:
            self.upstream_time.observe(record.upstream_seconds)
        if record.overhead is not None:
            child(self.overhead, route).observe(record.overhead)
        if record.stream and record.first_chunk is not None:
            child(self.first_chunk, route).observe(record.first_chunk)
            between = child(self.between_chunks, route)
            for seconds in record.chunk_gaps:
                between.observe(seconds)
        if record.chunk_overheads:
            per_chunk = child(self.chunk_overhead, route)
            for seconds in record.chunk_overheads:
                per_chunk.observe(seconds)

    def _child(self, metric: _Labelled, *labels: str) -> _Labelled:
        """``metric.labels(*labels)``, looked up once per label set (the lookup takes a
        lock and checks the labels each time; the child it returns is always the same)."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def render(self) -> bytes:
        """The exposition text (:data:`CONTENT_TYPE`): this app's metrics, or in
        multiprocess mode those of every process sharing the directory."""
        if not self._multiprocess:
            return generate_latest(self._registry)
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]  # not annotated
        return generate_latest(registry)
