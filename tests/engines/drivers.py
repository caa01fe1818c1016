"""Drive an engine's own serving classes with one model output, as its server does.

vLLM: ``ParserManager.get_parser`` composes the named parsers; one instance adjusts the
request (as ``OnlineRenderer`` does), a fresh one per response parses it, streamed
through ``ChatStreamProcessor.step`` per detokenized delta, or whole through
``Parser.parse`` (as ``OpenAIServingChat`` does). TRT-LLM: the stand-in's
``postprocess_handlers`` (tests/engines/trtllm_standin), fed text diffs.

Each driver returns ``{"content", "reasoning", "calls": [{"name", "arguments"}]}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tests.engines.vectors import hf_tokenizer, parsed_arguments

#: A tool with one required string parameter: what the forced-choice tests offer.
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


class StreamMerge:
    """Adds up streamed deltas: text appended, tool calls merged by index."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.names: dict[int, str] = {}
        self.arguments: dict[int, list[str]] = {}

    def add_text(self, content: str | None, reasoning: str | None) -> None:
        if content:
            self.content.append(content)
        if reasoning:
            self.reasoning.append(reasoning)

    def add_call(self, index: int, name: str | None, arguments: str | None) -> None:
        self.arguments.setdefault(index, [])
        if name and not self.names.get(index):
            self.names[index] = name
        if arguments:
            self.arguments[index].append(arguments)

    def result(self) -> dict[str, Any]:
        return {
            "content": "".join(self.content),
            "reasoning": "".join(self.reasoning),
            "calls": [
                {"name": self.names.get(i, ""), "arguments": parsed_arguments("".join(parts))}
                for i, parts in sorted(self.arguments.items())
            ],
        }


def vllm_parser_class(tool_parser: str, reasoning_parser: str | None = None) -> Any:
    """The Parser class ``vllm serve`` builds for these flags (after plugins load)."""
    from vllm.parser.parser_manager import ParserManager
    from vllm.plugins import load_general_plugins

    load_general_plugins()
    return ParserManager.get_parser(
        tool_parser_name=tool_parser,
        reasoning_parser_name=reasoning_parser or tool_parser,
        enable_auto_tools=True,
        model_name="deepseek",
        tokenizer=hf_tokenizer(),
    )


def vllm_request(
    parser_cls: Any, tools: list[dict[str, Any]], thinking: bool, **fields: Any
) -> Any:
    """A chat request with the tools, adjusted by the parser as vLLM's renderer does."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    request = ChatCompletionRequest(
        model="deepseek",
        messages=[{"role": "user", "content": "hi"}],
        tools=tools,
        chat_template_kwargs={"thinking": thinking},
        **fields,
    )
    adjusting = parser_cls(
        hf_tokenizer(), request.tools, chat_template_kwargs=request.chat_template_kwargs
    )
    return adjusting.adjust_request(request)


def vllm_stream(
    parser_cls: Any,
    request: Any,
    deltas: Sequence[tuple[str, list[int]]],
    prompt_token_ids: list[int],
) -> dict[str, Any]:
    from vllm.entrypoints.openai.chat_completion.stream_processor import ChatStreamProcessor

    parser = parser_cls(
        hf_tokenizer(), request.tools, chat_template_kwargs=request.chat_template_kwargs
    )
    processor = ChatStreamProcessor(request, parser, enable_auto_tools=True, parser_cls=parser_cls)
    merge = StreamMerge()
    for i, (text, ids) in enumerate(deltas):
        last = i == len(deltas) - 1
        delta, _ = processor.step(text, ids, "stop" if last else None, prompt_token_ids)
        if delta is None:
            continue
        merge.add_text(delta.content, delta.reasoning)
        for call in delta.tool_calls or []:
            function = call.function
            merge.add_call(
                call.index,
                function.name if function else None,
                function.arguments if function else None,
            )
    return merge.result()


def vllm_whole(
    parser_cls: Any, request: Any, text: str, prompt_token_ids: list[int]
) -> dict[str, Any]:
    parser = parser_cls(
        hf_tokenizer(), request.tools, chat_template_kwargs=request.chat_template_kwargs
    )
    parser.set_prompt_token_ids(prompt_token_ids)
    reasoning, content, calls = parser.parse(text, request, enable_auto_tools=True)
    return {
        "content": content or "",
        "reasoning": reasoning or "",
        "calls": [
            {"name": call.name, "arguments": parsed_arguments(call.arguments)}
            for call in calls or []
        ],
    }


def sglang_register() -> None:
    """Run SGLang's general plugins (dsmlkit's entry point among them)."""
    from sglang.srt.plugins import load_plugins

    load_plugins()


def sglang_request(tools: list[dict[str, Any]], thinking: bool, **fields: Any) -> Any:
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest

    return ChatCompletionRequest(
        model="deepseek",
        messages=[{"role": "user", "content": "hi"}],
        tools=tools,
        chat_template_kwargs={"thinking": thinking},
        **fields,
    )


def sglang_stream(
    name: str,
    request: Any,
    deltas: Sequence[tuple[str, list[int]]],
    thinking: bool,
    reasoning_name: str | None = None,
) -> dict[str, Any]:
    """As ``OpenAIServingChat`` streams: reasoning parser first, its normal text to the
    function-call parser, both flushed on the finishing chunk."""
    from sglang.srt.function_call.function_call_parser import FunctionCallParser
    from sglang.srt.parser.reasoning_parser import ReasoningParser

    reasoning_parser = ReasoningParser(
        reasoning_name or name,
        request.stream_reasoning,
        thinking,
        request,
        tokenizer=hf_tokenizer(),
    )
    tool_parser = FunctionCallParser(
        tools=request.tools, tool_call_parser=name, tokenizer=hf_tokenizer()
    )
    merge = StreamMerge()
    for i, (text, _) in enumerate(deltas):
        final = i == len(deltas) - 1
        reasoning, normal = reasoning_parser.parse_stream_chunk(text)
        if final:
            end_reasoning, end_normal = reasoning_parser.parse_stream_end()
            reasoning = (reasoning or "") + (end_reasoning or "")
            normal = (normal or "") + (end_normal or "")
        merge.add_text(None, reasoning)
        normal, calls = tool_parser.parse_stream_chunk(normal or "")
        if final:
            end_text, end_calls = tool_parser.parse_stream_end()
            normal, calls = (normal or "") + end_text, list(calls) + end_calls
        merge.add_text(normal, None)
        for call in calls:
            merge.add_call(call.tool_index, call.name, call.parameters)
    return merge.result()


def sglang_whole(
    name: str, request: Any, text: str, thinking: bool, reasoning_name: str | None = None
) -> dict[str, Any]:
    """As ``OpenAIServingChat`` answers a non-streamed request."""
    from sglang.srt.function_call.function_call_parser import FunctionCallParser
    from sglang.srt.parser.reasoning_parser import ReasoningParser

    reasoning_parser = ReasoningParser(
        model_type=reasoning_name or name,
        stream_reasoning=False,
        force_reasoning=thinking,
        request=request,
        tokenizer=hf_tokenizer(),
    )
    reasoning, text = reasoning_parser.parse_non_stream(text)
    tool_parser = FunctionCallParser(
        request.tools, name, tokenizer=hf_tokenizer(), tool_choice=request.tool_choice
    )
    calls: list[Any] = []
    if tool_parser.has_tool_call(text):
        text, calls = tool_parser.parse_non_stream(text)
    return {
        "content": text or "",
        "reasoning": reasoning or "",
        "calls": [{"name": c.name, "arguments": parsed_arguments(c.parameters)} for c in calls],
    }


def sglang_recipe_stream(
    dialect: str, deltas: Sequence[tuple[str, list[int]]], thinking: bool
) -> dict[str, Any]:
    """SGLang's own V4/V4.1 served path: the ``dsv4``/``dsv41`` chat-encoding adapter's
    ``DeepSeekRecipeOutputParser`` (deepseek-recipe), fed the engine's token ids."""
    from sglang.srt.parser.deepseek_recipe_output import DeepSeekRecipeOutputParser
    from sglang.srt.parser.deepseek_recipe_renderer import DeepSeekRecipe

    recipe = DeepSeekRecipe.from_hf_tokenizer(
        {"v4": "dsv4", "v4.1": "dsv41"}[dialect], hf_tokenizer()
    )
    parser = DeepSeekRecipeOutputParser(
        recipe, thinking_stage=recipe.parse_start(thinking=thinking), parse_tool_calls=True
    )
    merge = StreamMerge()
    pieces = [parser.feed(ids) for _, ids in deltas]
    pieces.append(parser.finish([], {"type": "stop"}))
    for piece in pieces:
        merge.add_text(piece.content, piece.reasoning)
        for call in piece.tool_calls:
            merge.add_call(call.index, call.name, call.arguments)
    return merge.result()


def trtllm_args(name: str, tools: list[dict[str, Any]], thinking: bool) -> Any:
    """TRT-LLM's per-request post-processing state (the stand-in's ``ChatPostprocArgs``),
    with the request's tools as its pydantic models."""
    from tensorrt_llm.serve.openai_protocol import ChatCompletionToolsParam
    from tensorrt_llm.serve.postprocess_handlers import ChatPostprocArgs

    return ChatPostprocArgs(
        tools=[ChatCompletionToolsParam.model_validate(tool) for tool in tools],
        reasoning_parser=name,
        tool_parser=name,
        chat_template_kwargs={"thinking": thinking},
    )


def trtllm_stream(args: Any, deltas: Sequence[str]) -> dict[str, Any]:
    """As TRT-LLM's chat stream post-processor: each text diff through the reasoning
    parser, its content through the tool parser, both finished on the last chunk."""
    from tensorrt_llm.serve.postprocess_handlers import apply_reasoning_parser, apply_tool_parser

    merge = StreamMerge()
    for i, text in enumerate(deltas):
        final = i == len(deltas) - 1
        content, reasoning = apply_reasoning_parser(args, 0, text, True, finished=final)
        merge.add_text(None, reasoning)
        content, calls = apply_tool_parser(args, 0, content, True, finished=final)
        merge.add_text(content, None)
        for call in calls:
            merge.add_call(call.tool_index, call.name, call.parameters)
    return merge.result()


def trtllm_whole(args: Any, text: str) -> dict[str, Any]:
    """As TRT-LLM's non-streamed chat post-processor."""
    from tensorrt_llm.serve.postprocess_handlers import apply_reasoning_parser, apply_tool_parser

    content, reasoning = apply_reasoning_parser(args, 0, text, False)
    content, calls = apply_tool_parser(args, 0, content, False)
    return {
        "content": content,
        "reasoning": reasoning,
        "calls": [{"name": c.name, "arguments": parsed_arguments(c.parameters)} for c in calls],
    }
