"""Prometheus metrics, written by hand in the text exposition format (no dependency).

Only counters and histograms with a few fixed label names; the server records one request
at a time through :meth:`Metrics.record` and ``GET /metrics`` returns :meth:`Metrics.render`.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dsmlkit.server.reqlog import RequestRecord

Labels = tuple[tuple[str, str], ...]

#: Seconds; spans a fast parse (sub-millisecond) to a long generation.
TIME_BUCKETS = (0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0, 600.0)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _label_text(labels: Labels, extra: Labels = ()) -> str:
    pairs = labels + extra
    if not pairs:
        return ""
    return "{" + ",".join(f'{name}="{_escape(value)}"' for name, value in pairs) + "}"


def _number(value: float) -> str:
    if value == float("inf"):
        return "+Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


class Counter:
    """A monotonically increasing count per label set."""

    def __init__(self, name: str, help_text: str) -> None:
        self.name = name
        self.help_text = help_text
        self._values: dict[Labels, float] = {}

    def inc(self, labels: Mapping[str, str] | None = None, amount: float = 1.0) -> None:
        key = tuple(sorted((labels or {}).items()))
        self._values[key] = self._values.get(key, 0.0) + amount

    def lines(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help_text}"
        yield f"# TYPE {self.name} counter"
        for labels, value in sorted(self._values.items()):
            yield f"{self.name}{_label_text(labels)} {_number(value)}"


class Histogram:
    """Observations in cumulative buckets, with their sum and count, per label set."""

    def __init__(self, name: str, help_text: str, buckets: tuple[float, ...] = TIME_BUCKETS):
        self.name = name
        self.help_text = help_text
        self.buckets = buckets
        self._series: dict[Labels, tuple[list[int], list[float]]] = {}

    def observe(self, value: float, labels: Mapping[str, str] | None = None) -> None:
        key = tuple(sorted((labels or {}).items()))
        counts, total = self._series.setdefault(key, ([0] * (len(self.buckets) + 1), [0.0]))
        counts[bisect.bisect_left(self.buckets, value)] += 1
        total[0] += value

    def lines(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help_text}"
        yield f"# TYPE {self.name} histogram"
        for labels, (counts, total) in sorted(self._series.items()):
            running = 0
            for bound, count in zip((*self.buckets, float("inf")), counts, strict=True):
                running += count
                le = (("le", _number(bound)),)
                yield f"{self.name}_bucket{_label_text(labels, le)} {running}"
            yield f"{self.name}_sum{_label_text(labels)} {_number(total[0])}"
            yield f"{self.name}_count{_label_text(labels)} {running}"


class Metrics:
    """Every metric the server exports."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests = Counter(
            "dsmlkit_requests_total", "Requests answered, by route and HTTP status."
        )
        self.errors = Counter(
            "dsmlkit_request_errors_total",
            "Requests that ended in an error (also mid-stream), by route and error type.",
        )
        self.diagnostics = Counter(
            "dsmlkit_parse_diagnostics_total",
            "Parser diagnostics (recovered or set-aside model output), by kind.",
        )
        self.tokens = Counter(
            "dsmlkit_tokens_total", "Tokens reported for gateway requests, by kind."
        )
        self.duration = Histogram(
            "dsmlkit_request_duration_seconds", "Wall time from request to last byte, by route."
        )
        self.parse_time = Histogram(
            "dsmlkit_parse_seconds", "Time spent in the DSML parser per request."
        )
        self.upstream_time = Histogram(
            "dsmlkit_upstream_seconds", "Time from sending the upstream request to its end."
        )

    def record(self, record: RequestRecord) -> None:
        """Account for one finished request."""
        route = {"route": record.route}
        with self._lock:
            self.requests.inc({**route, "status": str(record.status)})
            if record.error_type is not None:
                self.errors.inc({**route, "type": record.error_type})
            for kind, count in record.diagnostics.items():
                self.diagnostics.inc({"kind": kind}, count)
            if record.prompt_tokens is not None:
                self.tokens.inc({"kind": "prompt"}, record.prompt_tokens)
            if record.completion_tokens is not None:
                self.tokens.inc({"kind": "completion"}, record.completion_tokens)
            self.duration.observe(record.duration, route)
            if record.parsed:
                self.parse_time.observe(record.parse_seconds)
            if record.upstream_seconds is not None:
                self.upstream_time.observe(record.upstream_seconds)

    def render(self) -> str:
        """The exposition text (format version 0.0.4)."""
        metrics = (
            self.requests,
            self.errors,
            self.diagnostics,
            self.tokens,
            self.duration,
            self.parse_time,
            self.upstream_time,
        )
        with self._lock:
            return "".join(line + "\n" for metric in metrics for line in metric.lines())
