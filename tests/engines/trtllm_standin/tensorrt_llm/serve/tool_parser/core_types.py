"""Stand-in: the tool parsers' result types (pydantic models and a dataclass, as in
TensorRT-LLM, which adapted them from SGLang)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pydantic import BaseModel


class ToolCallItem(BaseModel):
    """One call, or one piece of a streamed call (``parameters`` is JSON text)."""

    tool_index: int
    name: str | None = None
    parameters: str


class StreamingParseResult(BaseModel):
    normal_text: str = ""
    calls: list[ToolCallItem] = []


@dataclass
class StructureInfo:
    begin: str
    end: str
    trigger: str


GetInfoFunc = Callable[[str], StructureInfo]
