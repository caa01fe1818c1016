"""dsmlkit as TensorRT-LLM's DeepSeek tool-call and reasoning parser.

TensorRT-LLM has no plugin entry point: its tool parsers are a plain class dict,
``ToolParserFactory.parsers`` (``tensorrt_llm/serve/tool_parser/tool_parser_factory.py``),
and its reasoning parsers a table filled by the ``register_reasoning_parser`` decorator
(``tensorrt_llm/llmapi/reasoning_parser.py``). ``trtllm-serve`` builds its
``--tool_parser`` and ``--reasoning_parser`` choices from those tables when
``tensorrt_llm/commands/serve.py`` is imported, and click (8.2 and later) copies the choices
then, so a name added afterwards is refused. Hence:

- :func:`register` adds ``dsmlkit_v32``, ``dsmlkit_v4`` and ``dsmlkit_v41`` to both tables;
- :func:`serve` (the ``dsmlkit-trtllm-serve`` console script) calls :func:`register` and
  then runs trtllm-serve's own click command with the same arguments;
- :class:`RegisterInWorkers` is a ``--post_processor_hook`` class: with
  ``--num_postprocess_workers N`` the parsers are built in worker processes, which
  construct the hook once at start; its constructor registers the names there, and it
  passes every chunk through unchanged.

The tool parser is the detector SGLang's plugin uses (:mod:`dsmlkit.integrations.detector`)
in TensorRT-LLM's types; the reasoning parser hands the raw text after reasoning to it.
Whether an output starts in reasoning follows TensorRT-LLM's own ``deepseek_v4`` reasoning
parser: ``chat_template_kwargs`` ``thinking`` or ``enable_thinking`` true; neither means
no reasoning.
"""

from __future__ import annotations

from typing import Any

from tensorrt_llm.llmapi.reasoning_parser import (
    BaseReasoningParser,
    ReasoningParserResult,
    register_reasoning_parser,
)
from tensorrt_llm.serve.tool_parser.base_tool_parser import BaseToolParser
from tensorrt_llm.serve.tool_parser.core_types import (
    StreamingParseResult,
    StructureInfo,
    ToolCallItem,
)

from dsmlkit.dialects import DEFAULT_DIALECT, THINK_CLOSE, THINK_OPEN
from dsmlkit.integrations.detector import DsmlkitDetectorMixin, ReasoningHandOver
from dsmlkit.integrations.engine_names import dialect_classes


def register() -> None:
    """Add dsmlkit's parser names to TensorRT-LLM's tables (safe to call again).

    Run it before ``tensorrt_llm.commands.serve`` is imported, or trtllm-serve's command
    line will not accept the names (:func:`serve` does this)."""
    from tensorrt_llm.serve.tool_parser.tool_parser_factory import ToolParserFactory

    ToolParserFactory.parsers.update(TOOL_PARSERS)
    for name, parser in REASONING_PARSERS.items():
        register_reasoning_parser(name)(parser)


def serve() -> None:
    """``dsmlkit-trtllm-serve``: trtllm-serve, with dsmlkit's parser names accepted."""
    register()
    from tensorrt_llm.commands.serve import main

    main()


class RegisterInWorkers:
    """``--post_processor_hook dsmlkit.integrations.trtllm.RegisterInWorkers``.

    TensorRT-LLM constructs the hook once in each postprocess worker (and in the server
    process), before it parses any output there; the constructor registers dsmlkit's
    names, so the workers can build the parsers. Every chunk passes through unchanged.
    """

    def __init__(self) -> None:
        register()

    def __call__(self, chunk: Any) -> Any:
        from tensorrt_llm.executor.postprocessor_hook import emit

        return emit(chunk.text_diff)


class DsmlkitToolParser(DsmlkitDetectorMixin, BaseToolParser):
    """DSML tool calls from one incremental dsmlkit parser per output."""

    item_type = ToolCallItem
    result_type = StreamingParseResult
    structure_type = StructureInfo
    #: The DSML markers are special tokens: the output must be detokenized with them.
    needs_raw_special_tokens = True

    def supports_structural_tag(self) -> bool:
        # TensorRT-LLM would build the tag from structure_info with a JSON body between
        # the invoke tags, which is not DSML; without one the model writes DSML freely.
        return False


def thinking_requested(chat_template_kwargs: dict[str, Any] | None) -> bool:
    """Whether the output starts in reasoning, read as TensorRT-LLM's ``deepseek_v4``
    reasoning parser reads it (``thinking`` or ``enable_thinking`` true)."""
    kwargs = chat_template_kwargs or {}
    return bool(kwargs.get("thinking") or kwargs.get("enable_thinking"))


class DsmlkitReasoningParser(BaseReasoningParser):
    """Reasoning up to where dsmlkit ends it; the raw rest goes on to the tool parser."""

    dialect = DEFAULT_DIALECT
    needs_raw_special_tokens = True
    reasoning_start = THINK_OPEN
    reasoning_end = THINK_CLOSE

    def __init__(self, *, chat_template_kwargs: dict[str, Any] | None = None) -> None:
        super().__init__(chat_template_kwargs=chat_template_kwargs)
        self._handover = ReasoningHandOver(
            self.dialect, in_reasoning=thinking_requested(chat_template_kwargs)
        )

    def parse(self, text: str) -> ReasoningParserResult:
        return _reasoning_result(*self._handover.whole(text))

    def parse_delta(self, delta_text: str) -> ReasoningParserResult:
        return _reasoning_result(*self._handover.feed(delta_text))

    def finish(self) -> ReasoningParserResult:
        return _reasoning_result(*self._handover.finish())


def _reasoning_result(reasoning: str, rest: str) -> ReasoningParserResult:
    return ReasoningParserResult(content=rest, reasoning_content=reasoning)


#: The per-dialect classes TensorRT-LLM constructs, by parser name, also bound here under
#: their class names (``DsmlkitV41ToolParser``…).
TOOL_PARSERS = dialect_classes(DsmlkitToolParser, "ToolParser", globals())
REASONING_PARSERS = dialect_classes(DsmlkitReasoningParser, "ReasoningParser", globals())
