"""One dialect's encoding: the prompt it writes and the reader of what the model writes back.

An :class:`Encoding` is the one object a caller needs for a dialect (the CLI, the engine
plugins and the server each build one): :meth:`Encoding.render` writes a checked
conversation as the exact prompt, :meth:`Encoding.parser` reads a model output, and
:meth:`Encoding.output_reader` reads the engine's continuation of a rendered prompt,
starting where the prompt leaves the model (inside reasoning or content, or inside a
message the model continues).

>>> from dsmlkit.conversation import build_conversation
>>> encoding = Encoding.named("v4.1")
>>> result = encoding.render(build_conversation([{"role": "user", "content": "Hi"}]))
>>> reader = encoding.output_reader(result)
>>> [type(event).__name__ for event in reader.feed("Hello") + reader.close("stop")]
['ReasoningDelta', 'OutputEnd']
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeGuard

from dsmlkit.conversation.model import Conversation
from dsmlkit.dialects import DEFAULT_DIALECT, Dialect, get_dialect
from dsmlkit.errors import CallerError
from dsmlkit.parse import (
    ArgumentsDelta,
    ContentDelta,
    Event,
    OutputEnd,
    Parser,
    ReasoningDelta,
    StartIn,
    ToolCallEnd,
    ToolCallStart,
)
from dsmlkit.render import RenderCache, RenderOptions, RenderResult, render_conversation


@dataclass(frozen=True)
class Encoding:
    """The prompt writer and output reader of one dialect."""

    dialect: Dialect

    @classmethod
    def named(cls, dialect: str | Dialect = DEFAULT_DIALECT) -> Encoding:
        """The encoding of ``dialect`` (a name such as ``"v4.1"``, or a :class:`Dialect`)."""
        return cls(get_dialect(dialect))

    def render(
        self,
        conversation: Conversation,
        options: RenderOptions | None = None,
        cache: RenderCache | None = None,
    ) -> RenderResult:
        """The exact prompt of ``conversation`` (default options: thinking mode); ``cache``
        keeps what a later request may reuse."""
        options = RenderOptions(self.dialect) if options is None else options
        if options.dialect != self.dialect:
            raise CallerError(
                f"the render options are for {options.dialect.name} but this encoding is "
                f"{self.dialect.name}: make the options with this encoding's dialect"
            )
        return render_conversation(conversation, options, cache)

    def parser(
        self,
        start_in: StartIn = "content",
        *,
        tools: Iterable[Mapping[str, Any]] | None = None,
        strict: bool = False,
        id_factory: Callable[[], str] | None = None,
    ) -> Parser:
        """A fresh parser for one output that starts in ``start_in``; ``tools`` are the
        function objects of the request's tools (for typed arguments)."""
        return Parser(
            self.dialect, start_in=start_in, strict=strict, tools=tools, id_factory=id_factory
        )

    def output_reader(
        self,
        result: RenderResult,
        *,
        tools: Iterable[Mapping[str, Any]] | None = None,
        strict: bool = False,
        id_factory: Callable[[], str] | None = None,
    ) -> OutputReader:
        """A reader of the engine's continuation of ``result``'s prompt.

        When the prompt ends inside a message the model continues (prefill, chat prefix
        completion), the reader first reads that message's text (``result.output_prefix``)
        and drops what it makes of it: the answer holds only what the model added.
        """
        tools = list(tools) if tools is not None else None
        start = result.output_starts_in
        completed = _calls_completed(self.parser(start, tools=tools), result.output_prefix)
        parser = self.parser(start, tools=tools, strict=strict, id_factory=id_factory)
        return OutputReader(parser, result, completed)


class OutputReader:
    """A parser that has read the prompt's ``output_prefix`` first (see
    :meth:`Encoding.output_reader`); ``feed`` and ``close`` are the parser's.

    Text the parser held back at the end of the prefix (a trailing newline, a ``<`` that
    might open a tag) comes out with the first events of the continuation; it is the
    client's own text, so it is cut from them. So are the calls the prefix completes (the
    client's own: a prefill that ends in a tool call), whose last events the parser may
    also hold back until more text comes. A call the prefix opened and left open is the
    model's to finish: it is started again, with the argument fragments the prefix gave
    it, before the continuation's first events. The calls of the answer are numbered from
    0, and it finishes ``tool_calls`` only when it holds one.

    ``completed``: how many calls the prefix completes (:func:`_calls_completed`).
    """

    def __init__(self, parser: Parser, result: RenderResult, completed: int) -> None:
        self._parser = parser
        prefix = result.output_prefix
        events = parser.feed(prefix) if prefix else []
        shown = "".join(e.text for e in events if isinstance(e, ContentDelta | ReasoningDelta))
        plain_text = all(isinstance(e, ContentDelta | ReasoningDelta) for e in events)
        self._held = prefix[len(shown) :] if plain_text and prefix.startswith(shown) else ""
        self._completed = completed
        #: the start and argument fragments of a call the prefix left open, still to send
        self._reopened = [e for e in events if _call_event(e) and e.index >= completed]
        self._called = False  # the answer holds a call (counted once the prefix has one)

    @property
    def in_call(self) -> bool:
        """The parser's :attr:`~dsmlkit.parse.Parser.in_call`."""
        return self._parser.in_call

    def feed(self, text: str) -> list[Event]:
        return self._own(self._cut_held(self._parser.feed(text)))

    def close(self, finish_reason: str | None = None) -> list[Event]:
        return self._own(self._cut_held(self._parser.close(finish_reason)))

    def _own(self, events: list[Event]) -> list[Event]:
        """The answer's events: the prefix's complete calls cut, the others renumbered."""
        if self._reopened:
            events, self._reopened = [*self._reopened, *events], []
        if not self._completed:
            return events  # every call the parser reports is the answer's
        kept: list[Event] = []
        for event in events:
            if _call_event(event):
                if event.index < self._completed:
                    continue
                self._called = True
                event = replace(event, index=event.index - self._completed)
            elif isinstance(event, OutputEnd) and event.finish_reason == "tool_calls":
                event = event if self._called else OutputEnd("stop")
            kept.append(event)
        return kept

    def _cut_held(self, events: list[Event]) -> list[Event]:
        if not self._held:
            return events
        kept: list[Event] = []
        for event in events:
            if self._held and isinstance(event, ContentDelta | ReasoningDelta):
                cut = len(self._held) if event.text.startswith(self._held) else 0
                if not cut and self._held.startswith(event.text):
                    cut = len(event.text)
                self._held = self._held[cut:] if cut else ""
                if cut == len(event.text):
                    continue
                event = type(event)(event.text[cut:])
            elif not isinstance(event, ContentDelta | ReasoningDelta):
                self._held = ""
            kept.append(event)
        return kept


def _call_event(event: Event) -> TypeGuard[ToolCallStart | ArgumentsDelta | ToolCallEnd]:
    return isinstance(event, ToolCallStart | ArgumentsDelta | ToolCallEnd)


def _calls_completed(parser: Parser, prefix: str) -> int:
    """How many calls ``prefix`` completes, read to its end by a fresh ``parser`` (the calls
    complete in order, so they are the first ones)."""
    if not prefix:
        return 0
    events = parser.feed(prefix) + parser.close("stop")
    return sum(isinstance(event, ToolCallEnd) for event in events)
