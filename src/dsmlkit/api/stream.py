"""The stream folder: parser events → the blocks of a streamed answer, for every API.

Theory of operation
-------------------
A streamed answer is a row of blocks, at most one open at a time: a text block, a
reasoning block, or one tool call (what Anthropic calls a content block and Responses an
output item; OpenAI Chat has no block frames, but its chunks follow the same row).
:meth:`BlockStream._fold` reads a batch of parser events (neighbouring deltas merged,
empty ones dropped), one event at a time, and decides every step once, for all three APIs:

- a delta of the kind the open block takes: more of the open block (one delta frame);
- a ``ContentDelta`` or ``ReasoningDelta`` of another kind: close the open block, open a
  text or reasoning block, then the delta;
- ``ToolCallStart``: close the open block, open the call's block;
- ``ReasoningEnd``: close the open block; ``ToolCallEnd``: close it, the call completed;
- ``UpstreamFields``: the API's frame for them, the open block left open;
- ``UpstreamBlock``: close the open block, then the API's frames of that whole block
  (an API with no place for it: none);
- anything else: nothing written.

Every event but a text delta also goes to the outline (a
:class:`~dsmlkit.parse.MessageCollector` that keeps calls, diagnostics and the finish
reason, not the text), which ``finish`` reads.

How a step is written is the API's: a :class:`Blocks` builder returns, when a block opens,
its start frames and an :class:`Opened` pair of delta writers for that block (one writes
the API's event, the other its SSE frame, already cut at the text by
:class:`~dsmlkit.api.sse.TextFrames`), and when it closes, its stop frames. Start and stop
frames are API events (dicts, or Anthropic's ``(name, data)``); the SSE form frames them
with the builder's :meth:`Blocks.sse`. So the event path (:meth:`BlockStream.feed`) and the
SSE path (:meth:`BlockStream.feed_sse`) are two renderings of one row of decisions, and
a batch of one delta of the open block (the usual streamed batch) is the table's first
case: one type check and one writer call, with no other path for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

from dsmlkit.api.common import ChatRequest, coalesce, response_diagnostics
from dsmlkit.api.sse import json_string
from dsmlkit.errors import CallerError
from dsmlkit.parse import (
    ArgumentsDelta,
    ContentDelta,
    Diagnostic,
    Event,
    MessageCollector,
    ParsedMessage,
    ReasoningDelta,
    ReasoningEnd,
    ToolCallEnd,
    ToolCallStart,
    UpstreamBlock,
    UpstreamFields,
)

Frame = TypeVar("Frame")
#: The kinds of text block: the answer's text, or its reasoning.
TextKind = Literal["content", "reasoning"]
_TextEvent = ContentDelta | ReasoningDelta | ArgumentsDelta
#: The text block each text delta (but a call's arguments) opens.
_OPENS: dict[type[Event], TextKind] = {ContentDelta: "content", ReasoningDelta: "reasoning"}
_CONTINUED_BY: dict[TextKind, type[_TextEvent]] = {
    "content": ContentDelta,
    "reasoning": ReasoningDelta,
}


@dataclass(frozen=True, slots=True)
class Opened(Generic[Frame]):
    """A block just opened: its start frames, and how each of its deltas is written (as
    the API's event, or as its SSE frame; ``None``: the delta writes no frame)."""

    frames: list[Frame]
    event: Callable[[str], Frame | None]
    sse: Callable[[str], str | None]


class Blocks(Protocol[Frame]):
    """How one API writes the block steps (see the module's theory of operation)."""

    def open_text(self, kind: TextKind) -> Opened[Frame]:
        """Open a text or reasoning block."""

    def open_call(self, start: ToolCallStart) -> Opened[Frame]:
        """Open the block of one tool call."""

    def close(self, completed: bool) -> list[Frame]:
        """Close the open block, if any (``completed``: the call got its ``ToolCallEnd``)."""

    def fields(self, event: UpstreamFields) -> list[Frame]:
        """Frames for an upstream's own message fields (an API with no place: none)."""

    def block(self, event: UpstreamBlock) -> list[Frame]:
        """Frames for an upstream's own content block, start to stop, after the open block
        closed (an API with no place: none)."""

    def sse(self, frame: Frame) -> str:
        """One start or stop frame as SSE text."""


def spliced(parts: tuple[str, ...]) -> Callable[[str], str]:
    """The SSE writer of one delta shape: the frame cut at its text, the text escaped."""
    before, after = parts

    def write(text: str) -> str:
        return f"{before}{json_string(text)}{after}"

    return write


class BlockStream(Generic[Frame]):
    """The block folder beneath the three stream classes: :meth:`feed` and
    :meth:`feed_sse` turn parser events into the API's events or SSE frames through one
    :class:`Blocks` builder; ``finish`` (each API's own) ends with :meth:`_end`."""

    def __init__(self, req: ChatRequest, blocks: Blocks[Frame]) -> None:
        self._req = req
        self._blocks = blocks
        # Only calls, diagnostics and the finish reason are kept (text deltas are not):
        # what finish() and diagnostics need.
        self._outline = MessageCollector()
        self._message: ParsedMessage | None = None
        # The delta type that adds to the open block (``()``: none, no block is open),
        # and that block's writers: event, SSE.
        self._continued_by: type[_TextEvent] | tuple[()] = ()
        self._writers: Sequence[Callable[[str], Any]] = ()

    def feed(self, events: Sequence[Event]) -> list[Frame]:
        """Stream events for a batch of parser events (including the ``close()`` events)."""
        return self._fold(events, 0)

    def feed_sse(self, events: Sequence[Event]) -> list[str]:
        """:meth:`feed` as SSE frames, byte for byte (no event dict per text delta)."""
        return self._fold(events, 1)

    @property
    def response(self) -> dict[str, Any] | None:
        """The finished response object the stream ends with (Responses only; else None)."""
        return None

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]:
        """The parser's diagnostics and tool_choice's report (after ``finish``)."""
        if self._message is None:
            raise CallerError("diagnostics are known after finish(); call finish() first")
        return response_diagnostics(self._message, self._req)

    def _fold(self, events: Sequence[Event], form: int) -> list[Any]:
        """A batch as frames: ``form`` 0 the API's events, 1 SSE frames.

        One event at a time: a batch of several is merged, then folded event by event
        (the usual streamed batch is one delta, more of the open block).
        """
        if len(events) != 1:
            out: list[Any] = []
            for one in coalesce(events):
                out += self._fold((one,), form)
            return out
        event = events[0]
        if isinstance(event, self._continued_by):  # more of the open block
            if not event.text:
                return []
            frame = self._writers[form](event.text)
            return [] if frame is None else [frame]
        kind = _OPENS.get(type(event))
        if kind is None:
            self._outline.add([event])
            return self._step(event, form)
        assert isinstance(event, (ContentDelta, ReasoningDelta))
        if not event.text:
            return []
        # text of another kind: a new block
        out = self._render(self._close(), form)
        out += self._open(self._blocks.open_text(kind), _CONTINUED_BY[kind], form)
        frame = self._writers[form](event.text)
        return out if frame is None else [*out, frame]

    def _step(self, event: Event, form: int) -> list[Any]:
        """The block step of an event that is not a text delta."""
        if isinstance(event, ToolCallStart):
            out = self._render(self._close(), form)
            return out + self._open(self._blocks.open_call(event), ArgumentsDelta, form)
        if isinstance(event, ReasoningEnd):
            return self._render(self._close(), form)
        if isinstance(event, ToolCallEnd):
            return self._render(self._close(completed=True), form)
        if isinstance(event, UpstreamFields):
            return self._render(self._blocks.fields(event), form)
        if isinstance(event, UpstreamBlock):
            out = self._render(self._close(), form)
            return out + self._render(self._blocks.block(event), form)
        return []

    def _open(self, opened: Opened[Frame], continued_by: type[_TextEvent], form: int) -> list[Any]:
        """Make ``opened`` the open block: its start frames."""
        self._continued_by = continued_by
        self._writers = (opened.event, opened.sse)
        return self._render(opened.frames, form)

    def _render(self, frames: list[Frame], form: int) -> list[Any]:
        return [*map(self._blocks.sse, frames)] if form else frames

    def _close(self, completed: bool = False) -> list[Frame]:
        """Close the open block (if any): its stop frames."""
        self._continued_by = ()
        return self._blocks.close(completed)

    def _end(self) -> ParsedMessage:
        """The outline's message (after the ``close()`` events): what finish reports."""
        self._message = self._outline.message()
        return self._message
