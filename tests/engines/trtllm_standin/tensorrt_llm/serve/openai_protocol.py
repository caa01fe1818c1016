"""Stand-in: the request's tool models (what the parsers receive as ``tools``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel


class FunctionDefinition(BaseModel):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ChatCompletionToolsParam(BaseModel):
    type: Literal["function"] = "function"
    function: FunctionDefinition
