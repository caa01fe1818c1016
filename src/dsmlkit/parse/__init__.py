"""The DSML output parser: one incremental, sans-IO state machine for every dialect."""

from dsmlkit.parse.events import (
    ArgumentsDelta,
    ContentDelta,
    Diagnostic,
    Event,
    FinishReason,
    MessageCollector,
    OutputEnd,
    ParsedMessage,
    ReasoningDelta,
    ReasoningEnd,
    ToolCall,
    ToolCallEnd,
    ToolCallStart,
)

__all__ = [
    "ArgumentsDelta",
    "ContentDelta",
    "Diagnostic",
    "Event",
    "FinishReason",
    "MessageCollector",
    "OutputEnd",
    "ParsedMessage",
    "ReasoningDelta",
    "ReasoningEnd",
    "ToolCall",
    "ToolCallEnd",
    "ToolCallStart",
]
