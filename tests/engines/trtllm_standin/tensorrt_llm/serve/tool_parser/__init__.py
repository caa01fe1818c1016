"""Stand-in: ``tensorrt_llm.serve.tool_parser`` exports the factory, as the real one does."""

from tensorrt_llm.serve.tool_parser.tool_parser_factory import ToolParserFactory

__all__ = ["ToolParserFactory"]
