"""Caller mistakes raise InvalidRequest at once, naming the field and saying what to do."""

from __future__ import annotations

from typing import Any

import pytest

from dsmlkit.errors import InvalidRequest
from dsmlkit.render import render

USER = {"role": "user", "content": "Hi"}


def _call(call_id: str | None = "a") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}


def _raises(param: str, words: str, messages: Any, **options: Any) -> None:
    with pytest.raises(InvalidRequest) as caught:
        render(messages, **options)
    assert caught.value.param == param
    assert words in caught.value.message
    assert str(caught.value).startswith(f"{param}: ")


@pytest.mark.parametrize(
    ("messages", "param", "words"),
    [
        ([], "messages", "non-empty list"),
        ({"role": "user"}, "messages", "non-empty list"),
        (["hi"], "messages[0]", "message object"),
        ([{"role": "robot", "content": "x"}], "messages[0].role", "'robot'"),
        ([{"role": "user", "content": 5}], "messages[0].content", "string, null or a list"),
        (
            [USER, {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "audio"}]}],
            "messages[1].content[1]",
            "unsupported content part type 'audio' in a user message",
        ),
        (
            [{"role": "user", "content": [{"type": "tool_reference", "name": "f"}]}],
            "messages[0].content[0]",
            "'tool_reference' in a user message",
        ),
        (
            [{"role": "system", "content": [{"type": "image_url", "image_url": {}}]}, USER],
            "messages[0].content[0]",
            "'image_url' in a system message",
        ),
        ([{"role": "user", "content": [{"type": "text"}]}], "messages[0].content[0].text", "text"),
        (
            [
                USER,
                {"role": "assistant", "tool_calls": [_call()]},
                {"role": "tool", "content": [{}]},
            ],
            "messages[2].content[0]",
            "unsupported content part type None",
        ),
        (
            [
                USER,
                {"role": "assistant", "tool_calls": [_call()]},
                {"role": "tool", "content": [{"type": "tool_reference"}]},
            ],
            "messages[2].content[0].name",
            "tool's 'name'",
        ),
        ([{"role": "developer", "content": ""}], "messages[0].content", "needs text"),
        ([{"role": "user", "content": "x", "task": "dance"}], "messages[0].task", "action"),
        ([{"role": "user", "content": "x", "task": ["action"]}], "messages[0].task", "action"),
        (
            [{"role": "user", "content": "x", "tools": []}],
            "messages[0].tools",
            "system or developer",
        ),
        (
            [USER, {"role": "assistant", "reasoning_content": 3}],
            "messages[1].reasoning_content",
            "string",
        ),
        (
            [USER, {"role": "assistant", "tool_calls": {"id": "a"}}],
            "messages[1].tool_calls",
            "list",
        ),
        (
            [USER, {"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}],
            "messages[1].tool_calls[0].function.name",
            "function name",
        ),
        (
            [USER, {"role": "assistant", "tool_calls": [{"type": "custom", "function": {}}]}],
            "messages[1].tool_calls[0].type",
            "'custom'",
        ),
        (
            [USER, {"role": "assistant", "wo_eos": "yes"}],
            "messages[1].wo_eos",
            "true or false",
        ),
    ],
)
def test_malformed_messages_name_the_field(messages: Any, param: str, words: str) -> None:
    _raises(param, words, messages)


def test_results_never_outnumber_calls() -> None:
    messages = [
        USER,
        {"role": "assistant", "tool_calls": [_call()]},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "tool", "content": "2"},
    ]
    for dialect in ("v3.2", "v4", "v4.1"):
        _raises("messages[3]", "more tool results than", messages, dialect=dialect)


def test_a_tool_result_needs_a_call_to_answer() -> None:
    messages = [
        USER,
        {"role": "assistant", "content": "no calls"},
        {"role": "tool", "content": "r"},
    ]
    _raises("messages[2]", "without tool calls", messages)
    _raises("messages[1]", "without tool calls", [USER, {"role": "tool", "content": "r"}])


def test_a_tool_call_id_must_match_a_call() -> None:
    messages = [
        USER,
        {"role": "assistant", "tool_calls": [_call("a")]},
        {"role": "tool", "tool_call_id": "zzz", "content": "r"},
    ]
    _raises("messages[2].tool_call_id", "'zzz' matches no call", messages)


@pytest.mark.parametrize(
    ("options", "param", "words"),
    [
        ({"dialect": "v5"}, "dialect", "unknown dialect"),
        ({"dialect": 5}, "dialect", "unknown dialect 5"),
        ({"mode": "fast"}, "mode", "thinking or chat"),
        ({"tool_reference": "inline"}, "tool_reference", "name or schema"),
        (
            {"reasoning_effort": "huge"},
            "reasoning_effort",
            "minimal, low, medium, high, xhigh, max",
        ),
        ({"reasoning_effort": "none"}, "reasoning_effort", "mode='chat'"),
        ({"reasoning_effort": 0}, "reasoning_effort", "1 to 100"),
        ({"reasoning_effort": 101}, "reasoning_effort", "1 to 100"),
        ({"reasoning_effort": True}, "reasoning_effort", "unknown reasoning effort"),
        ({"dialect": "v4", "reasoning_effort": 50}, "reasoning_effort", "v4.1"),
        (
            {"dialect": "v4", "reasoning_effort": "xhigh", "effort_table": "release"},
            "effort_table",
            "preview, 0731",
        ),
        ({"dialect": "v3.2", "reasoning_effort": "high"}, "reasoning_effort", "no reasoning"),
        ({"dialect": "v3.2", "effort_table": "preview"}, "effort_table", "no reasoning-effort"),
        ({"dialect": "v4", "template_variant": "compact"}, "template_variant", "official"),
        ({"continue_final_message": True}, "messages", "final assistant message"),
        ({"tools": [{"name": "f", "input_schema": {}}]}, "tools[0]", '"type": "function"'),
        ({"tools": [{"type": "function", "function": {}}]}, "tools[0].function.name", "name"),
        ({"tools": {"type": "function"}}, "tools", "list"),
        (
            {"tools": [{"type": "function", "function": {"name": "f"}, "defer_loading": 1}]},
            "tools[0].defer_loading",
            "true or false",
        ),
        ({"response_format": "json"}, "response_format", "object"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, Any], param: str, words: str) -> None:
    _raises(param, words, [USER], **options)


def test_response_format_given_twice_is_an_error() -> None:
    system = {"role": "system", "content": "S", "response_format": {"type": "json_object"}}
    _raises(
        "response_format",
        "give it once",
        [system, USER],
        response_format={"type": "json_object"},
    )


@pytest.mark.parametrize(
    ("message", "param", "words"),
    [
        ({"role": "latest_reminder", "content": "x"}, "messages[0].role", "v4 or v4.1"),
        ({"role": "user", "content": "x", "task": "action"}, "messages[0].task", "v4 or v4.1"),
        (
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]},
            "messages[0].content[0]",
            "has no image token",
        ),
    ],
)
def test_v32_rejects_what_its_format_lacks(message: dict[str, Any], param: str, words: str) -> None:
    _raises(param, words, [message], dialect="v3.2")
