"""dsmlkit as SGLang's DeepSeek reasoning and tool-call parser.

:func:`register` is the ``sglang.srt.plugins`` entry point (SGLang runs it in every
process, before it parses the command line): it adds ``dsmlkit_v32``, ``dsmlkit_v4`` and
``dsmlkit_v41`` to ``FunctionCallParser.ToolCallParserEnum`` and
``ReasoningParser.DetectorMap`` (and to the name lists behind ``--tool-call-parser`` and
``--reasoning-parser``), so that ``sglang serve … --tool-call-parser dsmlkit_v41
--reasoning-parser dsmlkit_v41`` serves through dsmlkit.

For V4/V4.1 checkpoints SGLang still renders prompts through its ``dsv4``/``dsv41``
chat-encoding adapter (deepseek-recipe); that adapter parses output itself only when its
own DeepSeek parser names are configured, so with these names the output takes SGLang's
text path: the reasoning detector, then the function-call detector, per request.

The reasoning detector runs a :class:`~dsmlkit.integrations.split.ReasoningSplit` and
hands the raw text after reasoning to the tool detector, which feeds one incremental
:class:`~dsmlkit.parse.Parser` per request. For ``tool_choice`` ``required``, a named
function or ``strict`` tools, the structural tag comes from
:func:`dsmlkit.grammar.structural_tag`.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from sglang.srt.function_call.base_format_detector import BaseFormatDetector
from sglang.srt.function_call.core_types import (
    StreamingParseResult,
    StructureInfo,
    ToolCallItem,
)
from sglang.srt.parser.reasoning_parser import BaseReasoningFormatDetector
from sglang.srt.parser.reasoning_parser import (
    StreamingParseResult as ReasoningResult,
)

from dsmlkit.dialects import ASCII_MARKER, MARKER, THINK_CLOSE, THINK_OPEN, get_dialect
from dsmlkit.integrations.engine_names import PARSER_DIALECTS, dialect_classes
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


def register() -> None:
    """Add dsmlkit's parser names to SGLang's tables (safe to call again)."""
    from sglang.srt.function_call import parser_names
    from sglang.srt.function_call.function_call_parser import FunctionCallParser
    from sglang.srt.parser import reasoning_parser_names
    from sglang.srt.parser.reasoning_parser import ReasoningParser

    for name in PARSER_DIALECTS:
        FunctionCallParser.ToolCallParserEnum[name] = TOOL_DETECTORS[name]
        ReasoningParser.DetectorMap[name] = REASONING_DETECTORS[name]
        for names in (
            parser_names.TOOL_CALL_PARSER_NAMES,
            reasoning_parser_names.REASONING_PARSER_NAMES,
        ):
            if name not in names:
                names.append(name)


def _tool_dicts(tools: Sequence[Any] | None) -> list[dict[str, Any]]:
    return [tool.model_dump(exclude_none=True) for tool in tools or ()]


def _split_events(events: Sequence[Event]) -> StreamingParseResult:
    """SGLang's result for a batch of dsmlkit events (calls numbered in output order)."""
    text: list[str] = []
    calls: list[ToolCallItem] = []
    for event in events:
        if isinstance(event, (ContentDelta, ReasoningDelta)):
            text.append(event.text)
        elif isinstance(event, ToolCallStart):
            calls.append(ToolCallItem(tool_index=event.index, name=event.name, parameters=""))
        elif isinstance(event, ArgumentsDelta):
            last = calls[-1] if calls else None
            if last is not None and last.tool_index == event.index:
                last.parameters += event.text
            else:
                calls.append(ToolCallItem(tool_index=event.index, parameters=event.text))
    return StreamingParseResult(normal_text="".join(text), calls=calls)


class DsmlkitDetector(BaseFormatDetector):
    """DSML tool calls from one incremental dsmlkit parser per request."""

    dialect = "v4.1"

    def __init__(self) -> None:
        super().__init__()
        self._parser: Parser | None = None

    def has_tool_call(self, text: str) -> bool:
        return MARKER in text or ASCII_MARKER in text

    def detect_and_parse(self, text: str, tools: list[Any]) -> StreamingParseResult:
        parser = Parser(self.dialect, tools=_tool_dicts(tools) or None)
        collector = MessageCollector()
        collector.add(parser.feed(text))
        collector.add(parser.close())
        message = collector.message()
        calls = [
            ToolCallItem(tool_index=index, name=call.name, parameters=call.arguments_json)
            for index, call in enumerate(message.calls)
        ]
        return StreamingParseResult(normal_text=message.content, calls=calls)

    def parse_streaming_increment(self, new_text: str, tools: list[Any]) -> StreamingParseResult:
        if self._parser is None:
            self._parser = Parser(self.dialect, tools=_tool_dicts(tools) or None)
        return _split_events(self._parser.feed(new_text))

    def finish(self, tools: list[Any]) -> StreamingParseResult:
        if self._parser is None:
            return StreamingParseResult()
        parser, self._parser = self._parser, None
        return _split_events(parser.close())

    def structure_info(self) -> Any:
        dialect = get_dialect(self.dialect)

        def info(name: str) -> StructureInfo:
            return StructureInfo(
                begin=f"{dialect.block_open()}\n{dialect.invoke_open(name)}\n",
                end=f"\n{dialect.invoke_close()}\n{dialect.block_close()}",
                trigger=dialect.block_open(),
            )

        return info

    def get_structural_tag(
        self,
        tools: list[Any] | None = None,
        tool_choice: Any = "auto",
        thinking_mode: bool = False,
        parallel_tool_calls: bool = True,
    ) -> Any:
        """dsmlkit's structural tag for these tools (SGLang compiles it with xgrammar)."""
        from xgrammar import StructuralTag

        function = getattr(tool_choice, "function", None)
        choice = function.name if function is not None else tool_choice
        tag = importlib.import_module("dsmlkit.grammar").structural_tag(
            self.dialect,
            _tool_dicts(tools),
            tool_choice=choice,
            thinking=thinking_mode,
            parallel=parallel_tool_calls,
        )
        return StructuralTag.model_validate(tag)


class DsmlkitReasoningDetector(BaseReasoningFormatDetector):
    """Reasoning up to where dsmlkit ends it; the raw rest goes on to the tool detector."""

    dialect = "v4.1"

    def __init__(
        self,
        stream_reasoning: bool = True,
        force_reasoning: bool = False,
        continue_final_message: bool = False,
        previous_content: str = "",
        force_nonempty_content: bool = False,
    ) -> None:
        super().__init__(
            THINK_OPEN,
            THINK_CLOSE,
            force_reasoning=force_reasoning,
            stream_reasoning=stream_reasoning,
            continue_final_message=continue_final_message,
            previous_content=previous_content,
            reasoning_default="explicit_thinking",
            force_nonempty_content=force_nonempty_content,
        )
        # Reasoning open at the start: forced (the prompt ended with <think>), or left
        # open by a continued assistant message.
        self._split: ReasoningSplit | None = (
            ReasoningSplit(self.dialect) if self._in_reasoning else None
        )
        self._held: list[str] = []  # reasoning, when it is not streamed

    def _result(self, reasoning: str, after: str | None) -> ReasoningResult:
        if not self.stream_reasoning and after is None:
            self._held.append(reasoning)
            return ReasoningResult()
        if self._held:
            reasoning, self._held = "".join(self._held) + reasoning, []
        return ReasoningResult(normal_text=after or "", reasoning_text=reasoning)

    def parse_streaming_increment(self, new_text: str) -> ReasoningResult:
        if self._split is None:
            return ReasoningResult(normal_text=new_text)
        step = self._split.feed(new_text)
        if step.after is not None:
            self._split = None
        return self._result(step.reasoning, step.after)

    def detect_and_parse(self, text: str) -> ReasoningResult:
        if self._split is None:
            return ReasoningResult(normal_text=text)
        split, self._split = self._split, None
        step = split.feed(text)
        if step.after is not None:
            return ReasoningResult(normal_text=step.after, reasoning_text=step.reasoning)
        end = split.close()
        return ReasoningResult(
            normal_text=end.after or "", reasoning_text=step.reasoning + end.reasoning
        )

    def finish(self) -> ReasoningResult:
        if self._split is None:
            return self._result("", "")
        split, self._split = self._split, None
        step = split.close()
        return self._result(step.reasoning, step.after or "")


#: The per-dialect classes SGLang constructs, by parser name, also bound here under their
#: class names (``DsmlkitV41Detector``…).
TOOL_DETECTORS = dialect_classes(DsmlkitDetector, "Detector", globals())
REASONING_DETECTORS = dialect_classes(DsmlkitReasoningDetector, "ReasoningDetector", globals())
