"""dsmlkit as vLLM's DeepSeek reasoning and tool-call parser.

:func:`dsmlkit.integrations.vllm_entry.register` (the ``vllm.general_plugins`` entry
point) registers the classes below by name, so that ``vllm serve …
--enable-auto-tool-choice --tool-call-parser dsmlkit_v41 --reasoning-parser dsmlkit_v41``
composes them into vLLM's own ``DelegatingParser``.

How vLLM drives them (0.33.0, ``vllm/parser/abstract_parser.py``): both classes declare
``engine_based_streaming``, so the serving layer hands each call only the new delta
(no accumulated text). The reasoning parser runs a :class:`ReasoningSplit` until dsmlkit
ends reasoning, then hands the raw rest over (``finish_streaming``) to the tool parser,
which feeds one incremental :class:`~dsmlkit.parse.Parser` per request. Non-streaming,
``extract_reasoning`` and ``extract_tool_calls`` do the same over the whole text.

``adjust_request`` keeps special tokens in the detokenized text (the DSML markers are
special tokens) and, for ``tool_choice`` ``required`` or a named function, or any tool
declared ``strict``, constrains decoding with dsmlkit's structural tag
(:func:`dsmlkit.grammar.structural_tag`).
"""

from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Sequence
from typing import Any

from vllm.entrypoints.generate.base.protocol import (
    DeltaFunctionCall,
    DeltaMessage,
    DeltaToolCall,
    ExtractedToolCallInformation,
    FunctionCall,
    ToolCall,
)
from vllm.entrypoints.openai.chat_completion.protocol import (
    ChatCompletionNamedToolChoiceParam,
    ChatCompletionRequest,
)
from vllm.entrypoints.openai.responses.protocol import ResponsesRequest
from vllm.parser.engine.adapters import ParserEngineToolAdapter
from vllm.reasoning import ReasoningParser
from vllm.sampling_params import StructuredOutputsParams
from vllm.tool_parsers.abstract_tool_parser import ToolParser

from dsmlkit.dialects import DEFAULT_DIALECT, THINK_CLOSE, THINK_OPEN
from dsmlkit.encoding import Encoding
from dsmlkit.integrations.engine_names import dialect_classes
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

_Request = Any  # ChatCompletionRequest | ResponsesRequest (untyped for mypy: vLLM is optional)


def thinking_requested(chat_template_kwargs: dict[str, Any] | None) -> bool:
    """Whether the prompt opens reasoning, read as vLLM's DeepSeek parsers read it.

    ``thinking`` or ``enable_thinking`` decide; neither given means thinking;
    ``reasoning_effort: "none"`` turns it off.
    """
    kwargs = chat_template_kwargs or {}
    if "thinking" in kwargs or "enable_thinking" in kwargs:
        thinking = bool(kwargs.get("thinking") or kwargs.get("enable_thinking"))
    else:
        thinking = True
    return thinking and kwargs.get("reasoning_effort") != "none"


def _delta(events: Sequence[Event]) -> DeltaMessage | None:
    """One vLLM delta for a batch of dsmlkit events (``None`` when it says nothing)."""
    content: list[str] = []
    reasoning: list[str] = []
    calls: list[DeltaToolCall] = []
    for event in events:
        if isinstance(event, ContentDelta):
            content.append(event.text)
        elif isinstance(event, ReasoningDelta):
            reasoning.append(event.text)
        elif isinstance(event, ToolCallStart):
            calls.append(
                DeltaToolCall(
                    index=event.index,
                    id=event.id,
                    type="function",
                    function=DeltaFunctionCall(name=event.name, arguments=""),
                )
            )
        elif isinstance(event, ArgumentsDelta):
            last = calls[-1] if calls else None
            if last is not None and last.index == event.index and last.function is not None:
                last.function.arguments = (last.function.arguments or "") + event.text
            else:
                calls.append(
                    DeltaToolCall(
                        index=event.index, function=DeltaFunctionCall(arguments=event.text)
                    )
                )
    if not (content or reasoning or calls):
        return None
    return DeltaMessage(
        content="".join(content) or None,
        reasoning="".join(reasoning) or None,
        tool_calls=calls,
    )


@functools.lru_cache(maxsize=8)
def _think_token_ids(tokenizer: Any) -> tuple[int | None, int | None]:
    """The ids of ``<think>`` and ``</think>`` (looked up once per tokenizer)."""
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    return vocab.get(THINK_OPEN), vocab.get(THINK_CLOSE)


class DsmlkitReasoningParser(ReasoningParser):
    """Reasoning up to where dsmlkit ends it (``</think>`` or a call opened in reasoning)."""

    dialect = DEFAULT_DIALECT
    engine_based_streaming = True

    def __init__(self, tokenizer: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(tokenizer, *args, **kwargs)
        self._thinking = thinking_requested(kwargs.get("chat_template_kwargs"))
        self._start_id, self._end_id = _think_token_ids(tokenizer)
        self._split: ReasoningSplit | None = ReasoningSplit(self.dialect)
        self._ended = False
        self._after: str | None = None

    @property
    def reasoning_start_str(self) -> str:
        return THINK_OPEN

    @property
    def reasoning_end_str(self) -> str:
        return THINK_CLOSE

    def is_reasoning_end(self, input_ids: Sequence[int]) -> bool:
        """The last think tag in ``input_ids`` decides; with neither, the thinking flag."""
        for token_id in reversed(input_ids):
            if token_id == self._end_id:
                return True
            if token_id == self._start_id:
                return False
        return not self._thinking

    def is_reasoning_end_streaming(self, input_ids: Sequence[int], delta_ids: Any) -> bool:
        return self._end_id is not None and self._end_id in delta_ids

    def extract_content_ids(self, input_ids: list[int]) -> list[int]:
        if self._end_id is not None and self._end_id in input_ids:
            return input_ids[len(input_ids) - input_ids[::-1].index(self._end_id) :]
        return input_ids

    def adjust_request(self, request: _Request) -> _Request:
        request.skip_special_tokens = False
        return request

    def has_engine_confirmed_reasoning_end(self) -> bool:
        return self._ended

    def extract_reasoning(self, model_output: str, request: _Request) -> tuple[str | None, str]:
        if not self._thinking:
            return None, model_output
        split = ReasoningSplit(self.dialect)
        step = split.feed(model_output)
        reasoning, after = step.reasoning, step.after
        if after is None:
            step = split.close()
            reasoning, after = reasoning + step.reasoning, step.after
        return reasoning or None, after or ""

    def extract_reasoning_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_token_ids: Sequence[int],
        current_token_ids: Sequence[int],
        delta_token_ids: Sequence[int],
    ) -> DeltaMessage | None:
        if self._ended or self._split is None:
            return None
        if not self._thinking:
            self._ended, self._after, self._split = True, delta_text, None
            return None
        step = self._split.feed(delta_text)
        if step.after is not None:
            self._ended, self._after, self._split = True, step.after, None
        return DeltaMessage(reasoning=step.reasoning) if step.reasoning else None

    def finish_streaming(self) -> DeltaMessage | None:
        """At the hand-over: the raw text after reasoning. At the end: what was held back."""
        if self._after is not None:
            after, self._after = self._after, None
            return DeltaMessage(content=after) if after else None
        if self._split is None:
            return None
        step, self._split = self._split.close(), None
        if step.after is None:
            return DeltaMessage(reasoning=step.reasoning) if step.reasoning else None
        # Reasoning ended only at the end of the output: parse the rest here.
        rest = Encoding.named(self.dialect).parser()
        tail = _delta(rest.feed(step.after) + rest.close())
        if step.reasoning:
            tail = tail or DeltaMessage()
            tail.reasoning = step.reasoning
        return tail


class DsmlkitToolParser(ParserEngineToolAdapter):
    """DSML tool calls from one incremental dsmlkit parser per request.

    Subclasses vLLM's engine-adapter class only so that vLLM constructs it with the
    request's ``chat_template_kwargs``; none of the engine is used.
    """

    dialect = DEFAULT_DIALECT
    engine_based_streaming = True
    # required/named choices are parsed from DSML (the structural tag makes the model
    # write DSML), not from the JSON that vLLM's generic path would constrain.
    supports_required_and_named = False
    structural_tag_model = None

    def __init__(self, tokenizer: Any, tools: list[Any] | None = None, **kwargs: Any) -> None:
        ToolParser.__init__(self, tokenizer, tools)
        self._thinking = thinking_requested(kwargs.get("chat_template_kwargs"))
        self._tool_dicts = [_tool_dict(tool) for tool in self.tools]
        self._parser: Parser | None = None
        self._skip_reasoning_parsing = False

    @property
    def skip_reasoning_parsing(self) -> bool:
        return self._skip_reasoning_parsing

    @skip_reasoning_parsing.setter
    def skip_reasoning_parsing(self, value: bool) -> None:
        self._skip_reasoning_parsing = value

    def _new_parser(self, request: _Request | None = None) -> Parser:
        tools = self._tool_dicts
        if not tools and request is not None and request.tools:
            tools = [_tool_dict(tool) for tool in request.tools]
        return Encoding.named(self.dialect).parser(tools=tools or None)

    def adjust_request(self, request: _Request) -> _Request:
        request.skip_special_tokens = False
        tag = self._structural_tag(request)
        if tag is not None:
            request.structured_outputs = StructuredOutputsParams(structural_tag=json.dumps(tag))
            if isinstance(request, ResponsesRequest):
                request.text = None
            else:
                request.response_format = None
        return request

    def _structural_tag(self, request: _Request) -> dict[str, Any] | None:
        if not request.tools:
            return None
        choice = request.tool_choice
        tools = [_tool_dict(tool) for tool in request.tools]
        if isinstance(choice, ChatCompletionNamedToolChoiceParam):
            tool_choice = choice.function.name
        elif isinstance(choice, str) and choice in ("required", "auto"):
            tool_choice = choice
        elif getattr(choice, "name", None):
            tool_choice = choice.name
        else:
            return None
        strict = any(tool["function"].get("strict") for tool in tools)
        if tool_choice == "auto" and (not strict or _has_structured_outputs(request)):
            return None
        tag: dict[str, Any] = importlib.import_module("dsmlkit.grammar").structural_tag(
            self.dialect,
            tools,
            tool_choice=tool_choice,
            # vLLM applies the grammar only once the reasoning parser saw reasoning end.
            thinking=False,
            parallel=request.parallel_tool_calls is not False,
        )
        return tag

    def extract_tool_calls(
        self, model_output: str, request: ChatCompletionRequest
    ) -> ExtractedToolCallInformation:
        parser = self._new_parser(request)
        collector = MessageCollector()
        collector.add(parser.feed(model_output))
        collector.add(parser.close())
        message = collector.message()
        calls = [
            ToolCall(
                id=call.id,
                type="function",
                function=FunctionCall(name=call.name, arguments=call.arguments_json),
            )
            for call in message.calls
        ]
        return ExtractedToolCallInformation(
            tools_called=bool(calls), tool_calls=calls, content=message.content or None
        )

    def extract_tool_calls_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_token_ids: Sequence[int],
        current_token_ids: Sequence[int],
        delta_token_ids: Sequence[int],
        request: ChatCompletionRequest,
    ) -> DeltaMessage | None:
        if self._parser is None:
            self._parser = self._new_parser(request)
        return _delta(self._parser.feed(delta_text))

    def finish_streaming(self) -> DeltaMessage | None:
        if self._parser is None:
            return None
        parser, self._parser = self._parser, None
        return _delta(parser.close())


def _tool_dict(tool: Any) -> dict[str, Any]:
    """An OpenAI-style tool dict from vLLM's tool model (Chat or Responses API)."""
    data: dict[str, Any] = (
        tool.model_dump(exclude_none=True) if hasattr(tool, "model_dump") else dict(tool)
    )
    if "function" not in data:  # Responses API FunctionTool: the fields are flat
        data = {"type": "function", "function": {k: v for k, v in data.items() if k != "type"}}
    return data


def _has_structured_outputs(request: _Request) -> bool:
    if getattr(request, "structured_outputs", None) is not None:
        return True
    return getattr(request, "response_format", None) is not None


# The per-dialect classes vLLM constructs, bound here under their class names
# (``DsmlkitV41ToolParser``…), the names :mod:`dsmlkit.integrations.vllm_entry` registers.
dialect_classes(DsmlkitToolParser, "ToolParser", globals())
dialect_classes(DsmlkitReasoningParser, "ReasoningParser", globals())
