"""The upstream and fold stages: open the upstream request(s) of one answer and turn what
streams back into the parser events the client's answer is written from.

Upstream failures raise :class:`~dsmlkit.errors.UpstreamError` (the pipeline answers them
in the client's API shape: a status before the stream starts, an error event after). What
reaches the client passes a :class:`~.forced.CallGate`; what the model wrote is
remembered under its call ids before the last events go out.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dsmlkit.api import Usage
from dsmlkit.parse import ContentDelta, Diagnostic, Event, OutputEnd, ReasoningDelta, ToolCallEnd
from dsmlkit.server.errors import UpstreamError
from dsmlkit.server.forced import HELD_BACK, CallGate, cut_ending, missing_call
from dsmlkit.server.model_turns import Digests, ModelCall
from dsmlkit.server.plan import UpstreamPlan
from dsmlkit.server.reasoning_store import ReasoningMemory
from dsmlkit.server.reqlog import RequestRecord, log_event
from dsmlkit.server.state import Route
from dsmlkit.server.upstream import UpstreamStream

LOGGER = logging.getLogger("dsmlkit.server")

#: Engine finish reasons that mean the output did not end normally.
_ABORTED = ("abort", "error")


@dataclass
class Outcome:
    """What the upstream reported besides text: usage and a matched stop string."""

    usage: Usage | None = None
    stop_sequence: str | None = None


class Upstream:
    """The upstream requests of one answer, one open at a time (a forced call in thinking
    mode takes two); ``fell_back``: the first was refused and the fallback body sent."""

    def __init__(self, route: Route) -> None:
        self._route = route
        self._streams: list[UpstreamStream] = []
        self.fell_back = False

    async def open(self, plan: UpstreamPlan, record: RequestRecord) -> None:
        """Open the first upstream request; a 400 to a forced choice retries the fallback."""
        try:
            await self._send(plan.upstream_body)
        except UpstreamError as exc:
            if plan.fallback_body is None or exc.status != 400:
                raise
            record.diagnostics["tool_choice_fallback"] += 1
            self.fell_back = True
            await self._send(plan.fallback_body)

    async def follow(self, body: dict[str, Any]) -> None:
        """Close the current request and open the next."""
        self.stream.close()
        await self._send(body)

    async def _send(self, body: dict[str, Any]) -> None:
        route = self._route
        stream = await route.client.open_stream(
            route.endpoint, body, route.key, clients_key=route.forwarded
        )
        self._streams.append(stream)

    @property
    def stream(self) -> UpstreamStream:
        """The open request."""
        return self._streams[-1]

    def finish(self, record: RequestRecord) -> None:
        """Close the open request (if any) and record the upstream's figures."""
        if self._streams:
            self.stream.close()
        streams = self._streams
        record.upstream_seconds = sum(stream.seconds for stream in streams)
        record.upstream_wait = (record.upstream_wait or 0.0) + sum(s.waited for s in streams)
        record.chunk_overheads = [gap for stream in streams for gap in stream.gaps]


async def fold(
    upstream: Upstream,
    plan: UpstreamPlan,
    record: RequestRecord,
    outcome: Outcome,
    memory: ReasoningMemory,
    digests: Digests,
) -> AsyncGenerator[list[list[Event]], None]:
    """Parser events for the upstream's streams, ending with the close() events; what the
    model wrote is remembered under its call ids (short ones with the ``digests`` of the
    conversation it continues) before the last events go out.

    Yields batches: the event lists (one per upstream choice that made any) of one read of
    the upstream body, so that what arrived together is written together; each list stays
    one writer ``feed`` call, so the bytes do not depend on how reads fall.
    """
    answer = AnswerTracker()
    gate = CallGate(plan.req)
    opening = gate.feed(plan.opening)[0]
    if opening:
        answer.add(opening)
        yield [_noted(record, opening)]
    spent = 0  # completion tokens of earlier upstream requests of this answer
    while True:
        finish: str | None = None
        stop_reason: str | None = None
        cut = False
        async for chunks in upstream.stream.batches():
            batch: list[list[Event]] = []
            for chunk in chunks:
                usage = chunk.get("usage")
                if isinstance(usage, Mapping):
                    outcome.usage = _added_usage(outcome.usage, _usage(usage), spent)
                for choice in chunk.get("choices") or ():
                    events, cut = gate.feed(_timed(record, plan.feed, choice))
                    if events:
                        answer.add(events)
                        batch.append(_noted(record, events))
                    if cut:
                        break
                    if choice.get("finish_reason"):
                        finish = str(choice["finish_reason"])
                        said = choice.get("stop_reason")
                        stop_reason = said if isinstance(said, str) else None
                if cut:
                    break
            if batch:
                yield batch
            if cut:
                break
        if cut:
            final = _noted(record, cut_ending())
            break
        if finish is None or finish in _ABORTED:
            said = "" if finish is None else f" (finish_reason {finish!r})"
            raise UpstreamError("broken", f"the upstream stream ended before the output did{said}")
        if stop_reason in plan.req.stop_sequences:
            outcome.stop_sequence = stop_reason
        spent = outcome.usage.completion_tokens if outcome.usage is not None else spent
        follow = plan.resume(finish, stop_reason, spent) if plan.resume else ([], None)
        more = gate.feed(follow[0])[0]
        if more:
            answer.add(more)
            yield [_noted(record, more)]
        if follow[1] is None:
            closing, cut = gate.feed(_timed(record, plan.close, finish))
            final = _noted(record, closing + cut_ending() if cut else closing)
            break
        await upstream.follow(follow[1])
    if outcome.usage is None:
        outcome.usage = Usage(plan.prompt_tokens or 0, 0)
    answer.add(final)
    record.finish_reason = next(e.finish_reason for e in final if isinstance(e, OutputEnd))
    refused = missing_call(plan.req, gate, record.finish_reason, upstream.fell_back)
    if refused is not None:
        raise UpstreamError("broken", refused)
    record.prompt_tokens = outcome.usage.prompt_tokens
    record.completion_tokens = outcome.usage.completion_tokens
    record.state_error = await memory.remember(answer.calls(), digests) or record.state_error
    yield [final]


class AnswerTracker:
    """What the model wrote in one answer, collected from its events for
    :meth:`~.reasoning_store.ReasoningMemory.remember`."""

    def __init__(self) -> None:
        self._reasoning: list[str] = []
        self._content: list[str] = []
        self._calls: list[ToolCallEnd] = []

    def add(self, events: Iterable[Event]) -> None:
        for event in events:
            if isinstance(event, ReasoningDelta):
                self._reasoning.append(event.text)
            elif isinstance(event, ContentDelta):
                self._content.append(event.text)
            elif isinstance(event, ToolCallEnd):
                self._calls.append(event)

    def calls(self) -> dict[str, ModelCall]:
        """What the model wrote, by call id."""
        reasoning, content = "".join(self._reasoning), "".join(self._content)
        return {
            call.id: ModelCall(call.name, call.arguments_json, reasoning, content)
            for call in self._calls
        }


def _timed(record: RequestRecord, step: Callable[[Any], list[Event]], arg: Any) -> list[Event]:
    started = time.perf_counter()
    try:
        return step(arg)
    finally:
        record.parse_seconds += time.perf_counter() - started


def _noted(record: RequestRecord, events: list[Event]) -> list[Event]:
    """Count diagnostics as they pass (what a failed stream still logs); a call held back
    from the client gets a log line of its own, with its arguments."""
    for event in events:
        if isinstance(event, Diagnostic):
            record.diagnostics[event.kind] += 1
            if event.kind == HELD_BACK:
                held = {"event": HELD_BACK, "request": record.id, "message": event.message}
                log_event(LOGGER, logging.WARNING, event.message, {**held, "arguments": event.text})
    return events


def kinds(diagnostics: tuple[Diagnostic, ...]) -> Counter[str]:
    """The kinds of an answer's final diagnostics: its events' (which :func:`fold`
    counted already, so they are merged by maximum, not added) and tool_choice's report.
    Counts kept only on the record (``tool_choice_fallback``) stay."""
    return Counter(d.kind for d in diagnostics)


def _added_usage(before: Usage | None, stage: Usage, spent: int) -> Usage:
    """An answer's usage: the first request's prompt, the completions of all requests."""
    if before is None:
        return stage
    return Usage(before.prompt_tokens, spent + stage.completion_tokens, before.cached_tokens)


def _usage(usage: Mapping[str, Any]) -> Usage:
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None

    def count(value: Any) -> int:
        return value if isinstance(value, int) and value >= 0 else 0

    return Usage(
        count(usage.get("prompt_tokens")), count(usage.get("completion_tokens")), count(cached)
    )
