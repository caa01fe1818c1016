"""Stand-in: ``ToolParserFactory``: a plain class dict of parser classes by name, looked up
(lower-cased) when a request's output is first parsed. There is no entry point, register
function or environment variable; TensorRT-LLM's own parsers are not reproduced."""

from __future__ import annotations

from tensorrt_llm.serve.tool_parser.base_tool_parser import BaseToolParser


class ToolParserFactory:
    parsers: dict[str, type[BaseToolParser]] = {}  # noqa: RUF012 (a class table, as in TRT-LLM)

    @staticmethod
    def create_tool_parser(tool_parser: str) -> BaseToolParser:
        try:
            parser = ToolParserFactory.parsers[tool_parser.lower()]
        except KeyError as e:
            raise ValueError(
                f"Invalid tool_parser: {tool_parser}\n"
                f"Supported parsers: {list(ToolParserFactory.parsers)}"
            ) from e
        return parser()
