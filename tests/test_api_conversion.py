"""Requests → canonical conversation and options: the shared vectors plus the rules of api.md §0."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from anthropic.types import ErrorResponse
from openai.types.shared import ErrorObject

from dsmlkit.api import ApiError, InvalidRequest, convert_output, parse_request, to_openai_chat_body
from dsmlkit.api.anthropic import parse_anthropic_request
from dsmlkit.api.anthropic_upstream import to_anthropic_body
from dsmlkit.api.errors import anthropic_error_body, api_error, openai_error_body
from dsmlkit.api.openai import parse_openai_request
from dsmlkit.conversation import RawBlockPart, TextPart
from dsmlkit.render import render, render_conversation

VECTORS = json.loads((Path(__file__).parent / "data" / "conversion.json").read_text("utf-8"))


def _comparable(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool-call arguments compared as JSON values (spacing and escaping may differ)."""
    result = copy.deepcopy(messages)
    for message in result:
        for call in message.get("tool_calls", ()):
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    return result


@pytest.mark.parametrize("vector", VECTORS, ids=[v["id"] for v in VECTORS])
def test_conversion_vector(vector: dict[str, Any]) -> None:
    output = convert_output(parse_request(vector["api"], vector["request"]))
    assert _comparable(output["messages"]) == _comparable(vector["expected_chat_messages"])
    for key, expected in vector.get("expected_params", {}).items():
        actual = output["tools"] if key == "tools" else output["options"][key]
        assert actual == expected, key


# --- helpers ---------------------------------------------------------------------------


def anthropic(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": "deepseek-v4.1", "max_tokens": 256, "messages": messages, **extra}


def openai(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": "deepseek-v4.1", "messages": messages, **extra}


def tool_use(call_id: str, name: str = "Read", **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def oai_call(call_id: str, name: str = "Read", arguments: str = "{}") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def rejects(api: str, body: dict[str, Any]) -> ApiError:
    with pytest.raises(InvalidRequest) as caught:
        parse_request(api, body)
    err = api_error(caught.value)
    assert err.status == 400
    assert err.type == "invalid_request_error"
    return err


# --- Anthropic -------------------------------------------------------------------------


def test_result_without_id_takes_next_unanswered_call() -> None:
    body = anthropic(
        [
            {"role": "assistant", "content": [tool_use("toolu_a"), tool_use("toolu_b")]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_a", "content": "A"},
                    {"type": "tool_result", "content": "B"},
                ],
            },
        ]
    )
    messages = parse_anthropic_request(body).conversation.chat_messages()
    assert [(m["tool_call_id"], m["content"]) for m in messages[1:]] == [
        ("toolu_a", "A"),
        ("toolu_b", "B"),
    ]


def test_result_without_id_and_no_open_call_is_400() -> None:
    body = anthropic(
        [
            {"role": "assistant", "content": [tool_use("toolu_a")]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_a", "content": "A"},
                    {"type": "tool_result", "content": "orphan"},
                ],
            },
        ]
    )
    err = rejects("anthropic", body)
    assert err.param == "messages[1].content[1]"


def test_result_for_unknown_call_is_400() -> None:
    body = anthropic(
        [
            {"role": "assistant", "content": [tool_use("toolu_a")]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x"}]},
        ]
    )
    assert rejects("anthropic", body).param == "messages[1].content[0]"


def test_one_tool_message_per_result_references_first_images_after() -> None:
    image = {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}
    body = anthropic(
        [
            {"role": "assistant", "content": [tool_use("toolu_a"), tool_use("toolu_b")]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_a",
                        "is_error": True,
                        "content": [
                            {"type": "text", "text": "loaded"},
                            image,
                            {"type": "tool_reference", "tool_name": "get_weather"},
                            {"type": "tool_reference", "name": "get_time"},
                        ],
                    },
                    {"type": "tool_result", "tool_use_id": "toolu_b", "content": "B"},
                ],
            },
        ]
    )
    messages = parse_anthropic_request(body).conversation.chat_messages()
    assert messages[1:] == [
        {
            "role": "tool",
            "tool_call_id": "toolu_a",
            "is_error": True,
            "content": [
                {"type": "tool_reference", "name": "get_weather"},
                {"type": "tool_reference", "name": "get_time"},
                {"type": "text", "text": "loaded"},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}],
        },
        {"role": "tool", "tool_call_id": "toolu_b", "content": "B"},
    ]


def test_server_tools_and_blocks_are_left_out_of_the_chat_form_with_notes() -> None:
    """The blocks are kept whole in their places (only a Messages upstream gets them back:
    test_server_blocks_are_written_back_in_their_places); the chat form has no place."""
    body = anthropic(
        [
            {"role": "user", "content": "find"},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "server_tool_use",
                        "id": "srvtoolu_1",
                        "name": "web_search",
                        "input": {},
                    },
                    {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
                    {"type": "text", "text": "found"},
                ],
            },
            {"role": "user", "content": "thanks"},
        ],
        tools=[
            {"type": "web_search_20250305", "name": "web_search"},
            {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"},
            {"name": "Read", "input_schema": {"type": "object"}},
        ],
    )
    req = parse_anthropic_request(body)
    assert [t["function"]["name"] for t in req.conversation.chat_tools()] == ["Read"]
    assert req.conversation.chat_messages()[1] == {"role": "assistant", "content": "found"}
    # One note per dropped item, each naming where it was and what it was.
    dropped = {
        "tools[0]": "web_search",
        "tools[1]": "tool_search_tool_regex",
        "messages[1].content[0]": "server_tool_use",
        "messages[1].content[1]": "web_search_tool_result",
    }
    notes = req.conversation.notes
    assert [note.split(": ", 1)[0] for note in notes] == list(dropped)
    assert all(what in note for note, what in zip(notes, dropped.values(), strict=True))


def test_server_blocks_are_written_back_in_their_places() -> None:
    """An assistant turn's blocks the reader does not read (any type, one new to us too)
    are kept whole between its text runs, and an Anthropic upstream gets them back as
    they came, between the thinking block and the calls (before: a note, or a 400 for
    an unknown type)."""
    use = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "w", "input": {"q": "ä"}}
    found = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}
    new = {"type": "deepseek_note", "note": [1.5, None]}
    call = {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}
    content = [
        {"type": "text", "text": "Search"},
        {"type": "text", "text": "ing."},
        use,
        found,
        {"type": "thinking", "thinking": "Read it.", "signature": "s"},
        new,
        {"type": "text", "text": "Found."},
        call,
    ]
    body = anthropic(
        [
            {"role": "user", "content": "find"},
            {"role": "assistant", "content": content},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]},
        ],
        tools=[{"name": "Read", "input_schema": {"type": "object"}}],
    )
    req = parse_anthropic_request(body)
    turn = req.conversation.messages[1]
    assert turn.parts == (
        TextPart("Searching."),
        RawBlockPart(use),
        RawBlockPart(found),
        RawBlockPart(new),
        TextPart("Found."),
    )
    assert turn.text() == "Searching.\n\nFound."
    assert req.conversation.chat_messages()[1]["content"] == "Searching.\n\nFound."
    written = to_anthropic_body(req)["messages"][1]["content"]
    assert written == [
        {"type": "thinking", "thinking": "Read it.", "signature": ""},
        {"type": "text", "text": "Searching."},
        use,
        found,
        new,
        {"type": "text", "text": "Found."},
        call,
    ]


def test_tool_choice_naming_a_server_tool_is_400() -> None:
    body = anthropic(
        [{"role": "user", "content": "x"}],
        tools=[{"type": "web_search_20250305", "name": "web_search"}],
        tool_choice={"type": "tool", "name": "web_search"},
    )
    assert rejects("anthropic", body).param == "tool_choice.name"


@pytest.mark.parametrize(
    ("thinking", "effort", "mode", "expected_effort"),
    [
        (None, None, "chat", None),
        ({"type": "disabled"}, None, "chat", None),
        ({"type": "enabled", "budget_tokens": 2048}, None, "thinking", None),
        ({"type": "adaptive", "display": "omitted"}, "medium", "thinking", "medium"),
        ({"type": "adaptive"}, "xhigh", "thinking", "xhigh"),
    ],
)
def test_anthropic_thinking_and_effort(
    thinking: dict[str, Any] | None, effort: str | None, mode: str, expected_effort: str | None
) -> None:
    extra: dict[str, Any] = {}
    if thinking is not None:
        extra["thinking"] = thinking
    if effort is not None:
        extra["output_config"] = {"effort": effort}
    req = parse_anthropic_request(anthropic([{"role": "user", "content": "x"}], **extra))
    assert req.render.mode == mode
    assert req.render.reasoning_effort == expected_effort


def test_anthropic_prefill_and_inline_system() -> None:
    body = anthropic(
        [
            {"role": "user", "content": "Write JSON"},
            {"role": "system", "content": [{"type": "text", "text": "Be terse."}]},
            {"role": "assistant", "content": "{"},
        ],
        output_config={"format": {"type": "json_schema", "schema": {"type": "object"}}},
    )
    req = parse_anthropic_request(body)
    assert req.conversation.chat_messages()[1] == {"role": "system", "content": "Be terse."}
    assert req.render.continue_final_message is True
    assert req.render.add_generation_prompt is False
    assert req.conversation.response_format == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": {"type": "object"}},
    }


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m", "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
        (anthropic([]), "messages"),
        (
            anthropic([{"role": "user", "content": [{"type": "search_result"}]}]),
            "messages[0].content[0]",
        ),
        (
            anthropic(
                [
                    {
                        "role": "user",
                        "content": [
                            {"type": "document", "source": {"type": "base64", "data": "JVBE"}}
                        ],
                    }
                ]
            ),
            "messages[0].content[0].source.type",
        ),
        (anthropic([{"role": "bot", "content": "x"}]), "messages[0].role"),
        (anthropic([{"role": "user", "content": 3}]), "messages[0].content"),
        (
            anthropic([{"role": "assistant", "content": [tool_use("a"), tool_use("a")]}]),
            "messages[0].content",
        ),
        (
            anthropic([{"role": "assistant", "content": [tool_use("a", name="bad name")]}]),
            "messages[0].content[0].name",
        ),
        (
            anthropic([{"role": "user", "content": "x"}], tool_choice={"type": "any"}),
            "tool_choice",
        ),
        (
            anthropic(
                [{"role": "user", "content": "x"}],
                tools=[{"name": "a", "input_schema": {}}],
                tool_choice={"type": "tool", "name": "b"},
            ),
            "tool_choice.name",
        ),
        (
            anthropic([{"role": "user", "content": "x"}], tools=[{"name": "a"}]),
            "tools[0].input_schema",
        ),
        (
            anthropic(
                [{"role": "user", "content": "x"}],
                tools=[{"name": "a", "input_schema": {}}, {"name": "a", "input_schema": {}}],
            ),
            "tools[1].name",
        ),
        (anthropic([{"role": "user", "content": "x"}], thinking={"type": "on"}), "thinking.type"),
        (
            anthropic([{"role": "user", "content": "x"}], output_config={"effort": "extreme"}),
            "output_config.effort",
        ),
        (
            anthropic(
                [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image", "source": {"type": "file", "file_id": "f"}},
                        ],
                    }
                ]
            ),
            "messages[0].content[0].source.type",
        ),
    ],
)
def test_anthropic_invalid_requests_name_the_field(body: dict[str, Any], param: str) -> None:
    err = rejects("anthropic", body)
    assert err.param == param
    envelope = anthropic_error_body(err)
    ErrorResponse.model_validate(envelope)
    assert envelope["error"]["message"].startswith(param)


def test_top_level_tool_reference_becomes_its_name() -> None:
    body = anthropic(
        [{"role": "user", "content": [{"type": "tool_reference", "tool_name": "Bash"}]}]
    )
    assert parse_anthropic_request(body).conversation.chat_messages() == [
        {"role": "user", "content": "Bash"}
    ]


def test_defer_loading_is_kept_on_the_tool() -> None:
    body = anthropic(
        [{"role": "user", "content": "x"}],
        tools=[{"name": "a", "input_schema": {"type": "object"}, "defer_loading": True}],
    )
    assert parse_anthropic_request(body).conversation.chat_tools()[0]["defer_loading"] is True


# --- OpenAI ----------------------------------------------------------------------------


def test_tool_message_answering_no_call_is_400() -> None:
    body = openai(
        [
            {"role": "user", "content": "x"},
            {"role": "tool", "tool_call_id": "call_9", "content": "orphan"},
        ]
    )
    err = rejects("openai", body)
    assert err.param == "messages[1].tool_call_id"
    ErrorObject.model_validate(openai_error_body(err)["error"])
    assert openai_error_body(err)["error"]["param"] == "messages[1].tool_call_id"


def test_second_result_for_one_call_is_400() -> None:
    body = openai(
        [
            {"role": "assistant", "content": None, "tool_calls": [oai_call("call_1")]},
            {"role": "tool", "tool_call_id": "call_1", "content": "a"},
            {"role": "tool", "tool_call_id": "call_1", "content": "b"},
        ]
    )
    assert "already has a result" in rejects("openai", body).message


def test_openai_tool_message_with_references_and_reasoning_alias() -> None:
    body = openai(
        [
            {"role": "user", "content": [{"type": "text", "text": "find"}]},
            {
                "role": "assistant",
                "content": None,
                "reasoning": "search first",
                "tool_calls": [oai_call("call_1", "ToolSearch", '{"query": "select:get_weather"}')],
            },
            {
                "role": "tool",
                "tool_call_id": "call_1",
                "content": [{"type": "tool_reference", "tool_name": "get_weather"}],
            },
        ]
    )
    messages = parse_openai_request(body).conversation.chat_messages()
    assert messages[0] == {"role": "user", "content": "find"}
    assert messages[1]["reasoning_content"] == "search first"
    assert messages[2]["content"] == [{"type": "tool_reference", "name": "get_weather"}]


@pytest.mark.parametrize(
    ("extra", "mode", "effort"),
    [
        ({}, "thinking", None),
        ({"reasoning_effort": "none"}, "chat", None),
        ({"reasoning_effort": "minimal"}, "thinking", "minimal"),
        ({"reasoning_effort": "medium"}, "thinking", "medium"),
        ({"reasoning_effort": 60}, "thinking", 60),
        ({"chat_template_kwargs": {"thinking": False}}, "chat", None),
        (
            {"reasoning_effort": "high", "chat_template_kwargs": {"thinking": True}},
            "thinking",
            "high",
        ),
    ],
)
def test_openai_thinking_and_effort(extra: dict[str, Any], mode: str, effort: Any) -> None:
    req = parse_openai_request(openai([{"role": "user", "content": "x"}], **extra))
    assert req.render.mode == mode
    assert req.render.reasoning_effort == effort


def test_openai_options_and_sampling() -> None:
    body = openai(
        [{"role": "user", "content": "x"}],
        tools=[{"type": "function", "function": {"name": "f", "defer_loading": True}}],
        tool_choice="required",
        parallel_tool_calls=False,
        stream=True,
        stream_options={"include_usage": True},
        max_completion_tokens=99,
        temperature=0.5,
        stop="END",
        seed=7,
        top_k=5,
    )
    req = parse_openai_request(body)
    assert req.conversation.chat_tools() == [
        {"type": "function", "function": {"name": "f"}, "defer_loading": True}
    ]
    assert req.include_usage is True
    assert req.max_tokens == 99
    assert req.sampling == {
        "temperature": 0.5,
        "top_k": 5,
        "stop": ["END"],
        "seed": 7,
    }
    assert req.stop_sequences == ("END",)
    chat = to_openai_chat_body(req)
    assert chat["tool_choice"] == "required"
    assert chat["parallel_tool_calls"] is False
    assert chat["chat_template_kwargs"] == {"thinking": True}
    assert "thinking" not in chat
    assert chat["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ([], None),
        ({"messages": [{"role": "user", "content": "x"}]}, "model"),
        (openai([{"role": "function", "content": "x"}]), "messages[0].role"),
        (
            openai([{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]),
            "messages[0].content[0]",
        ),
        (
            openai([{"role": "assistant", "tool_calls": [oai_call("c"), oai_call("c")]}]),
            "messages[0].tool_calls",
        ),
        (openai([{"role": "user", "content": "x"}], n=2), "n"),
        (openai([{"role": "user", "content": "x"}], tool_choice="required"), "tool_choice"),
        (
            openai(
                [{"role": "user", "content": "x"}],
                tools=[{"type": "function", "function": {"name": "f"}}],
                tool_choice={"type": "function", "function": {"name": "g"}},
            ),
            "tool_choice.function.name",
        ),
        (
            openai([{"role": "user", "content": "x"}], tools=[{"type": "custom", "custom": {}}]),
            "tools[0].type",
        ),
        (openai([{"role": "user", "content": "x"}], reasoning_effort="huge"), "reasoning_effort"),
        (openai([{"role": "user", "content": "x"}], reasoning_effort=101), "reasoning_effort"),
        (
            openai([{"role": "user", "content": "x"}], continue_final_message=True),
            "continue_final_message",
        ),
        (
            openai(
                [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}],
                continue_final_message=True,
                add_generation_prompt=True,
            ),
            "add_generation_prompt",
        ),
        (
            openai([{"role": "user", "content": "x"}], response_format={"type": "json_schema"}),
            "response_format.json_schema",
        ),
        (openai([{"role": "user", "content": "x"}], temperature="hot"), "temperature"),
    ],
)
def test_openai_invalid_requests_name_the_field(body: Any, param: str | None) -> None:
    err = rejects("openai", body)
    assert err.param == param
    ErrorObject.model_validate(openai_error_body(err)["error"])


@pytest.mark.parametrize("arguments", ["{oops", "[1]"])
def test_history_arguments_that_are_no_object_are_rendered_raw_with_a_note(arguments: str) -> None:
    body = openai(
        [
            {"role": "assistant", "tool_calls": [oai_call("c", arguments=arguments)]},
            {"role": "user", "content": "x"},
        ]
    )
    req = parse_openai_request(body)
    call = req.conversation.messages[0].tool_calls[0]
    assert call.arguments == {"arguments": arguments}
    assert any(
        note.startswith("messages[0].tool_calls[0].function.arguments")
        for note in req.conversation.notes
    )


def test_history_arguments_may_be_an_object_or_double_encoded() -> None:
    calls = [
        oai_call("c1", arguments=json.dumps('{"a": 1}')),
        {"id": "c2", "type": "function", "function": {"name": "Read", "arguments": {"b": 2}}},
    ]
    message = parse_openai_request(
        openai([{"role": "assistant", "tool_calls": calls}])
    ).conversation.chat_messages()[0]
    assert [json.loads(c["function"]["arguments"]) for c in message["tool_calls"]] == [
        {"a": 1},
        {"b": 2},
    ]


def test_a_request_renders_as_its_canonical_conversation() -> None:
    body = anthropic(
        [{"role": "user", "content": "hi"}],
        system="Be brief.",
        thinking={"type": "enabled", "budget_tokens": 1024},
        output_config={"effort": "max"},
    )
    req = parse_request("anthropic", body, dialect="v4")
    expected = render(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
        dialect="v4",
        mode="thinking",
        reasoning_effort="max",
    )
    assert render_conversation(req.conversation, req.render).prompt == expected.prompt
    assert req.conversation.chat_tools() == []


@pytest.mark.parametrize("dialect", ["v3.2", "v4", "v4.1"])
@pytest.mark.parametrize("mode", ["thinking", "chat"])
@pytest.mark.parametrize("api", ["openai", "responses"])
def test_developer_messages_are_system_instructions_at_their_place(
    api: str, mode: str, dialect: str
) -> None:
    history = [
        {"role": "developer", "content": "Answer in French."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Salut"},
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": "Why?"},
    ]
    if api == "openai":
        body: dict[str, Any] = openai(
            history, thinking={"type": "enabled" if mode == "thinking" else "disabled"}
        )
    else:
        body = {
            "model": "m",
            "input": history,
            "thinking": {"type": "enabled" if mode == "thinking" else "disabled"},
        }
    req = parse_request(api, body, dialect=dialect)
    prompt = render_conversation(req.conversation, req.render).prompt
    as_system = [{**m, "role": "system"} if m["role"] == "developer" else m for m in history]
    assert prompt == render(as_system, dialect=dialect, mode=mode).prompt
    assert "Answer in French." in prompt
    assert "Be brief." in prompt


def test_a_developer_message_with_a_task_is_400() -> None:
    body = openai([{"role": "developer", "content": "d", "task": "query"}])
    error = rejects("openai", body)
    assert error.param == "messages[0].task"
    assert "user message" in str(error)


def test_error_status_types() -> None:
    assert ApiError.for_status(404, "no such model").type == "not_found_error"
    assert ApiError.for_status(418, "teapot").type == "invalid_request_error"
    assert ApiError.for_status(503, "down").type == "api_error"
    assert ApiError.for_status(529, "busy").type == "overloaded_error"
