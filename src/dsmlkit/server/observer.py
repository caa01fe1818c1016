"""The request's observer: the one writer of its log lines and its metrics.

The middleware (:mod:`.app`) makes one :class:`RequestObserver` per request and finishes
it after the last byte. The stages write nothing into it: the routes hand it the results
the stages return (the typed request, :class:`~.restore.Restored`, the
:class:`~.upstream_kinds.UpstreamPlan`, the :class:`~.fold.Upstream` and its
:class:`~.fold.UpstreamFigures`, fold's :class:`~.fold.Outcome`, the remember stage's
:class:`~.reasoning_store.Written`, the answer's diagnostics), and it reads them when
the request ends, so an answer that fails midway still reports what it did.

The lines a stage asks for (:class:`~.reqlog.Note`: a store outage, a corrupt entry, a
lowered ``max_tokens``) are written as the result that holds them is handed over; those
of fold's :class:`~.fold.Outcome` (a call held back) and of an error raised with notes
(:class:`~.errors.Noted`) when the request ends, before its own line.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from starlette.requests import Request

from dsmlkit.api import ChatRequest
from dsmlkit.parse import Diagnostic, ParsedMessage
from dsmlkit.server.fold import HELD_BACK, Outcome, Upstream, UpstreamFigures
from dsmlkit.server.metrics import Metrics
from dsmlkit.server.reasoning_store import Written
from dsmlkit.server.reqlog import ACCESS_LOGGER, FIELDS, Note, RequestRecord, request_level
from dsmlkit.server.restore import Restored
from dsmlkit.server.tracing import RequestSpans
from dsmlkit.server.upstream_kinds import UpstreamPlan

#: The logger of the lines the stages ask for (the request lines go to ``ACCESS_LOGGER``).
LOGGER = logging.getLogger("dsmlkit.server")


class RequestObserver:
    """What one request did, gathered from the stages' results into its
    :class:`~.reqlog.RequestRecord` (the log line, the metrics) and, when tracing, its
    spans (:class:`~.tracing.RequestSpans`).

    ``api``: the name of the API the route answers in; ``forward``: the headers that go on
    to the engine (the request id, the client's trace context); ``spans``: the request's
    spans, when tracing."""

    def __init__(
        self,
        record: RequestRecord,
        api: str,
        forward: Mapping[str, str],
        spans: RequestSpans | None = None,
    ) -> None:
        self._record = record
        self._api = api
        self._forward = forward
        self._spans = spans
        self._in_flight: Any = None
        self._last_chunk = 0.0
        self._restored: Restored | None = None
        self._plan: UpstreamPlan | None = None
        self._upstream: Upstream | None = None
        self._figures: UpstreamFigures | None = None
        self._outcome: Outcome | None = None
        self._answered: Counter[str] = Counter()
        self._remembered: Written | None = None

    @property
    def request_id(self) -> str:
        return self._record.id

    def answered_with(self, status: int) -> None:
        """The response's status, as it starts."""
        self._record.status = status

    def received(self, body_bytes: int) -> None:
        """The size of the request body."""
        self._record.body_bytes = body_bytes
        self._mark("received")

    def failed(self, error_type: str, message: str) -> None:
        """The error the request ended in (the first one wins)."""
        self._record.fail(error_type, message)

    def model(self, name: str) -> None:
        """The served model the request went to."""
        self._record.model = name

    def noted(self, notes: Sequence[Note]) -> None:
        """Write the lines a stage asked for."""
        for note in notes:
            LOGGER.warning(note.message, extra={FIELDS: note.fields})

    def restored(self, restored: Restored, notes: Sequence[Note] = ()) -> None:
        """What the restore stage did (``notes``: what reading the request's stored
        history noted)."""
        self._restored = restored
        self.noted((*notes, *restored.notes))
        self._mark("restored")

    def gateway(self, model: str, req: ChatRequest, metrics: Metrics) -> None:
        """A gateway request: its served model, whether it streams; its output is parsed.
        It is in flight from now until it ends."""
        record = self._record
        record.model, record.stream, record.parsed = model, req.stream, True
        self._in_flight = metrics.in_flight_now(self._api, model)

    def planned(self, plan: UpstreamPlan) -> None:
        """What goes upstream: the prompt's length, the wait for the engine's count."""
        self._plan = plan
        self._mark("planned")

    def upstream_headers(self) -> dict[str, str]:
        """The headers the upstream requests carry: the request id, and the trace context
        (the client's, or with tracing the upstream span's, started now)."""
        headers = dict(self._forward)
        if self._spans is not None:
            self._spans.upstream(headers)
        return headers

    def sending(self, upstream: Upstream) -> None:
        """The upstream requests of the answer (a refused forced choice is counted)."""
        self._upstream = upstream

    def upstream_finished(self, figures: UpstreamFigures) -> None:
        """The upstream's figures, once its requests are closed."""
        self._figures = figures
        if self._spans is not None:
            self._spans.upstream_done()

    def folding(self, outcome: Outcome) -> None:
        """What fold finds out, read when the request ends."""
        self._outcome = outcome
        self._mark("folding")

    def wrote(self) -> None:
        """A part of the response body went out (its time to the first, between the
        next ones)."""
        now = time.perf_counter()
        record = self._record
        if record.first_chunk is None:
            record.first_chunk = now - record.started
            self._mark("writing")
        else:
            record.chunk_gaps.append(now - self._last_chunk)
        self._last_chunk = now

    def answer(self, diagnostics: Sequence[Diagnostic]) -> None:
        """The answer's final diagnostics (its events', which fold counted already, are
        merged by maximum, not added, and tool_choice's report)."""
        self._answered = Counter(d.kind for d in diagnostics)

    def remembered(self, written: Written) -> None:
        """What the remember stage did."""
        self._remembered = written
        self.noted(written.notes)

    def prompt(self, tokens: int) -> None:
        """The prompt's length, for a route that only renders it."""
        self._record.prompt_tokens = tokens

    def parsed(self, msg: ParsedMessage, seconds: float) -> None:
        """A text parsed by ``/v1/parse`` (no tool_choice to check: the text is all there is)."""
        record = self._record
        record.parse_seconds, record.parsed = seconds, True
        record.diagnostics.update(d.kind for d in msg.diagnostics)
        record.finish_reason = msg.finish_reason

    def finish(self, metrics: Metrics) -> None:
        """Fill the record from the results, write the log line, count the metrics."""
        record = self._record
        errors: list[str | None] = []
        if self._restored is not None:
            restored = self._restored
            record.reasoning_restored = restored.reasoning
            record.history_changed = restored.changed
            errors.append(restored.error)
        if self._plan is not None:
            plan = self._plan
            record.upstream_wait = plan.tokenize_seconds
            record.prompt_tokens = plan.prompt_tokens
            record.upstream_route = plan.rerouted.header if plan.rerouted is not None else None
        if self._upstream is not None and self._upstream.fell_back:
            record.diagnostics["tool_choice_fallback"] += 1
        if self._figures is not None:
            figures = self._figures
            record.upstream_seconds = figures.seconds
            record.upstream_wait = (record.upstream_wait or 0.0) + figures.waited
            record.chunk_overheads = list(figures.gaps)
        if self._outcome is not None:
            outcome = self._outcome
            record.finish_reason = outcome.finish_reason
            record.diagnostics.update(outcome.diagnostics)
            record.parse_seconds = outcome.parsing.seconds
            if outcome.tokens is not None:
                record.prompt_tokens = outcome.tokens.prompt_tokens
                record.completion_tokens = outcome.tokens.completion_tokens
            self.noted([self._held_back(held) for held in outcome.held_back])
        if self._remembered is not None:
            errors.append(self._remembered.error)
        record.diagnostics |= self._answered
        record.state_error = next((e for e in reversed(errors) if e is not None), None)
        record.finish()
        ACCESS_LOGGER.log(
            request_level(record.status), record.line, extra={FIELDS: record.log_fields()}
        )
        metrics.record(record)
        if self._in_flight is not None:
            self._in_flight.dec()
        if self._spans is not None:
            self._spans.finish(record.status, record.error_type)

    def _held_back(self, held: Diagnostic) -> Note:
        """The line of a call held back from the client, with its arguments."""
        fields = {"event": HELD_BACK, "request": self.request_id, "message": held.message}
        return Note(held.message, {**fields, "arguments": held.text})

    def _mark(self, boundary: str) -> None:
        if self._spans is not None:
            self._spans.mark(boundary)


def observer_of(request: Request) -> RequestObserver:
    """The observer the middleware made for ``request``."""
    observer: RequestObserver = request.state.observer
    return observer
