"""The detector interface SGLang and TensorRT-LLM share, with dsmlkit behind it.

SGLang's function-call detectors (``detect_and_parse``, ``parse_streaming_increment``,
``finish``, ``has_tool_call``, ``structure_info``) were adapted by TensorRT-LLM for its
tool parsers, result types included: ``ToolCallItem(tool_index, name, parameters)`` in a
``StreamingParseResult(normal_text, calls)``. :class:`DsmlkitDetectorMixin` implements that
interface once; each engine's plugin mixes it into the engine's own base class and names
the engine's three types (:attr:`~DsmlkitDetectorMixin.item_type`…).

Both engines also run a reasoning parser before the tool parser and hand it the text after
reasoning; :class:`ReasoningHandOver` is that step with dsmlkit's rules, as plain strings,
for each plugin to wrap in its engine's result type.

Standard library and dsmlkit only: the engines are imported by the plugins, not here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from dsmlkit.dialects import ASCII_MARKER, DEFAULT_DIALECT, MARKER, Dialect, get_dialect
from dsmlkit.encoding import Encoding
from dsmlkit.integrations.split import ReasoningSplit
from dsmlkit.parse import (
    ArgumentsDelta,
    ContentDelta,
    Event,
    MessageCollector,
    Parser,
    ReasoningDelta,
    ToolCallStart,
)


def tool_dicts(tools: Sequence[Any] | None) -> list[dict[str, Any]]:
    """OpenAI-style tool dicts from the engine's pydantic tool models."""
    return [tool.model_dump(exclude_none=True) for tool in tools or ()]


class DsmlkitDetectorMixin:
    """DSML tool calls from one incremental dsmlkit parser per request.

    A subclass names the engine's result types; the engine builds one detector per
    output, so the parser it keeps between increments belongs to one output.
    """

    dialect: ClassVar[str | Dialect] = DEFAULT_DIALECT
    #: The engine's ``ToolCallItem``, ``StreamingParseResult`` and ``StructureInfo``.
    item_type: ClassVar[Callable[..., Any]]
    result_type: ClassVar[Callable[..., Any]]
    structure_type: ClassVar[Callable[..., Any]]

    _parser: Parser | None = None

    def has_tool_call(self, text: str) -> bool:
        return MARKER in text or ASCII_MARKER in text

    def detect_and_parse(self, text: str, tools: list[Any]) -> Any:
        parser = Encoding.named(self.dialect).parser(tools=tool_dicts(tools) or None)
        collector = MessageCollector()
        collector.add(parser.feed(text))
        collector.add(parser.close())
        message = collector.message()
        calls = [
            self.item_type(tool_index=index, name=call.name, parameters=call.arguments_json)
            for index, call in enumerate(message.calls)
        ]
        return self.result_type(normal_text=message.content, calls=calls)

    def parse_streaming_increment(self, new_text: str, tools: list[Any]) -> Any:
        if self._parser is None:
            self._parser = Encoding.named(self.dialect).parser(tools=tool_dicts(tools) or None)
        return self._result(self._parser.feed(new_text))

    def finish(self, tools: list[Any]) -> Any:
        """The output is over: what the parser held back (a call cut short, a partial
        marker that turned out to be text)."""
        if self._parser is None:
            return self.result_type()
        parser, self._parser = self._parser, None
        return self._result(parser.close())

    def structure_info(self) -> Callable[[str], Any]:
        return self._structure_info

    def _structure_info(self, name: str) -> Any:
        dialect = get_dialect(self.dialect)
        return self.structure_type(
            begin=f"{dialect.block_open()}\n{dialect.invoke_open(name)}\n",
            end=f"\n{dialect.invoke_close()}\n{dialect.block_close()}",
            trigger=dialect.block_open(),
        )

    def _result(self, events: Sequence[Event]) -> Any:
        """The engine's result for a batch of dsmlkit events (calls numbered in output
        order; a call's name comes once, its arguments in pieces)."""
        text: list[str] = []
        calls: list[Any] = []
        for event in events:
            if isinstance(event, (ContentDelta, ReasoningDelta)):
                text.append(event.text)
            elif isinstance(event, ToolCallStart):
                calls.append(self.item_type(tool_index=event.index, name=event.name, parameters=""))
            elif isinstance(event, ArgumentsDelta):
                last = calls[-1] if calls else None
                if last is not None and last.tool_index == event.index:
                    last.parameters += event.text
                else:
                    calls.append(self.item_type(tool_index=event.index, parameters=event.text))
        return self.result_type(normal_text="".join(text), calls=calls)


class ReasoningHandOver:
    """Reasoning up to where dsmlkit ends it, then the raw rest for the tool parser.

    One per model output. ``in_reasoning`` says whether the output starts in reasoning
    (the prompt opened it); if not, everything is handed over as it comes. With
    ``stream_reasoning`` false, reasoning is held and given out in one piece when it ends.
    Each method returns ``(reasoning, rest)``.
    """

    def __init__(
        self, dialect: str | Dialect, *, in_reasoning: bool, stream_reasoning: bool = True
    ):
        self._split: ReasoningSplit | None = ReasoningSplit(dialect) if in_reasoning else None
        self._stream = stream_reasoning
        self._held: list[str] = []

    def feed(self, text: str) -> tuple[str, str]:
        """One delta of model output."""
        if self._split is None:
            return "", text
        step = self._split.feed(text)
        if step.after is not None:
            self._split = None
        return self._give(step.reasoning, step.after)

    def whole(self, text: str) -> tuple[str, str]:
        """The whole output at once."""
        if self._split is None:
            return "", text
        split, self._split = self._split, None
        step = split.feed(text)
        if step.after is not None:
            return step.reasoning, step.after
        end = split.close()
        return step.reasoning + end.reasoning, end.after or ""

    def finish(self) -> tuple[str, str]:
        """The output is over (reasoning may end here: a closer held back to the end)."""
        if self._split is None:
            return self._give("", "")
        split, self._split = self._split, None
        step = split.close()
        return self._give(step.reasoning, step.after or "")

    def _give(self, reasoning: str, after: str | None) -> tuple[str, str]:
        if not self._stream and after is None:
            self._held.append(reasoning)
            return "", ""
        if self._held:
            reasoning, self._held = "".join(self._held) + reasoning, []
        return reasoning, after or ""
