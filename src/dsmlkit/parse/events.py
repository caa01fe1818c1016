"""Events the parser emits, and the message they add up to.

Events are small frozen dataclasses. A stream of events for one model output always has
this shape (``*`` = any number, ``?`` = at most one)::

    (ContentDelta | ReasoningDelta | ReasoningEnd | ToolCallStart | ArgumentsDelta
     | ToolCallEnd | Diagnostic | UpstreamFields | UpstreamBlock)*  OutputEnd

* ``ReasoningEnd`` comes at most once, after the last ``ReasoningDelta``.
* Every ``ToolCallStart(index=i)`` precedes that call's ``ArgumentsDelta(index=i)``
  fragments; calls are numbered 0, 1, 2... in order and never interleave.
* A call that completed gets ``ToolCallEnd(index=i)``; the concatenation of its
  ``ArgumentsDelta`` texts equals ``ToolCallEnd.arguments_json`` exactly. A call that
  started but never completed (output cut off) gets no ``ToolCallEnd``; a
  ``Diagnostic(kind="truncated_call")`` reports it and the finish reason is ``length``.
* ``OutputEnd`` is always last, once, emitted by ``close()``.
* ``UpstreamFields`` never comes from the parser: a hosted chat endpoint's own message
  fields, passed on by :class:`~dsmlkit.parse.chat_repair.ChatRepair` when asked to.
  ``UpstreamBlock`` neither: a hosted Anthropic endpoint's own content block, whole, passed
  on the same way (it never comes inside a call).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from dsmlkit.errors import CallerError

FinishReason = Literal["stop", "length", "tool_calls"]


@dataclass(frozen=True, slots=True)
class ContentDelta:
    """Visible answer text."""

    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """Reasoning (thinking) text."""

    text: str


@dataclass(frozen=True, slots=True)
class ReasoningEnd:
    """Reasoning is over (``</think>`` or a tool call ended it)."""


@dataclass(frozen=True, slots=True)
class ToolCallStart:
    """A tool call opened: its position in the message, id and function name."""

    index: int
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class ArgumentsDelta:
    """The next fragment of a call's arguments JSON text."""

    index: int
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallEnd:
    """A call completed; ``arguments_json`` is the exact concatenation of its fragments."""

    index: int
    id: str
    name: str
    arguments: dict[str, Any] = field(compare=True)
    arguments_json: str


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """Something off-format that was recovered or set aside (never silently dropped).

    ``kind`` is a stable machine-readable name; ``text`` holds any model text that was
    not placed in content, reasoning or a call.
    """

    kind: str
    message: str
    text: str = ""


@dataclass(frozen=True, slots=True)
class UpstreamFields:
    """Fields of a hosted endpoint's message delta that nothing here reads (the blocks its
    server tools return), each value the parsed JSON as it came, for the client."""

    fields: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class UpstreamBlock:
    """A content block of a hosted Anthropic endpoint's answer that nothing here reads (the
    blocks its server tools return: ``server_tool_use``, ``web_search_tool_result`` …),
    each value the parsed JSON as it came, for the client: ``start`` as its
    ``content_block_start`` gave it, its ``deltas`` in order, and the ``block`` whole (the
    deltas applied), for an answer sent at once."""

    start: Mapping[str, Any]
    deltas: tuple[Mapping[str, Any], ...]
    block: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class OutputEnd:
    """The output is over; ``finish_reason`` is what an API should report."""

    finish_reason: FinishReason


Event = (
    ContentDelta
    | ReasoningDelta
    | ReasoningEnd
    | ToolCallStart
    | ArgumentsDelta
    | ToolCallEnd
    | Diagnostic
    | UpstreamFields
    | UpstreamBlock
    | OutputEnd
)


@dataclass(frozen=True)
class ToolCall:
    """A completed tool call."""

    id: str
    name: str
    arguments: dict[str, Any]
    arguments_json: str


@dataclass(frozen=True)
class PlacedBlock:
    """An :class:`UpstreamBlock` of a whole answer: the ``block``, and ``at``, the length of
    the answer's ``content`` that came before it (its place in the text)."""

    at: int
    block: Mapping[str, Any]


@dataclass(frozen=True)
class ParsedMessage:
    """Everything one model output said, collected from its events."""

    content: str
    reasoning: str
    calls: tuple[ToolCall, ...]
    diagnostics: tuple[Diagnostic, ...]
    finish_reason: FinishReason
    #: The upstream's own message fields (:class:`UpstreamFields`), joined over the stream.
    upstream_fields: Mapping[str, Any] = field(default_factory=dict)
    #: The upstream's own content blocks (:class:`UpstreamBlock`), in order, each placed.
    upstream_blocks: tuple[PlacedBlock, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The shape ``dsmlkit parse`` prints."""
        return {
            "content": self.content,
            "reasoning": self.reasoning,
            "calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.calls],
            "diagnostics": [
                {"kind": d.kind, "message": d.message, "text": d.text} for d in self.diagnostics
            ],
            "finish_reason": self.finish_reason,
        }


_EVENT_TYPES: dict[type, str] = {
    ContentDelta: "content",
    ReasoningDelta: "reasoning",
    ReasoningEnd: "reasoning_end",
    ToolCallStart: "tool_call_start",
    ArgumentsDelta: "arguments",
    ToolCallEnd: "tool_call_end",
    Diagnostic: "diagnostic",
    UpstreamFields: "upstream_fields",
    UpstreamBlock: "upstream_block",
    OutputEnd: "output_end",
}


def event_to_json(event: Event) -> dict[str, Any]:
    """A JSON-ready dict for one event: ``{"type": ..., <fields>}``."""
    data: dict[str, Any] = {"type": _EVENT_TYPES[type(event)]}
    for item in fields(event):
        data[item.name] = getattr(event, item.name)
    return data


class MessageCollector:
    """Folds an event stream into a :class:`ParsedMessage` (cheap per event)."""

    def __init__(self) -> None:
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._calls: list[ToolCall] = []
        self._diagnostics: list[Diagnostic] = []
        self._fields: dict[str, Any] = {}
        self._blocks: list[PlacedBlock] = []
        self._finish: FinishReason | None = None

    def add(self, events: list[Event]) -> None:
        for event in events:
            kind = type(event)
            if kind is ArgumentsDelta or kind is ToolCallStart or kind is ReasoningEnd:
                continue
            if isinstance(event, ContentDelta):
                self._content.append(event.text)
            elif isinstance(event, ReasoningDelta):
                self._reasoning.append(event.text)
            elif isinstance(event, ToolCallEnd):
                self._calls.append(
                    ToolCall(event.id, event.name, event.arguments, event.arguments_json)
                )
            elif isinstance(event, Diagnostic):
                self._diagnostics.append(event)
            elif isinstance(event, UpstreamFields):
                self._join(event.fields)
            elif isinstance(event, UpstreamBlock):  # rare: the text so far is measured
                at = sum(map(len, self._content))
                self._blocks.append(PlacedBlock(at, event.block))
            elif isinstance(event, OutputEnd):
                self._finish = event.finish_reason

    def _join(self, fields: Mapping[str, Any]) -> None:
        """A field seen before is continued as a stream continues ``content``: strings and
        lists are joined; any other value replaces the earlier one."""
        for name, value in fields.items():
            before = self._fields.get(name)
            if isinstance(before, str) and isinstance(value, str):
                value = before + value
            elif isinstance(before, list) and isinstance(value, list):
                value = [*before, *value]
            self._fields[name] = value

    def message(self) -> ParsedMessage:
        """The collected message; call after the parser's ``close()`` events were added."""
        if self._finish is None:
            raise CallerError("the event stream has no OutputEnd yet: add the close() events")
        return ParsedMessage(
            content="".join(self._content),
            reasoning="".join(self._reasoning),
            calls=tuple(self._calls),
            diagnostics=tuple(self._diagnostics),
            finish_reason=self._finish,
            upstream_fields=self._fields,
            upstream_blocks=tuple(self._blocks),
        )
