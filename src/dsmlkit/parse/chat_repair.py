"""Turn a hosted chat endpoint's stream into parser events, repairing leaked DSML (sans-IO).

Some OpenAI-compatible endpoints pass DeepSeek's DSML markup through as text in
``content`` or ``reasoning_content`` instead of returning ``tool_calls``. :class:`ChatRepair`
feeds each of those two texts through its own parser (``start_in="content"``), keeps the
endpoint's proper ``tool_calls`` as they are (under the ids the client is to see), and
merges the three into one event stream of
the shape :mod:`dsmlkit.parse.events` describes: calls numbered 0, 1, 2… in the order they
open, never interleaved. While one source's call is open, everything the other sources
give waits (their calls, and their text too: reasoning an endpoint sends after a leaked
call began comes after that call, not inside it).

A delta's other fields (a hosted endpoint's own, such as the blocks its server tools
return) are not read: with ``pass_fields`` they come out as they came, in one
:class:`~dsmlkit.parse.UpstreamFields` per delta that has any (fields whose value is null
carry nothing and are skipped); without, they are left out.

Events of the upstream's own that are no delta (a hosted Anthropic endpoint's server-tool
blocks, whole: :class:`~dsmlkit.parse.UpstreamBlock`) are given to :meth:`ChatRepair.pass_on`
and queued as the endpoint's calls are: after what came before, and behind a leaked call
still open.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from dsmlkit.parse import (
    ArgumentsDelta,
    ContentDelta,
    Diagnostic,
    Event,
    FinishReason,
    OutputEnd,
    Parser,
    ReasoningDelta,
    ReasoningEnd,
    ToolCallEnd,
    ToolCallStart,
    UpstreamBlock,
    UpstreamFields,
)

#: The fields of a chat-completion delta that are read here.
READ_FIELDS = frozenset(("role", "content", "reasoning_content", "reasoning", "tool_calls"))

Source = Literal["content", "reasoning", "upstream"]
_CALL_EVENTS = (ToolCallStart, ArgumentsDelta, ToolCallEnd)


@dataclass
class _UpstreamCall:
    """A proper tool call the endpoint is streaming (OpenAI ``tool_calls`` deltas)."""

    index: int
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    started: bool = False


class ChatRepair:
    """Folds OpenAI chat-completion chunk deltas into parser events.

    ``new_parser`` makes a parser for leaked text (the request's dialect and tools,
    ``start_in="content"``); ``client_id`` gives the id the client sees for an upstream
    call's id (``""`` when the upstream gave none; see :class:`dsmlkit.server.call_ids.AnswerIds`).
    ``pass_fields``: a delta's fields not read here go on (see the module's docstring).
    """

    def __init__(
        self,
        new_parser: Callable[[], Parser],
        client_id: Callable[[str], str],
        *,
        pass_fields: bool = False,
    ) -> None:
        self._parsers: dict[Source, Parser] = {"content": new_parser(), "reasoning": new_parser()}
        self._client_id = client_id
        self._pass_fields = pass_fields
        self._upstream_calls: dict[int, _UpstreamCall] = {}
        self._current: _UpstreamCall | None = None
        self._queues: dict[Source, deque[Event]] = {
            "content": deque(),
            "reasoning": deque(),
            "upstream": deque(),
        }
        self._owner: Source | None = None  # the source whose call is open
        self._indexes: dict[tuple[Source, int], int] = {}
        self._calls_ended = 0
        self._reasoning: Literal["none", "open", "ended"] = "none"
        self._out: list[Event] = []

    def feed(self, delta: Mapping[str, Any]) -> list[Event]:
        """Events for one ``choices[0].delta`` of the upstream stream."""
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            self._queues["reasoning"].extend(self._parsers["reasoning"].feed(reasoning))
        content = delta.get("content")
        if isinstance(content, str) and content:
            self._queues["content"].extend(self._parsers["content"].feed(content))
        for item in delta.get("tool_calls") or ():
            if isinstance(item, Mapping):
                self._upstream_delta(item)
        self._drain()
        if self._pass_fields:
            other = {k: v for k, v in delta.items() if k not in READ_FIELDS and v is not None}
            if other:
                self._out.append(UpstreamFields(other))
        return self._take()

    def pass_on(self, events: list[UpstreamBlock | Diagnostic]) -> list[Event]:
        """Events for the upstream's own ``events`` (see the module's docstring); the
        endpoint's call in progress has ended (its block came before them)."""
        self._end_upstream_call()
        self._queues["upstream"].extend(events)
        self._drain()
        return self._take()

    def close(self, upstream_finish: str | None) -> list[Event]:
        """The last events, ending with one :class:`OutputEnd`.

        ``upstream_finish`` is the endpoint's finish reason; ``length`` means the output was
        cut off, so a call still open in leaked text is reported, not returned.
        """
        cut_off = upstream_finish == "length"
        for source, parser in self._parsers.items():
            self._queues[source].extend(parser.close("length" if cut_off else "stop"))
        self._end_upstream_call()
        for call in self._upstream_calls.values():
            if not call.started:
                self._queues["upstream"].append(
                    Diagnostic(
                        "upstream_call_without_name",
                        "the upstream streamed a tool call that never got a name",
                        "".join(call.arguments),
                    )
                )
        while True:
            self._drain()
            if not any(self._queues.values()):
                break
            self._owner = None  # the open call was cut off: its source has nothing left
        if upstream_finish not in (None, "stop", "length", "tool_calls"):
            self._out.append(
                Diagnostic(
                    "upstream_finish_reason", f"the upstream finished with {upstream_finish!r}"
                )
            )
        finish: FinishReason = (
            "length" if cut_off else "tool_calls" if self._calls_ended else "stop"
        )
        self._out.append(OutputEnd(finish))
        return self._take()

    # ------------------------------------------------------------------ upstream calls

    def _upstream_delta(self, item: Mapping[str, Any]) -> None:
        index = item.get("index")
        if not isinstance(index, int):
            index = len(self._upstream_calls) if self._current is None else self._current.index
        function = item.get("function") or {}
        call = self._upstream_calls.get(index)
        if call is None:
            self._end_upstream_call()
            call = self._upstream_calls[index] = _UpstreamCall(index)
            self._current = call
        fragment = function.get("arguments") if isinstance(function, Mapping) else None
        fragment = fragment if isinstance(fragment, str) else ""
        if call is not self._current:
            self._queues["upstream"].append(
                Diagnostic(
                    "upstream_call_interleaved",
                    f"arguments for upstream call {index} arrived after a later call began",
                    fragment,
                )
            )
            return
        if isinstance(item.get("id"), str) and not call.id:
            call.id = item["id"]
        name = function.get("name") if isinstance(function, Mapping) else None
        if isinstance(name, str) and not call.name:
            call.name = name
        call.arguments.append(fragment)
        if call.started:
            if fragment:
                self._queues["upstream"].append(ArgumentsDelta(index, fragment))
        elif call.name:
            call.started = True
            call.id = self._client_id(call.id)
            queue = self._queues["upstream"]
            queue.append(ToolCallStart(index, call.id, call.name))
            if "".join(call.arguments):
                queue.append(ArgumentsDelta(index, "".join(call.arguments)))

    def _end_upstream_call(self) -> None:
        call, self._current = self._current, None
        if call is None or not call.started:
            return
        queue = self._queues["upstream"]
        text = "".join(call.arguments)
        if not text.strip():
            queue.append(ArgumentsDelta(call.index, "{}"))
            text = "{}"
        try:
            arguments = json.loads(text)
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            queue.append(
                Diagnostic(
                    "upstream_arguments_not_object",
                    f"the upstream's arguments for {call.name} are not a JSON object",
                    text,
                )
            )
            arguments = {}
        queue.append(ToolCallEnd(call.index, call.id, call.name, arguments, text))

    # ------------------------------------------------------------------ merging

    def _drain(self) -> None:
        progress = True
        while progress:
            progress = False
            for source, queue in self._queues.items():
                while queue:
                    if self._owner not in (None, source):
                        break  # another source's call is open
                    event = queue[0]
                    queue.popleft()
                    self._emit(source, event)
                    progress = True

    def _emit(self, source: Source, event: Event) -> None:
        if isinstance(event, ReasoningDelta) or (
            source == "reasoning" and isinstance(event, ContentDelta)
        ):
            if self._reasoning == "none":
                self._reasoning = "open"
            self._out.append(ReasoningDelta(event.text))
        elif isinstance(event, ContentDelta):
            self._end_reasoning()
            self._out.append(event)
        elif isinstance(event, ToolCallStart):
            self._end_reasoning()
            self._owner = source
            index = self._indexes[source, event.index] = len(self._indexes)
            self._out.append(ToolCallStart(index, event.id, event.name))
        elif isinstance(event, ArgumentsDelta):
            self._out.append(ArgumentsDelta(self._indexes[source, event.index], event.text))
        elif isinstance(event, ToolCallEnd):
            self._owner = None
            self._calls_ended += 1
            index = self._indexes[source, event.index]
            self._out.append(
                ToolCallEnd(index, event.id, event.name, event.arguments, event.arguments_json)
            )
        elif isinstance(event, (Diagnostic, UpstreamBlock)):
            self._out.append(event)
        # ReasoningEnd and OutputEnd of the parts are replaced by the merged stream's own.

    def _end_reasoning(self) -> None:
        """ReasoningEnd once, before the first answer text or call that follows reasoning."""
        if self._reasoning == "open":
            self._reasoning = "ended"
            self._out.append(ReasoningEnd())

    def _take(self) -> list[Event]:
        out, self._out = self._out, []
        return out
