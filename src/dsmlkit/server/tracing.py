"""W3C trace context passed on to the engine, and OpenTelemetry spans when asked for.

:func:`trace_headers` picks a client's ``traceparent`` and ``tracestate`` when they are
well formed (W3C Trace Context); the gateway forwards them to the engine. With the
``[otel]`` extra installed and ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) set, :func:`tracing_from_environment` makes a
:class:`Tracing`: each request gets a server span (a child of the client's
``traceparent``), a child span per stage, and the upstream call a client span whose
context goes out as the ``traceparent`` instead. Without them nothing of OpenTelemetry is
imported: the imports are inside :class:`Tracing`.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Mapping
from typing import Any

LOGGER = logging.getLogger("dsmlkit.server")

#: The environment variables of the OTLP exporter that turn tracing on.
ENDPOINT_ENVS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
#: version-traceid-parentid-flags; version ``ff`` is invalid; a later version may add fields.
_TRACEPARENT = re.compile(
    r"(?!ff)([0-9a-f]{2})-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}(-.*)?"
)
#: One tracestate list member: a key (simple or ``tenant@system``) and a value.
_MEMBER = re.compile(
    r"[ \t]*(?:[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13})"
    r"=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e][ \t]*"
)
#: The most list members a tracestate may hold.
_MAX_MEMBERS = 32


def trace_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The client's ``traceparent`` (and its ``tracestate``) when well formed, else none;
    a ``tracestate`` without a valid ``traceparent`` is dropped, as W3C asks."""
    parent = headers.get("traceparent")
    if parent is None or not _valid_parent(parent):
        return {}
    found = {"traceparent": parent}
    state = headers.get("tracestate")
    if state is not None and _valid_state(state):
        found["tracestate"] = state
    return found


def _valid_parent(value: str) -> bool:
    match = _TRACEPARENT.fullmatch(value)
    if match is None:
        return False
    return match.group(2) is None or match.group(1) != "00"  # version 00 has four fields


def _valid_state(value: str) -> bool:
    members = [m for m in value.split(",") if m.strip(" \t")]
    return len(members) <= _MAX_MEMBERS and all(_MEMBER.fullmatch(m) for m in members)


def tracing_from_environment() -> Tracing | None:
    """A :class:`Tracing` when an OTLP endpoint is set and the ``[otel]`` extra is
    installed (without it, a warning says so), else None."""
    if not any(os.environ.get(name) for name in ENDPOINT_ENVS):
        return None
    try:
        return Tracing()
    except ImportError as exc:
        LOGGER.warning(
            "an OTLP endpoint is set but OpenTelemetry is not installed (%s); "
            "install dsmlkit[otel] for traces",
            exc,
        )
        return None


class Tracing:
    """The app's OpenTelemetry tracer, exporting in batches over OTLP/HTTP (the exporter
    reads the standard ``OTEL_*`` variables)."""

    def __init__(self) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        from dsmlkit._version import __version__

        resource = Resource.create({"service.name": "dsmlkit", "service.version": __version__})
        self._provider = TracerProvider(resource=resource)
        self._provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        self.tracer = self._provider.get_tracer("dsmlkit.server", __version__)
        self.propagator = TraceContextTextMapPropagator()

    def start(self, method: str, route: str, incoming: Mapping[str, str]) -> RequestSpans:
        """The spans of one request, its server span started now under ``incoming``'s
        trace context."""
        return RequestSpans(self, method, route, incoming)

    def shutdown(self) -> None:
        """Send the spans still queued and stop."""
        self._provider.shutdown()


class RequestSpans:
    """One request's spans: the server span, live from the request to its last byte; the
    upstream client span, live while the upstream answers; and the stage spans, made when
    the request ends from the times of its stage boundaries (:meth:`mark`)."""

    def __init__(
        self, tracing: Tracing, method: str, route: str, incoming: Mapping[str, str]
    ) -> None:
        from opentelemetry.trace import SpanKind, set_span_in_context

        self._tracing = tracing
        parent = tracing.propagator.extract(dict(incoming))
        self._server = tracing.tracer.start_span(
            f"{method} {route}",
            context=parent,
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method, "http.route": route},
        )
        self._context = set_span_in_context(self._server)
        self._client: Any = None
        self._marks: dict[str, int] = {"start": time.time_ns()}

    def mark(self, boundary: str) -> None:
        """The time a stage boundary is passed (the first time only)."""
        self._marks.setdefault(boundary, time.time_ns())

    def upstream(self, headers: dict[str, str]) -> None:
        """Start the upstream client span; its context goes into ``headers``."""
        from opentelemetry.trace import SpanKind, set_span_in_context

        self.mark("sending")
        self._client = self._tracing.tracer.start_span(
            "upstream", context=self._context, kind=SpanKind.CLIENT
        )
        headers.pop("tracestate", None)
        self._tracing.propagator.inject(headers, set_span_in_context(self._client))

    def upstream_done(self) -> None:
        """End the upstream client span."""
        self.mark("upstream_done")
        if self._client is not None:
            self._client.end(end_time=self._marks["upstream_done"])
            self._client = None

    def finish(self, status: int, error: str | None) -> None:
        """Make the stage spans that ran and end the server span."""
        from opentelemetry.trace import Status, StatusCode

        if self._client is not None:  # the upstream request failed as it was sent
            self._client.set_status(Status(StatusCode.ERROR, error))
            self.upstream_done()
        marks, now = self._marks, time.time_ns()
        for name, begin, end in _STAGES:
            if begin in marks and (end in marks or end == "end"):
                span = self._tracing.tracer.start_span(
                    name, context=self._context, start_time=marks[begin]
                )
                span.end(end_time=marks.get(end, now))
        self._server.set_attribute("http.response.status_code", status)
        if status >= 500 or error is not None:
            self._server.set_status(Status(StatusCode.ERROR, error))
        self._server.end(end_time=now)


#: The stage spans: name, the boundary it starts at, the one it ends at (``end``: the
#: request's end).
_STAGES = (
    ("read", "start", "received"),
    ("restore", "received", "restored"),
    ("plan", "restored", "planned"),
    ("fold", "folding", "upstream_done"),
    ("write", "writing", "end"),
)
