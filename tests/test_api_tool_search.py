"""A Claude Code tool-search session through the Anthropic adapter and the V4.1 renderer.

ToolSearch is answered with ``tool_reference`` items, the referenced tool is then called,
and a later turn runs ToolSearch and Read in parallel. Every call must get exactly one
``<tool_result>`` (api.md §0.1, rendering.md §2).
"""

from __future__ import annotations

from typing import Any

from dsmlkit.api import parse_request
from dsmlkit.render import render_conversation

TOOLS = [
    {
        "name": "ToolSearch",
        "description": "Search for or select deferred tools.",
        "input_schema": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "max_results": {"type": "number"}},
            "required": ["query"],
        },
    },
    {
        "name": "Read",
        "description": "Read a file.",
        "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}},
    },
    {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
        "defer_loading": True,
    },
]


def tool_use(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def reference_result(call_id: str) -> dict[str, Any]:
    reference = {"type": "tool_reference", "tool_name": "get_weather"}
    return {"type": "tool_result", "tool_use_id": call_id, "content": [reference]}


SESSION = {
    "model": "deepseek-v4.1",
    "max_tokens": 4096,
    "system": [
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.160; cch=d1d48;"},
        {"type": "text", "text": "You are Claude Code."},
    ],
    "tools": TOOLS,
    "thinking": {"type": "adaptive", "display": "omitted"},
    "output_config": {"effort": "high"},
    "messages": [
        {"role": "user", "content": "Weather in Paris? Then read notes.txt."},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Load the weather tool.", "signature": "s"},
                tool_use("toolu_ts1", "ToolSearch", query="select:get_weather"),
            ],
        },
        {"role": "user", "content": [reference_result("toolu_ts1")]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Call it.", "signature": "s"},
                tool_use("toolu_w", "get_weather", city="Paris"),
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_w", "content": "18C"}],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Both at once.", "signature": "s"},
                tool_use("toolu_ts2", "ToolSearch", query="select:get_weather"),
                tool_use("toolu_r", "Read", file_path="notes.txt"),
            ],
        },
        {
            "role": "user",
            "content": [
                reference_result("toolu_ts2"),
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_r",
                    "content": [{"type": "text", "text": "NOTES-FILE-BODY"}],
                },
            ],
        },
    ],
}


def rendered() -> str:
    req = parse_request("anthropic", SESSION, dialect="v4.1")
    return render_conversation(req.conversation, req.render).prompt


def test_one_tool_message_per_call() -> None:
    messages = parse_request("anthropic", SESSION, dialect="v4.1").conversation.chat_messages()
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert answered == ["toolu_ts1", "toolu_w", "toolu_ts2", "toolu_r"]


def test_exactly_one_tool_result_per_call_on_v41() -> None:
    prompt = rendered()
    assert prompt.count("<tool_result>") == 4
    assert prompt.count("</tool_result>") == 4
    assert "<tool_result>get_weather</tool_result>" in prompt
    assert "<tool_result>18C</tool_result>" in prompt
    parallel = (
        "<tool_result>get_weather</tool_result>\n\n<tool_result>NOTES-FILE-BODY</tool_result>"
    )
    assert prompt.count(parallel) == 1
    assert "x-anthropic-billing-header" not in prompt


def test_reasoning_history_is_kept_with_tools() -> None:
    prompt = rendered()
    for thought in ("Load the weather tool.", "Call it.", "Both at once."):
        assert thought in prompt
    assert prompt.endswith("<｜Assistant｜><think>")
