"""The upstream and fold stages: open the upstream request(s) of one answer and turn what
streams back into the parser events the client's answer is written from.

Upstream failures raise :class:`~dsmlkit.errors.UpstreamError` (the pipeline answers them
in the client's API shape: a status before the stream starts, an error event after). What
reaches the client passes a :class:`CallGate`, which lets through only calls to tools the
request declares and enforces ``tool_choice`` and ``parallel_tool_calls`` whatever the
engine wrote (the plan stage's part of forcing a call is :mod:`.forced`).

Neither stage writes the request's log line: :meth:`Upstream.finish` returns the
upstream's figures (:class:`UpstreamFigures`) and :func:`fold` fills its
:class:`Outcome`, which ends with the answer's last events and what the model wrote (for
the remember stage, :mod:`.remember`); the request's observer (:mod:`.observer`) reads
both.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import AsyncGenerator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Any

from dsmlkit.api import ChatRequest, Usage
from dsmlkit.parse import (
    ArgumentsDelta,
    ContentDelta,
    Diagnostic,
    Event,
    OutputEnd,
    ReasoningDelta,
    ToolCallEnd,
    ToolCallStart,
)
from dsmlkit.server.errors import UpstreamError
from dsmlkit.server.model_turns import ModelCall
from dsmlkit.server.readers import Done
from dsmlkit.server.state import Route
from dsmlkit.server.upstream import UpstreamStream
from dsmlkit.server.upstream_kinds import UpstreamPlan

#: Engine finish reasons that mean the output did not end normally.
_ABORTED = ("abort", "error")


class Stopwatch:
    """The time spent inside its ``with`` blocks, summed (``seconds``)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0

    def __enter__(self) -> None:
        self._started = time.perf_counter()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.seconds += time.perf_counter() - self._started


@dataclass
class Outcome:
    """What :func:`fold` found out, filled as it goes (so that an answer that fails midway
    still tells what it did): the usage and matched stop string the upstream reported,
    the finish reason, the diagnostics that passed (``held_back``: those that stand for a
    call kept from the client), the parser's time. Once the answer ended as it should:
    ``tokens``, the usage it reports; ``closing``, its last events (to write after the
    remember stage); ``calls``, what the model wrote, by call id."""

    usage: Usage | None = None
    stop_sequence: str | None = None
    finish_reason: str | None = None
    diagnostics: Counter[str] = field(default_factory=Counter)
    held_back: list[Diagnostic] = field(default_factory=list)
    parsing: Stopwatch = field(default_factory=Stopwatch)
    tokens: Usage | None = None
    closing: list[Event] = field(default_factory=list)
    calls: dict[str, ModelCall] = field(default_factory=dict)


@dataclass(frozen=True)
class UpstreamFigures:
    """The upstream requests of one answer, measured: their time, the part of it spent
    waiting on the upstream (its headers and each read of its stream), and the gateway's
    own time per read."""

    seconds: float
    waited: float
    gaps: tuple[float, ...]


class Upstream:
    """The upstream requests of one answer, one open at a time (a forced call in thinking
    mode takes two), each with ``headers`` (the request id and trace context);
    ``fell_back``: the first was refused and the fallback body sent."""

    def __init__(self, route: Route, headers: Mapping[str, str]) -> None:
        self._route = route
        self._headers = headers
        self._streams: list[UpstreamStream] = []
        self.fell_back = False

    async def open(self, plan: UpstreamPlan) -> None:
        """Open the first upstream request; a 400 to a forced choice retries the fallback."""
        try:
            await self._send(plan.upstream_body)
        except UpstreamError as exc:
            if plan.fallback_body is None or exc.status != 400:
                raise
            self.fell_back = True
            await self._send(plan.fallback_body)

    async def follow(self, body: dict[str, Any]) -> None:
        """Close the current request and open the next."""
        self.stream.close()
        await self._send(body)

    async def _send(self, body: dict[str, Any]) -> None:
        route = self._route
        auth = route.model.kind.auth_headers(route.key)
        stream = await route.client.open_stream(
            route.endpoint, body, auth, self._headers, clients_key=route.forwarded
        )
        self._streams.append(stream)

    @property
    def stream(self) -> UpstreamStream:
        """The open request."""
        return self._streams[-1]

    def finish(self) -> UpstreamFigures:
        """Close the open request (if any); the upstream's figures."""
        if self._streams:
            self.stream.close()
        streams = self._streams
        return UpstreamFigures(
            sum(stream.seconds for stream in streams),
            sum(stream.waited for stream in streams),
            tuple(gap for stream in streams for gap in stream.gaps),
        )


async def fold(
    upstream: Upstream, plan: UpstreamPlan, outcome: Outcome
) -> AsyncGenerator[list[list[Event]], None]:
    """Parser events for the upstream's streams. What it finds out goes into ``outcome``;
    once the answer has ended, the close() events (``outcome.closing``, not yielded: they
    go out after what the model wrote, ``outcome.calls``, is remembered).

    Yields batches: the event lists (one per upstream choice that made any) of one read of
    the upstream body, so that what arrived together is written together; each list stays
    one writer ``feed`` call, so the bytes do not depend on how reads fall.
    """
    reader = plan.reader
    answer = AnswerTracker(hidden=plan.req.omit_reasoning)
    gate = CallGate(plan.req)
    opening = gate.feed(reader.opening)[0]
    if opening:
        answer.add(opening)
        yield [_noted(outcome, opening)]
    spent = 0  # completion tokens of earlier upstream requests of this answer
    while True:
        finish: str | None = None
        stop_reason: str | None = None
        cut = False
        async for chunks in upstream.stream.batches():
            batch: list[list[Event]] = []
            for chunk in chunks:
                usage = reader.usage(chunk)
                if usage is not None:
                    outcome.usage = _added_usage(outcome.usage, usage, spent)
                for choice in reader.choices(chunk):
                    with outcome.parsing:
                        read = reader.feed(choice)
                    events, cut = gate.feed(read)
                    if events:
                        answer.add(events)
                        batch.append(_noted(outcome, events))
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
            final = _noted(outcome, _cut_ending())
            break
        if finish is None or finish in _ABORTED:
            said = "" if finish is None else f" (finish_reason {finish!r})"
            raise UpstreamError("broken", f"the upstream stream ended before the output did{said}")
        if stop_reason in plan.req.stop_sequences:
            outcome.stop_sequence = stop_reason
        spent = outcome.usage.completion_tokens if outcome.usage is not None else spent
        step = reader.after_stream(finish, stop_reason, spent)
        more = gate.feed(step.events)[0]
        if more:
            answer.add(more)
            yield [_noted(outcome, more)]
        if isinstance(step, Done):
            with outcome.parsing:
                closed = reader.close(finish)
            closing, cut = gate.feed(closed)
            final = _noted(outcome, closing + _cut_ending() if cut else closing)
            break
        await upstream.follow(step.body)
    if outcome.usage is None:
        outcome.usage = Usage(plan.prompt_tokens or 0, 0)
    answer.add(final)
    outcome.finish_reason = next(e.finish_reason for e in final if isinstance(e, OutputEnd))
    refused = _missing_call(plan.req, gate, outcome.finish_reason, upstream.fell_back)
    if refused is not None:
        raise UpstreamError("broken", refused)
    outcome.tokens = outcome.usage
    outcome.calls = answer.calls(reader.upstream_ids, reader.reasoning_signature)
    outcome.closing = final


class AnswerTracker:
    """What the model wrote in one answer, collected from its events for the remember
    stage (:mod:`.remember`; ``hidden``: the answer does not
    show its reasoning to the client)."""

    def __init__(self, hidden: bool = False) -> None:
        self._hidden = hidden
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

    def calls(
        self, upstream_ids: Mapping[str, str] | None = None, signature: str | None = None
    ) -> dict[str, ModelCall]:
        """What the model wrote, by call id (with the upstream's own id of a call, when
        ``upstream_ids`` has one, and the upstream's ``signature`` of the reasoning)."""
        reasoning, content = "".join(self._reasoning), "".join(self._content)
        upstream = upstream_ids or {}
        return {
            call.id: ModelCall(
                call.name,
                call.arguments_json,
                reasoning,
                content,
                upstream.get(call.id),
                self._hidden,
                signature,
            )
            for call in self._calls
        }


def _noted(outcome: Outcome, events: list[Event]) -> list[Event]:
    """Count diagnostics as they pass (what a failed stream still logs); a call held back
    from the client is kept as it is (its log line has its arguments)."""
    for event in events:
        if isinstance(event, Diagnostic):
            outcome.diagnostics[event.kind] += 1
            if event.kind == HELD_BACK:
                outcome.held_back.append(event)
    return events


def _added_usage(before: Usage | None, stage: Usage, spent: int) -> Usage:
    """An answer's usage: the first request's prompt, the completions of all requests."""
    if before is None:
        return stage
    return Usage(before.prompt_tokens, spent + stage.completion_tokens, before.cached_tokens)


# --- the gate: what of the answer may reach the client -----------------------------


#: Said when ``parallel_tool_calls: false`` cut further calls from an answer.
CUT_DIAGNOSTIC = Diagnostic(
    "parallel_tool_calls_cut",
    "parallel_tool_calls is false: the answer was cut before its second call",
)
#: The kind of the diagnostic that stands for a call kept from the client (an undeclared
#: tool, or one ``tool_choice`` forbids).
HELD_BACK = "tool_call_held_back"


class CallGate:
    """The calls of one answer that may reach the client, enforced on the parser's events.

    * Only calls to tools the request declares pass (deferred ones included); a request
      without tools lets no call through.
    * ``tool_choice`` ``none`` lets no call through; a named function only calls to that
      function.
    * A call held back is taken out whole (start, argument fragments, end) and stands as
      one :data:`HELD_BACK` diagnostic naming it and the rule it broke, whose ``text`` is
      the arguments as the model wrote them: kept, not dropped.
    * ``parallel_tool_calls: false``: :meth:`feed` stops before a second call that would
      pass and says so (the caller closes the upstream and ends with :func:`_cut_ending`).
    * Calls that pass are numbered 0, 1, … again; an answer whose calls were all held back
      finishes ``stop``, not ``tool_calls``.
    """

    def __init__(self, req: ChatRequest) -> None:
        self._declared = {tool.name for tool in req.conversation.tools}
        self._choice = req.conversation.tool_choice
        self._one_call = req.one_call_only
        self._passing: dict[int, int] = {}  # parser index → client index, of calls let through
        #: parser index → name, the rule it broke, argument fragments
        self._held: dict[int, tuple[str, str, list[str]]] = {}
        #: Calls let through so far, and the names of those held back.
        self.passed = 0
        self.held_back: list[str] = []

    def feed(self, events: Sequence[Event]) -> tuple[list[Event], bool]:
        """``(the events the client may see, whether the answer is cut here)``."""
        out: list[Event] = []
        for event in events:
            if isinstance(event, ToolCallStart):
                broken = self._broken_rule(event.name)
                if broken is not None:
                    self._held[event.index] = (event.name, broken, [])
                    self.held_back.append(event.name)
                    continue
                if self._one_call and self.passed:
                    return out, True
                self._passing[event.index] = self.passed
                self.passed += 1
            elif isinstance(event, ArgumentsDelta) and event.index in self._held:
                self._held[event.index][2].append(event.text)
                continue
            elif isinstance(event, ToolCallEnd) and event.index in self._held:
                out.append(self._diagnostic(event.index))
                continue
            elif isinstance(event, OutputEnd):
                out += [self._diagnostic(index) for index in list(self._held)]  # cut off
                if event.finish_reason == "tool_calls" and not self.passed:
                    event = OutputEnd("stop")
            if isinstance(event, (ToolCallStart, ArgumentsDelta, ToolCallEnd)):
                index = self._passing[event.index]
                if index != event.index:  # only after a call was held back
                    event = replace(event, index=index)
            out.append(event)
        return out, False

    def _broken_rule(self, name: str) -> str | None:
        """Why a call to ``name`` may not reach the client (None: it may)."""
        if not self._declared:
            return "the request declares no tools"
        if self._choice.mode == "none":
            return "tool_choice is none"
        if self._choice.name not in (None, name):
            return f"tool_choice names {self._choice.name!r}"
        if name not in self._declared:
            return "the request declares no tool of that name"
        return None

    def _diagnostic(self, index: int) -> Diagnostic:
        name, broken, fragments = self._held.pop(index)
        return Diagnostic(
            HELD_BACK,
            f"{broken}: the model's call to {name!r} was held back from the client",
            "".join(fragments),
        )


def _missing_call(req: ChatRequest, gate: CallGate, finish: str, fell_back: bool) -> str | None:
    """Why an answer cannot go out: ``tool_choice`` requires a call and none reached the
    client (None: it can). An answer cut off by its length limit goes out as cut off."""
    if not req.requires_call or gate.passed or finish == "length":
        return None
    held = f" (held back: {', '.join(gate.held_back)})" if gate.held_back else ""
    if fell_back:
        return (
            "the upstream rejects a forced tool_choice in thinking mode (it answered 400); "
            f"asked again with tool_choice auto, the model made no call{held}"
        )
    name = req.conversation.tool_choice.name
    wanted = "is required" if name is None else f"names {name!r}"
    made = "no call" if name is None else "no call to it"
    return f"tool_choice {wanted} but the model made {made}{held}"


def _cut_ending() -> list[Event]:
    """The close of an answer cut after its first call."""
    return [CUT_DIAGNOSTIC, OutputEnd("tool_calls")]
