"""Stand-in: ``BaseToolParser``, the interface the serving layer calls.

The real base class also carries a JSON streaming implementation for JSON-bodied formats;
DSML parsers override it, so it is not reproduced here.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from tensorrt_llm.serve.tool_parser.core_types import GetInfoFunc, StreamingParseResult


class BaseToolParser(ABC):
    #: The serving layer keeps special tokens in the detokenized text when this is set
    #: (for requests that carry tools).
    needs_raw_special_tokens: bool = False

    def __init__(self) -> None:
        self._buffer = ""
        self.current_tool_id = -1

    @abstractmethod
    def detect_and_parse(self, text: str, tools: list[Any]) -> StreamingParseResult:
        """The whole output at once."""

    def parse_streaming_increment(self, new_text: str, tools: list[Any]) -> StreamingParseResult:
        raise NotImplementedError("the stand-in has no JSON streaming implementation")

    def finish(self, tools: list[Any]) -> StreamingParseResult:
        """Called once when the stream ends; flushes what was held back."""
        return StreamingParseResult()

    @abstractmethod
    def has_tool_call(self, text: str) -> bool: ...

    def supports_structural_tag(self) -> bool:
        return True

    @abstractmethod
    def structure_info(self) -> GetInfoFunc: ...
