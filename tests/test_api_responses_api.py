"""OpenAI Responses requests → the canonical conversation: byte-identical to Chat, and errors.

Every conversion vector is read by its own API, written out as the Chat Completions body it
stands for, turned into a Responses body here (:func:`to_responses`), and both bodies must
render the same prompt byte for byte in every dialect.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.shared import ErrorObject

from dsmlkit.api import ApiError, parse_request, to_openai_chat_body
from dsmlkit.api.common import ChatRequest
from dsmlkit.api.errors import api_error, openai_error_body
from dsmlkit.api.responses import parse_responses_request, qualified_name
from dsmlkit.errors import InvalidRequest
from dsmlkit.render import render_conversation
from tests.helpers import MarkedSealer

VECTORS = json.loads((Path(__file__).parent / "data" / "conversion.json").read_text("utf-8"))
#: Vectors a Responses body cannot say: Chat's prefill (continue_final_message).
NOT_IN_RESPONSES = {"oai-assistant-prefill-continue": "Responses has no assistant prefill"}
SEALER = MarkedSealer()
#: Field names and values a Responses body is made of (for the fuzz test).
KEYWORDS = (
    "input",
    "tools",
    "tool_choice",
    "reasoning",
    "text",
    "instructions",
    "type",
    "role",
    "content",
    "name",
    "namespace",
    "call_id",
    "arguments",
    "output",
    "function",
    "function_call",
    "function_call_output",
    "message",
    "reasoning_text",
    "input_text",
    "input_image",
    "image_url",
    "summary",
    "encrypted_content",
    "effort",
    "format",
    "json_schema",
    "schema",
    "user",
    "assistant",
    "required",
    "none",
    "auto",
    "text_x",
)


# --- Chat body → Responses body (the conversion a client would make) ------------------------


def _input_parts(content: Any, text_type: str) -> Any:
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if part["type"] == "text":
            parts.append({"type": text_type, "text": part["text"]})
        elif part["type"] == "image_url":
            parts.append({"type": "input_image", "image_url": part["image_url"]["url"]})
        else:
            parts.append(part)  # tool_reference: the dsmlkit extension on both APIs
    return parts


def _items(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for message in messages:
        role = message["role"]
        if role == "assistant":
            if message.get("reasoning_content") is not None:
                reasoning = message["reasoning_content"]
                content = [{"type": "reasoning_text", "text": reasoning}] if reasoning else []
                items.append(
                    {
                        "type": "reasoning",
                        "id": f"rs_{len(items)}",
                        "summary": [],
                        "content": content,
                    }
                )
            text = message.get("content")
            if text is not None:
                output = [{"type": "output_text", "text": text}]
                items.append({"type": "message", "role": "assistant", "content": output})
            elif not (message.get("tool_calls") or message.get("reasoning_content")):
                items.append({"type": "message", "role": "assistant", "content": []})
            for call in message.get("tool_calls") or ():
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call["id"],
                        "name": call["function"]["name"],
                        "arguments": call["function"]["arguments"],
                    }
                )
        elif role == "tool":
            output = message["content"]
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message["tool_call_id"],
                    "output": _input_parts(output, "input_text"),
                }
            )
        else:
            content = _input_parts(message["content"], "input_text")
            items.append({"type": "message", "role": role, "content": content})
    return items


def to_responses(chat: dict[str, Any]) -> dict[str, Any]:
    """The Responses body holding the same conversation and options as a Chat body."""
    messages = chat["messages"]
    body: dict[str, Any] = {"model": chat["model"]}
    if len(messages) > 1 and messages[0]["role"] == "system" and messages[1]["role"] != "system":
        body["instructions"] = messages[0]["content"]
        messages = messages[1:]
    body["input"] = _items(messages)
    tools = []
    for tool in chat.get("tools", ()):
        flat = {"type": "function", **tool["function"]}
        if tool.get("defer_loading"):
            flat["defer_loading"] = True
        tools.append(flat)
    if tools:
        body["tools"] = tools
    choice = chat.get("tool_choice")
    if isinstance(choice, dict):
        body["tool_choice"] = {"type": "function", "name": choice["function"]["name"]}
    elif choice is not None:
        body["tool_choice"] = choice
    if "parallel_tool_calls" in chat:
        body["parallel_tool_calls"] = chat["parallel_tool_calls"]
    fmt = chat.get("response_format")
    if fmt is not None:
        if fmt["type"] == "json_schema":
            body["text"] = {"format": {"type": "json_schema", **fmt["json_schema"]}}
        else:
            body["text"] = {"format": fmt}
    effort = chat.get("reasoning_effort")
    if not chat.get("chat_template_kwargs", {}).get("thinking", True):
        body["reasoning"] = {"effort": "none"}
    elif effort is not None:
        body["reasoning"] = {"effort": effort}
    if "max_tokens" in chat:
        body["max_output_tokens"] = chat["max_tokens"]
    for name in ("temperature", "top_p"):
        if name in chat:
            body[name] = chat[name]
    return body


def _unnamed(req: ChatRequest) -> list[dict[str, Any]]:
    """The canonical messages without ``name`` (Responses messages have none; no DSML
    encoder renders it)."""
    messages = req.conversation.chat_messages()
    return [{k: v for k, v in message.items() if k != "name"} for message in messages]


def _prompt_or_error(req: ChatRequest) -> str:
    """The prompt, or the renderer's refusal (a conversation a dialect cannot say)."""
    try:
        return render_conversation(req.conversation, req.render).prompt
    except InvalidRequest as exc:
        return f"refused: {exc.message}"  # the param is in each API's own paths


@pytest.mark.parametrize("dialect", ["v3.2", "v4", "v4.1"])
@pytest.mark.parametrize("vector", VECTORS, ids=[v["id"] for v in VECTORS])
def test_every_vector_renders_the_same_as_chat(vector: dict[str, Any], dialect: str) -> None:
    if vector["id"] in NOT_IN_RESPONSES:
        pytest.skip(NOT_IN_RESPONSES[vector["id"]])
    req = parse_request(vector["api"], copy.deepcopy(vector["request"]), dialect=dialect)
    chat = to_openai_chat_body(req)
    responses = to_responses(chat)
    chat_req = parse_request("openai", chat, dialect=dialect)
    responses_req = parse_request("responses", responses, dialect=dialect)
    assert responses_req.render == chat_req.render
    assert _unnamed(responses_req) == _unnamed(chat_req)
    assert _prompt_or_error(responses_req) == _prompt_or_error(chat_req)


# --- what the reader does with Responses-only shapes --------------------------------------


def body(input_items: Any, **extra: Any) -> dict[str, Any]:
    return {"model": "deepseek-v4.1", "input": input_items, **extra}


def messages_of(request: dict[str, Any]) -> list[dict[str, Any]]:
    return parse_responses_request(request).conversation.chat_messages()


def prompt(request: dict[str, Any], **kwargs: Any) -> str:
    req = parse_responses_request(request, **kwargs)
    return render_conversation(req.conversation, req.render).prompt


def test_string_input_and_instructions() -> None:
    req = parse_responses_request(body("Hi", instructions="Be brief."))
    assert req.conversation.chat_messages() == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]
    assert req.render.thinking is True and req.conversation.tool_choice.mode == "none"


def test_easy_messages_without_type() -> None:
    req = parse_responses_request(
        body([{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}])
    )
    assert req.conversation.chat_messages() == [{"role": "user", "content": "Hi"}]


def test_assistant_items_form_one_turn() -> None:
    items = [
        {"role": "user", "content": "ls"},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "Run ls."}],
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Listing."}],
        },
        {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": '{"cmd":"ls"}'},
        {"type": "function_call", "call_id": "c2", "name": "shell", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c2", "output": "b"},
        {"type": "function_call_output", "call_id": "c1", "output": "a"},
    ]
    tools = [{"type": "function", "name": "shell", "parameters": {"type": "object"}}]
    messages = messages_of(body(items, tools=tools))
    assert messages[1] == {
        "role": "assistant",
        "content": "Listing.",
        "reasoning_content": "Run ls.",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "shell", "arguments": '{"cmd": "ls"}'},
            },
            {"id": "c2", "type": "function", "function": {"name": "shell", "arguments": "{}"}},
        ],
    }
    assert [(m["role"], m.get("tool_call_id")) for m in messages[2:]] == [
        ("tool", "c2"),
        ("tool", "c1"),
    ]


def test_summary_text_stands_in_for_reasoning() -> None:
    items = [
        {"role": "user", "content": "q"},
        {"type": "reasoning", "id": "rs", "summary": [{"type": "summary_text", "text": "Sum."}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "A"}]},
    ]
    assert messages_of(body(items))[1]["reasoning_content"] == "Sum."


def test_images_in_user_messages_and_call_outputs() -> None:
    url = "data:image/png;base64,AAAA"
    items = [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "see"},
                {"type": "input_image", "image_url": url, "detail": "auto"},
            ],
        },
        {"type": "function_call", "call_id": "c", "name": "view", "arguments": "{}"},
        {
            "type": "function_call_output",
            "call_id": "c",
            "output": [
                {"type": "input_text", "text": "shown"},
                {"type": "input_image", "image_url": url},
            ],
        },
    ]
    messages = messages_of(body(items))
    image = {"type": "image_url", "image_url": {"url": url}}
    assert messages[0]["content"] == [{"type": "text", "text": "see"}, image]
    assert messages[2] == {
        "role": "tool",
        "tool_call_id": "c",
        "content": [{"type": "text", "text": "shown"}],
    }
    assert messages[3] == {"role": "user", "content": [image]}


def test_codex_request_shape() -> None:
    """What Codex sends: namespace tools, server tools, its reasoning and cache fields."""
    request = body(
        [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}],
        instructions="You are Codex.",
        tools=[
            {
                "type": "function",
                "name": "shell",
                "description": "Run",
                "strict": False,
                "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
            },
            {
                "type": "namespace",
                "name": "mcp__docs__",
                "description": "Docs server",
                "tools": [
                    {
                        "type": "function",
                        "name": "search",
                        "strict": False,
                        "parameters": {"type": "object"},
                    }
                ],
            },
            {
                "type": "namespace",
                "name": "crm",
                "description": "CRM",
                "tools": [
                    {"type": "function", "name": "lookup", "parameters": {"type": "object"}},
                    {"type": "custom", "name": "freeform"},
                ],
            },
            {"type": "web_search", "external_web_access": False},
        ],
        tool_choice="auto",
        parallel_tool_calls=False,
        reasoning={"effort": "medium", "summary": "auto"},
        store=False,
        stream=True,
        include=["reasoning.encrypted_content"],
        prompt_cache_key="0199-session",
        client_metadata={"x-codex-turn": "1"},
        text={"verbosity": "medium"},
    )
    req = parse_responses_request(request)
    assert [t.name for t in req.conversation.tools] == [
        "shell",
        "mcp__docs__search",
        "crm.lookup",
    ]
    assert req.responses.namespaces == {
        "mcp__docs__search": ("mcp__docs__", "search"),
        "crm.lookup": ("crm", "lookup"),
    }
    assert req.responses.include_encrypted_reasoning and req.responses.store is False
    assert req.parallel_tool_calls is False and req.render.reasoning_effort == "medium"
    assert req.stream is True
    notes = " ".join(req.conversation.notes)
    assert "web_search" in notes and "'custom'" in notes and "prompt_cache_key" in notes
    assert "client_metadata" in notes


def test_namespaced_calls_in_history_use_the_flat_name() -> None:
    tools = [
        {
            "type": "namespace",
            "name": "crm",
            "description": "",
            "tools": [{"type": "function", "name": "lookup"}],
        }
    ]
    items = [
        {"role": "user", "content": "q"},
        {
            "type": "function_call",
            "call_id": "c",
            "namespace": "crm",
            "name": "lookup",
            "arguments": "{}",
        },
        {"type": "function_call_output", "call_id": "c", "output": "ok"},
    ]
    call = messages_of(body(items, tools=tools))[1]["tool_calls"][0]
    assert call["function"]["name"] == "crm.lookup"
    assert qualified_name("mcp__a__", "b") == "mcp__a__b"


def test_effort_none_turns_thinking_off_and_matches_chat() -> None:
    chat = {
        "model": "m",
        "messages": [{"role": "user", "content": "Hi"}],
        "reasoning_effort": "none",
    }
    req = parse_responses_request(body("Hi", reasoning={"effort": "none"}))
    assert req.render.thinking is False and req.render.reasoning_effort is None
    chat_req = parse_request("openai", chat)
    assert (
        prompt(body("Hi", reasoning={"effort": "none"}))
        == render_conversation(chat_req.conversation, chat_req.render).prompt
    )
    for effort in ("minimal", "medium", "xhigh", "max", 40):
        responses_req = parse_responses_request(body("Hi", reasoning={"effort": effort}))
        same = parse_request("openai", {**chat, "reasoning_effort": effort})
        assert responses_req.render == same.render


def test_thinking_switch_wins_over_effort_none() -> None:
    req = parse_responses_request(
        body("Hi", thinking={"type": "enabled"}, reasoning={"effort": "none"})
    )
    assert req.render.thinking is True and req.render.reasoning_effort is None
    assert any("overridden by thinking.type" in note for note in req.conversation.notes)
    off = parse_responses_request(body("Hi", thinking={"type": "disabled"}))
    assert off.render.thinking is False


def test_text_format_and_limits() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    req = parse_responses_request(
        body(
            "Hi",
            text={
                "format": {"type": "json_schema", "name": "out", "schema": schema, "strict": True}
            },
            max_output_tokens=64,
            temperature=0.2,
            metadata={"k": "v"},
            store=True,
            previous_response_id="resp_1",
        )
    )
    assert req.conversation.response_format == {
        "type": "json_schema",
        "json_schema": {"name": "out", "schema": schema, "strict": True},
    }
    assert (req.max_tokens, dict(req.sampling)) == (64, {"temperature": 0.2})
    assert req.responses.metadata == {"k": "v"}
    assert req.responses.previous_response_id == "resp_1"
    assert not any("previous_response_id" in note for note in req.conversation.notes)
    plain = parse_responses_request(body("x", text={"format": {"type": "text"}}))
    assert plain.conversation.response_format is None


# --- sealed reasoning ----------------------------------------------------------------------


def test_sealed_reasoning_restores_the_turn() -> None:
    clear = [
        {"role": "user", "content": "q"},
        {
            "type": "reasoning",
            "id": "rs",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "Secret plan."}],
        },
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "done"},
    ]
    sealed = copy.deepcopy(clear)
    sealed[1] = {
        "type": "reasoning",
        "id": "rs",
        "summary": [],
        "encrypted_content": SEALER.seal("Secret plan.", "deepseek-v4.1"),
    }
    tools = [{"type": "function", "name": "f"}]
    expected = prompt(body(clear, tools=tools))
    assert "Secret plan." in expected
    assert prompt(body(sealed, tools=tools), sealer=SEALER) == expected


def test_a_token_that_does_not_open_is_never_half_trusted() -> None:
    """A token sealed for another model, or read without a sealer, does not open: the item
    is used as sent (its clear text, else its summary), with a note; the clear text sent
    next to a token that opens never replaces what the token holds."""
    tools = [{"type": "function", "name": "f"}]

    def history(reasoning: dict[str, Any]) -> dict[str, Any]:
        items = [
            {"role": "user", "content": "q"},
            {"type": "reasoning", "summary": [], **reasoning},
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "done"},
        ]
        return body(items, tools=tools)

    foreign = SEALER.seal("Sealed for another model.", "other-model")
    clear = [{"type": "reasoning_text", "text": "Client text."}]
    for sealer in (SEALER, None):
        req = parse_responses_request(
            history({"encrypted_content": foreign, "content": clear}), sealer=sealer
        )
        assert req.conversation.chat_messages()[1]["reasoning_content"] == "Client text."
        assert any("input[1].encrypted_content: not opened" in n for n in req.conversation.notes)
    summary = [{"type": "summary_text", "text": "Summary."}]
    req = parse_responses_request(history({"encrypted_content": foreign, "summary": summary}))
    assert req.conversation.chat_messages()[1]["reasoning_content"] == "Summary."
    mine = SEALER.seal("Sealed here.", "deepseek-v4.1")
    req = parse_responses_request(
        history({"encrypted_content": mine, "content": clear}), sealer=SEALER
    )
    assert req.conversation.chat_messages()[1]["reasoning_content"] == "Sealed here."


def test_a_function_call_without_arguments_is_a_400_naming_it() -> None:
    items = [
        {"role": "user", "content": "q"},
        {"type": "function_call", "call_id": "c", "name": "f"},
        {"type": "function_call_output", "call_id": "c", "output": "done"},
    ]
    err = rejects(body(items, tools=[{"type": "function", "name": "f"}]))
    assert err.param == "input[1].arguments" and "required" in str(err)


# --- errors --------------------------------------------------------------------------------


def rejects(request: Any, **kwargs: Any) -> ApiError:
    with pytest.raises(InvalidRequest) as caught:
        parse_responses_request(request, **kwargs)
    err = api_error(caught.value)
    assert (err.status, err.type) == (400, "invalid_request_error")
    ErrorObject.model_validate(openai_error_body(err)["error"])
    return err


CALL = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}


@pytest.mark.parametrize(
    ("request_body", "param"),
    [
        ([], None),
        ({"input": "x"}, "model"),
        ({"model": "m"}, "input"),
        (body([]), "input"),
        (body(7), "input"),
        (body([{"type": "message", "role": "tool", "content": "x"}]), "input[0].role"),
        (body([{"role": "user", "content": [{"type": "output_audio"}]}]), "input[0].content[0]"),
        (
            body([{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]),
            "input[0].content[0]",
        ),
        (
            body([{"type": "function_call_output", "call_id": "x", "output": "o"}]),
            "input[0].call_id",
        ),
        (
            body([CALL, {"type": "function_call_output", "call_id": "c", "output": 3}]),
            "input[1].output",
        ),
        (body([CALL, {**CALL, "arguments": "[1]"}]), "input[1].call_id"),
        (body([{**CALL, "name": "bad name"}]), "input[0].name"),
        (body([{"type": "item_reference", "id": "msg_1"}]), "input[0]"),
        (body("x", tools=[{"type": "function"}]), "tools[0].name"),
        (
            body("x", tools=[{"type": "function", "name": "f"}, {"type": "function", "name": "f"}]),
            "tools[1].name",
        ),
        (body("x", tools=[{"type": "namespace", "name": "n", "tools": 1}]), "tools[0].tools"),
        (body("x", tool_choice="any"), "tool_choice"),
        (body("x", tool_choice="required"), "tool_choice"),
        (
            body(
                "x",
                tool_choice={"type": "function", "name": "g"},
                tools=[{"type": "function", "name": "f"}],
            ),
            "tool_choice.name",
        ),
        (body("x", tool_choice={"type": "web_search"}), "tool_choice.type"),
        (body("x", reasoning={"effort": "huge"}), "reasoning.effort"),
        (body("x", reasoning={"summary": "long"}), "reasoning.summary"),
        (body("x", reasoning={"effort": 101}), "reasoning.effort"),
        (body("x", text={"format": {"type": "xml"}}), "text.format.type"),
        (body("x", text={"format": {"type": "json_schema", "name": "n"}}), "text.format.schema"),
        (body("x", max_output_tokens=0), "max_output_tokens"),
        (body("x", metadata={"k": 1}), "metadata.k"),
        (body("x", include="reasoning"), "include"),
        (body("x", store="no"), "store"),
        (body("x", background=True), "background"),
        (body("x", parallel_tool_calls=1), "parallel_tool_calls"),
    ],
)
def test_malformed_bodies_name_the_param(request_body: Any, param: str | None) -> None:
    assert rejects(request_body).param == param


# --- the command line (the contract an external check drives) ------------------------------


def cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "dsmlkit", *args], capture_output=True)


CODEX_TURN = body(
    [
        {"role": "user", "content": "ls"},
        {
            "type": "reasoning",
            "id": "rs",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "Run it."}],
        },
        {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
    ],
    instructions="Be brief.",
    tools=[{"type": "function", "name": "shell"}, {"type": "web_search"}],
    tool_choice={"type": "function", "name": "shell"},
)


@pytest.mark.slow
def test_cli_render_api_responses(tmp_path: Path) -> None:
    path = tmp_path / "request.json"
    path.write_text(json.dumps(CODEX_TURN), "utf-8")
    done = cli("render", "--dialect", "v4.1", "--api", "responses", str(path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode("utf-8") == prompt(CODEX_TURN)
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(body([])), "utf-8")
    refused = cli("render", "--dialect", "v4.1", "--api", "responses", str(broken))
    assert refused.returncode == 3 and b"input: must hold at least one item" in refused.stderr


@pytest.mark.slow
def test_cli_convert_from_responses(tmp_path: Path) -> None:
    path = tmp_path / "request.json"
    path.write_text(json.dumps(CODEX_TURN), "utf-8")
    done = cli("convert", "--from", "responses", str(path))
    assert done.returncode == 0, done.stderr
    converted = json.loads(done.stdout)
    assert converted["messages"] == messages_of(CODEX_TURN)
    assert [t["function"]["name"] for t in converted["tools"]] == ["shell"]
    assert converted["options"]["tool_choice"] == {
        "type": "function",
        "function": {"name": "shell"},
    }
    path.write_text(json.dumps(body("x", reasoning={"effort": "huge"})), "utf-8")
    refused = cli("convert", "--from", "responses", str(path))
    assert refused.returncode == 3
    error = json.loads(refused.stdout)["error"]
    assert (error["param"], error["type"]) == ("reasoning.effort", "invalid_request_error")


def test_namespaced_tool_choice() -> None:
    tools = [
        {
            "type": "namespace",
            "name": "crm",
            "description": "",
            "tools": [{"type": "function", "name": "lookup"}],
        }
    ]
    choice = {"type": "function", "namespace": "crm", "name": "lookup"}
    req = parse_responses_request(body("q", tools=tools, tool_choice=choice))
    assert (req.conversation.tool_choice.mode, req.conversation.tool_choice.name) == (
        "required",
        "crm.lookup",
    )
    assert rejects(body("q", tools=tools, tool_choice={**choice, "namespace": "x"})).param == (
        "tool_choice.name"
    )


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(KEYWORDS),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYWORDS), inner, max_size=4)
    ),
    max_leaves=12,
)


@pytest.mark.slow
@settings(max_examples=300, derandomize=True, deadline=None)
@given(fields=st.dictionaries(st.sampled_from(KEYWORDS), json_values, max_size=6))
def test_any_body_is_read_or_refused_with_a_400(fields: dict[str, Any]) -> None:
    """Whatever a client sends, the reader answers with a request or an InvalidRequest."""
    try:
        req = parse_responses_request({"model": "m", "input": "x", **fields}, sealer=SEALER)
        render_conversation(req.conversation, req.render)
    except InvalidRequest as exc:
        assert api_error(exc).status == 400
