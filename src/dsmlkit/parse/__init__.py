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
    UpstreamFields,
    event_to_json,
)
from dsmlkit.parse.parser import Parser, StartIn, parse

__all__ = [
    "ArgumentsDelta",
    "ContentDelta",
    "Diagnostic",
    "Event",
    "FinishReason",
    "MessageCollector",
    "OutputEnd",
    "ParsedMessage",
    "Parser",
    "ReasoningDelta",
    "ReasoningEnd",
    "StartIn",
    "ToolCall",
    "ToolCallEnd",
    "ToolCallStart",
    "UpstreamFields",
    "event_to_json",
    "parse",
]
