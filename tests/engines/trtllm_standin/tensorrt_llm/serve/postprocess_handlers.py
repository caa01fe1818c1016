"""Stand-in: how the chat post-processor drives the two parsers for one output.

Per output index, the reasoning parser is created on first use from the request's
``chat_template_kwargs`` and its content goes on to the tool parser (created on first use,
only for a request with tools). Streamed, each chunk's text diff goes through
``parse_delta`` then ``parse_streaming_increment``; on the finishing chunk both parsers'
``finish`` results are appended. Whole, ``parse`` then ``detect_and_parse``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tensorrt_llm.llmapi.reasoning_parser import (
    BaseReasoningParser,
    ReasoningParserFactory,
    ReasoningParserResult,
)
from tensorrt_llm.serve.tool_parser.base_tool_parser import BaseToolParser
from tensorrt_llm.serve.tool_parser.core_types import StreamingParseResult, ToolCallItem
from tensorrt_llm.serve.tool_parser.tool_parser_factory import ToolParserFactory


@dataclass(kw_only=True)
class ChatPostprocArgs:
    tools: list[Any] | None = None
    reasoning_parser: str | None = None
    tool_parser: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_parser_dict: dict[int, BaseReasoningParser] = field(default_factory=dict)
    tool_parser_dict: dict[int, BaseToolParser] = field(default_factory=dict)


def apply_reasoning_parser(
    args: ChatPostprocArgs, output_index: int, text: str, streaming: bool, finished: bool = False
) -> tuple[str, str]:
    """``(content, reasoning_content)``."""
    if args.reasoning_parser is None:
        return text, ""
    if output_index not in args.reasoning_parser_dict:
        args.reasoning_parser_dict[output_index] = ReasoningParserFactory.create_reasoning_parser(
            args.reasoning_parser, args.chat_template_kwargs
        )
    parser = args.reasoning_parser_dict[output_index]
    if not streaming:
        result = parser.parse(text)
    else:
        result = parser.parse_delta(text)
        if finished:
            end = parser.finish()
            result = ReasoningParserResult(
                content=result.content + end.content,
                reasoning_content=result.reasoning_content + end.reasoning_content,
            )
    return result.content, result.reasoning_content


def apply_tool_parser(
    args: ChatPostprocArgs, output_index: int, text: str, streaming: bool, finished: bool = False
) -> tuple[str, list[ToolCallItem]]:
    """``(normal_text, calls)``."""
    if args.tool_parser is None or args.tools is None:
        return text, []
    if output_index not in args.tool_parser_dict:
        args.tool_parser_dict[output_index] = ToolParserFactory.create_tool_parser(args.tool_parser)
    parser = args.tool_parser_dict[output_index]
    if not streaming:
        result = parser.detect_and_parse(text, args.tools)
    else:
        result = parser.parse_streaming_increment(text, args.tools)
        if finished:
            end = parser.finish(args.tools)
            result = StreamingParseResult(
                normal_text=result.normal_text + end.normal_text, calls=result.calls + end.calls
            )
    return result.normal_text, result.calls
