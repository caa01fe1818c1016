"""Leaked DSML in a Chat Completions answer as a proxy holds it → ``tool_calls`` (sans-IO).

The gateway's own repair (:class:`dsmlkit.parse.chat_repair.ChatRepair`) applied to the
plain dicts of an OpenAI answer: :func:`repair_message` for a whole ``message``,
:class:`StreamLeaks` for the ``delta`` of each streamed chunk. ``reasoning_content`` is kept
as reasoning; a call leaked inside it or the content becomes a tool call; the endpoint's
proper ``tool_calls`` pass through under their own ids. Used by
:mod:`dsmlkit.integrations.litellm`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dsmlkit.dialects import Dialect
from dsmlkit.encoding import Encoding
from dsmlkit.parse import (
    ArgumentsDelta,
    ContentDelta,
    Event,
    MessageCollector,
    OutputEnd,
    Parser,
    ReasoningDelta,
    ToolCallStart,
)
from dsmlkit.parse.chat_repair import ChatRepair
from dsmlkit.parse.parser import _default_id


class StreamLeaks:
    """One streamed answer: each upstream ``delta`` in, the repaired ``delta`` fields out."""

    def __init__(self, dialect: str | Dialect, tools: Any = None) -> None:
        self._repair = _new_repair(dialect, tools)

    def feed(self, delta: Mapping[str, Any]) -> dict[str, Any]:
        """The repaired fields for one chunk's ``delta`` (empty when all is held back)."""
        return _delta_fields(self._repair.feed(delta))

    def close(self, upstream_finish: str | None) -> tuple[dict[str, Any], str]:
        """The last fields and the answer's finish reason (``tool_calls`` once a call ends)."""
        events = self._repair.close(upstream_finish)
        end = events[-1]
        finish = end.finish_reason if isinstance(end, OutputEnd) else "stop"
        return _delta_fields(events), finish


class _LeakParsers:
    """Parsers for leaked text: the model's dialect, the request's tools, in content."""

    def __init__(self, dialect: str | Dialect, tools: Any) -> None:
        self._encoding = Encoding.named(dialect)
        self._tools = tools if isinstance(tools, list) else None

    def __call__(self) -> Parser:
        return self._encoding.parser("content", tools=self._tools)


def _new_repair(dialect: str | Dialect, tools: Any = None) -> ChatRepair:
    """The gateway's repair for one answer of a model in ``dialect``."""
    return ChatRepair(_LeakParsers(dialect, tools), _keep_id)


def _keep_id(upstream_id: str) -> str:
    """An upstream call keeps its id; one it sent without gets a fresh one."""
    return upstream_id or _default_id()


def _delta_fields(events: Sequence[Event]) -> dict[str, Any]:
    """``events`` as the fields of one Chat Completions ``delta``."""
    reasoning: list[str] = []
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    for event in events:
        if isinstance(event, ReasoningDelta):
            reasoning.append(event.text)
        elif isinstance(event, ContentDelta):
            content.append(event.text)
        elif isinstance(event, ToolCallStart):
            calls[event.index] = {
                "index": event.index,
                "id": event.id,
                "type": "function",
                "function": {"name": event.name, "arguments": ""},
            }
        elif isinstance(event, ArgumentsDelta):
            call = calls.setdefault(
                event.index, {"index": event.index, "function": {"arguments": ""}}
            )
            call["function"]["arguments"] += event.text
    fields: dict[str, Any] = {}
    if reasoning:
        fields["reasoning_content"] = "".join(reasoning)
    if content:
        fields["content"] = "".join(content)
    if calls:
        fields["tool_calls"] = list(calls.values())
    return fields


def repair_message(
    message: Mapping[str, Any], finish_reason: str | None, dialect: str | Dialect, tools: Any = None
) -> tuple[dict[str, Any], str]:
    """A whole answer's ``message`` repaired: (``content``, ``reasoning_content``,
    ``tool_calls`` fields, the finish reason)."""
    repair = _new_repair(dialect, tools)
    upstream_calls = [
        {**call, "index": index}
        for index, call in enumerate(message.get("tool_calls") or ())
        if isinstance(call, Mapping)
    ]
    collector = MessageCollector()
    collector.add(repair.feed({**message, "tool_calls": upstream_calls}))
    collector.add(repair.close(finish_reason))
    parsed = collector.message()
    fields: dict[str, Any] = {
        "content": parsed.content or None,
        "reasoning_content": parsed.reasoning or None,
        "tool_calls": [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments_json},
            }
            for c in parsed.calls
        ]
        or None,
    }
    return fields, parsed.finish_reason
