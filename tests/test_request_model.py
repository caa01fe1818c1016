"""The typed request: one value per API body, one rule per check, one error hierarchy."""

from __future__ import annotations

from typing import Any

import pytest

from dsmlkit.api import ApiError, parse_options, parse_request
from dsmlkit.api.errors import api_error
from dsmlkit.dialects import DEFAULT_DIALECT
from dsmlkit.errors import CallerError, DsmlkitError, InvalidRequest, UsageError
from dsmlkit.render import render, render_conversation
from dsmlkit.server.errors import UpstreamError

CALL = {"id": "call_1", "type": "function", "function": {"name": "shell", "arguments": "{}"}}
TOOLS = [{"type": "function", "function": {"name": "shell", "parameters": {"type": "object"}}}]


def codex_chat_turn() -> list[dict[str, Any]]:
    """What Codex's chat mode replays: the calls, then the text in a second message."""
    return [
        {"role": "user", "content": "list files"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "assistant", "content": "Listing."},
        {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"},
    ]


JOINED_TURN: list[dict[str, Any]] = [
    {"role": "user", "content": "list files"},
    {"role": "assistant", "content": "Listing.", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"},
]


def test_an_api_reader_joins_consecutive_assistant_messages_into_one_turn() -> None:
    split = parse_request("openai", {"model": "m", "messages": codex_chat_turn(), "tools": TOOLS})
    split_prompt = render_conversation(split.conversation, split.render).prompt
    assert split_prompt == render(JOINED_TURN, TOOLS, dialect=DEFAULT_DIALECT).prompt
    assert split_prompt.count("<｜end▁of▁sentence｜>") == 1


def test_render_keeps_consecutive_assistant_messages_apart_as_the_reference_does() -> None:
    messages = [
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "a1"},
        {"role": "assistant", "content": "a2"},
    ]
    prompt = render(messages, dialect="v4.1", mode="chat").prompt
    assert prompt.endswith(
        "<｜User｜>u<｜Assistant｜></think>a1<｜end▁of▁sentence｜>a2<｜end▁of▁sentence｜>"
    )


def test_render_answers_calls_of_a_split_turn() -> None:
    prompt = render(codex_chat_turn(), TOOLS, dialect="v4.1", mode="chat").prompt
    assert prompt.count("<｜end▁of▁sentence｜>") == 2
    assert prompt.endswith(
        "Listing.<｜end▁of▁sentence｜><｜User｜><tool_result>a.txt</tool_result><｜Assistant｜></think>"
    )


def test_an_api_request_with_a_split_assistant_turn_is_accepted() -> None:
    body = {"model": "m", "messages": codex_chat_turn(), "tools": TOOLS}
    req = parse_request("openai", body)
    assert [m.role for m in req.conversation.messages] == ["user", "assistant", "tool"]
    prompt = render_conversation(req.conversation, req.render).prompt
    assert "Listing." in prompt


def test_the_typed_request_gives_the_renderer_and_the_parser_everything() -> None:
    body = {
        "model": "m",
        "max_tokens": 9,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"name": "shell", "input_schema": {"type": "object"}}],
        "thinking": {"type": "enabled", "budget_tokens": 100},
    }
    req = parse_request("anthropic", body, dialect="v4")
    assert req.render.dialect is req.parse.dialect
    assert req.render.dialect.name == "v4"
    assert [tool.name for tool in req.parse.tools] == ["shell"]
    result = render_conversation(req.conversation, req.render)
    parser = req.new_parser(result.output_starts_in)
    events = parser.feed("ok</think>done") + parser.close()
    assert any(getattr(event, "text", "") == "done" for event in events)


def test_parse_options_read_tools_as_the_request_reader_does() -> None:
    tools = [{"name": "a", "input_schema": {}}, {"name": "a", "input_schema": {}}]
    with pytest.raises(InvalidRequest) as caught:
        parse_options("anthropic", tools)
    assert caught.value.param == "tools[1].name"
    assert [t.name for t in parse_options("openai", TOOLS, dialect="v3.2").tools] == ["shell"]


def test_one_error_hierarchy() -> None:
    err = InvalidRequest("bad", "messages[0]")
    assert isinstance(err, CallerError) and not isinstance(err, ApiError)
    assert not hasattr(err, "status")  # the core's errors speak no HTTP; the API layer does
    answered = api_error(err)
    assert (answered.status, answered.type, str(answered)) == (
        400,
        "invalid_request_error",
        "messages[0]: bad",
    )
    assert isinstance(ApiError.for_status(401, "no key"), InvalidRequest)
    assert not isinstance(ApiError.for_status(502, "down"), CallerError)
    for cls in (UpstreamError, UsageError, ApiError):
        assert issubclass(cls, DsmlkitError)


def _history(arguments: str, result: str) -> list[dict[str, Any]]:
    call = {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": arguments}}
    return [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "list files"},
        {"role": "assistant", "content": None, "reasoning_content": "ls", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": result},
    ]


def test_a_resent_history_reads_as_it_did_and_a_changed_message_reads_anew() -> None:
    """Messages sent again at the same place are read once; any change is read again, and a
    message that gave a note gives it every time."""

    def read(messages: list[dict[str, Any]]) -> Any:
        return parse_request("openai", {"model": "m", "messages": messages, "tools": TOOLS})

    first = read(_history('{"cmd": "ls"}', "a.txt"))
    again = read(_history('{"cmd": "ls"}', "a.txt"))
    assert again.conversation == first.conversation
    changed = read(_history('{"cmd": "ls -a"}', "a.txt\n.git"))
    assert changed.conversation.messages[2].tool_calls[0].arguments == {"cmd": "ls -a"}
    assert changed.conversation.messages[3].text() == "a.txt\n.git"
    for _ in range(2):
        noted = read(_history("[1]", "a.txt"))
        assert any("not a JSON object" in note for note in noted.conversation.notes)
