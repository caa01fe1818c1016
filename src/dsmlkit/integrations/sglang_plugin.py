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

The reasoning detector hands the raw text after reasoning to the tool detector, which
feeds one incremental :class:`~dsmlkit.parse.Parser` per request; both are the shared
code of :mod:`dsmlkit.integrations.detector` (TensorRT-LLM's plugin uses the same) in
SGLang's types. For ``tool_choice`` ``required``, a named
function or ``strict`` tools, the structural tag comes from
:func:`dsmlkit.grammar.structural_tag`.
"""

from __future__ import annotations

import importlib
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

from dsmlkit.dialects import DEFAULT_DIALECT, THINK_CLOSE, THINK_OPEN
from dsmlkit.integrations.detector import DsmlkitDetectorMixin, ReasoningHandOver, tool_dicts
from dsmlkit.integrations.engine_names import PARSER_DIALECTS, dialect_classes


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


class DsmlkitDetector(DsmlkitDetectorMixin, BaseFormatDetector):
    """DSML tool calls from one incremental dsmlkit parser per request."""

    item_type = ToolCallItem
    result_type = StreamingParseResult
    structure_type = StructureInfo

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
            tool_dicts(tools),
            tool_choice=choice,
            thinking=thinking_mode,
            parallel=parallel_tool_calls,
        )
        return StructuralTag.model_validate(tag)


class DsmlkitReasoningDetector(BaseReasoningFormatDetector):
    """Reasoning up to where dsmlkit ends it; the raw rest goes on to the tool detector."""

    dialect = DEFAULT_DIALECT

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
        self._handover = ReasoningHandOver(
            self.dialect, in_reasoning=self._in_reasoning, stream_reasoning=self.stream_reasoning
        )

    def parse_streaming_increment(self, new_text: str) -> ReasoningResult:
        return _reasoning_result(*self._handover.feed(new_text))

    def detect_and_parse(self, text: str) -> ReasoningResult:
        return _reasoning_result(*self._handover.whole(text))

    def finish(self) -> ReasoningResult:
        return _reasoning_result(*self._handover.finish())


def _reasoning_result(reasoning: str, rest: str) -> ReasoningResult:
    return ReasoningResult(normal_text=rest, reasoning_text=reasoning)


#: The per-dialect classes SGLang constructs, by parser name, also bound here under their
#: class names (``DsmlkitV41Detector``…).
TOOL_DETECTORS = dialect_classes(DsmlkitDetector, "Detector", globals())
REASONING_DETECTORS = dialect_classes(DsmlkitReasoningDetector, "ReasoningDetector", globals())
