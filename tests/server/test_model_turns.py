"""The model's own words in the history, and short upstream call ids.

Driven through the official SDKs. A client that adds a default parameter and reorders keys
(as Claude Code does), re-serializes argument JSON and collapses whitespace in the text
still gets prompts that extend the previous prompt plus the model's output; a client that
really changes a call wins, with a note in the log line. In front of a hosted endpoint
(the fake engine's chat mode answers 400 for a tool turn without its reasoning, as
DeepSeek's API does) calls the endpoint numbers ``call_0`` get their reasoning and their
``call_0`` back per conversation.
"""

from __future__ import annotations

import json
import time
from typing import Any

import openai
import pytest

from dsmlkit.dialects import V4_1
from dsmlkit.server.reqlog import FIELDS
from tests.helpers import write_block
from tests.server.conftest import CLIENT_TIMEOUT, Gateway
from tests.server.fake_engine import FakeEngine, Reply
from tests.server.fake_hosted import HOSTED_REASONING_RULE
from tests.server.sdk import Answer, ask

APIS = [("openai", False), ("openai", True), ("anthropic", False), ("anthropic", True)]
API_IDS = ["openai", "openai-stream", "anthropic", "anthropic-stream"]
EDIT = {
    "type": "object",
    "properties": {
        "file_path": {"type": "string"},
        "old_string": {"type": "string"},
        "new_string": {"type": "string"},
        "replace_all": {"type": "boolean", "default": False},
    },
}
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}}


def tools(api: str, name: str, schema: dict[str, Any]) -> list[dict[str, Any]]:
    if api != "anthropic":  # (sdk.ask makes Responses tools of these)
        return [{"type": "function", "function": {"name": name, "parameters": schema}}]
    return [{"name": name, "input_schema": schema}]


def edit_output(step: int) -> str:
    """What the model writes in step ``step``: reasoning, text with a double space, a call."""
    args = {"file_path": f"src/f{step}.py", "old_string": "x = 1", "new_string": f"x = {step}"}
    return f"Step {step}: edit.</think>Editing  f{step}.py." + write_block(V4_1, [("Edit", args)])


def echoed(
    api: str, answer: Answer, arguments: dict[str, Any], result: str = "ok"
) -> list[dict[str, Any]]:
    """The assistant turn and its result as the client sends them back: reasoning dropped,
    whitespace in the text collapsed (Responses: as it came), ``arguments`` for the call
    (compact JSON)."""
    call_id, name, _ = answer.calls[0]
    text = " ".join(answer.content.split())
    if api == "responses":
        compact = json.dumps(arguments, separators=(",", ":"))
        said = [{"type": "output_text", "text": answer.content}]
        return [
            {"type": "message", "role": "assistant", "content": said},
            {"type": "function_call", "call_id": call_id, "name": name, "arguments": compact},
            {"type": "function_call_output", "call_id": call_id, "output": result},
        ]
    if api == "openai":
        function = {"name": name, "arguments": json.dumps(arguments, separators=(",", ":"))}
        call = {"id": call_id, "type": "function", "function": function}
        return [
            {"role": "assistant", "content": text, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call_id, "content": result},
        ]
    use = {"type": "tool_use", "id": call_id, "name": name, "input": arguments}
    answered = {"type": "tool_result", "tool_use_id": call_id, "content": result}
    return [
        {"role": "assistant", "content": [{"type": "text", "text": text}, use]},
        {"role": "user", "content": [answered]},
    ]


def like_claude_code(arguments: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments with the default Claude Code adds, keys in another order."""
    return {"replace_all": False, **dict(reversed(arguments.items()))}


def access_lines(caplog: pytest.LogCaptureFixture, count: int) -> list[dict[str, Any]]:
    """The request log lines, once ``count`` are written (after each answer's last byte)."""
    deadline = time.monotonic() + 2
    while True:
        lines = [getattr(r, FIELDS) for r in caplog.records if r.name.endswith(".access")]
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.01)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("api", "stream"),
    [*APIS, ("responses", False), ("responses", True)],
    ids=[*API_IDS, "responses", "responses-stream"],
)
def test_each_prompt_extends_the_previous_prompt_and_the_models_output(
    text_gateway: Gateway, api: str, stream: bool
) -> None:
    engine = text_gateway.engine
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the three files."}]
    outputs = [edit_output(step) for step in range(3)]
    engine.push(*(Reply(text=output) for output in outputs), Reply(text="Done.</think>Fixed."))
    for step in range(4):
        answer = ask(
            text_gateway,
            api,
            stream,
            thinking=True,
            tools=tools(api, "Edit", EDIT),
            messages=messages,
        )
        if step < 3:
            assert answer.content == f"Editing  f{step}.py."
            messages += echoed(api, answer, like_claude_code(answer.calls[0][2]))
    prompts = [request["prompt"] for request in engine.requests]
    for step, output in enumerate(outputs):
        assert prompts[step + 1].startswith(prompts[step] + output)
    assert '"replace_all"' not in prompts[-1][len(prompts[0]) :]


@pytest.mark.parametrize("api", ["openai", "anthropic", "responses"])
@pytest.mark.parametrize("change", ["value", "dropped"])
def test_a_call_the_client_really_changed_is_rendered_as_sent_and_noted(
    text_gateway: Gateway, api: str, change: str, caplog: pytest.LogCaptureFixture
) -> None:
    text_gateway.engine.push(Reply(text=edit_output(1)), Reply(text="Done.</think>Fixed."))
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix f1.py."}]
    answer = ask(
        text_gateway, api, False, thinking=True, tools=tools(api, "Edit", EDIT), messages=messages
    )
    arguments = like_claude_code(answer.calls[0][2])
    if change == "value":
        arguments["new_string"] = "x = 100"
    else:
        del arguments["old_string"]
    with caplog.at_level("INFO", logger="dsmlkit.server.access"):
        ask(
            text_gateway,
            api,
            False,
            thinking=True,
            tools=tools(api, "Edit", EDIT),
            messages=messages + echoed(api, answer, arguments),
        )
        line = access_lines(caplog, 1)[-1]
    prompt = text_gateway.engine.requests[-1]["prompt"]
    assert "replace_all" in prompt  # the client's call, as it sent it
    assert ("x = 100" in prompt) == (change == "value")
    assert "Editing  f1.py." in prompt  # the text is still the model's
    assert line["history_changed"] == {"call": 1}


def test_the_hosted_rule_in_the_test_double(
    engine: FakeEngine, engine_server: tuple[FakeEngine, str]
) -> None:
    """Straight to the double: a tool turn without reasoning is a 400 in thinking mode."""
    client = openai.OpenAI(
        base_url=engine_server[1] + "/v1", api_key="k", max_retries=0, timeout=CLIENT_TIMEOUT
    )
    call = {"id": "call_0", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages: list[Any] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_0", "content": "ok"},
    ]
    with pytest.raises(openai.BadRequestError, match="must be passed back"):
        client.chat.completions.create(model="deepseek-v4.1", messages=messages)
    messages[1]["reasoning_content"] = "Call f."
    client.chat.completions.create(model="deepseek-v4.1", messages=messages)
    del messages[1]["reasoning_content"]
    client.chat.completions.create(
        model="deepseek-v4.1", messages=messages, extra_body={"thinking": {"type": "disabled"}}
    )


def weather_turn(gateway: Gateway, api: str, stream: bool, city: str) -> list[dict[str, Any]]:
    """A first turn whose call the hosted endpoint numbers ``call_0`` (the client gets an id
    of the gateway's own: see test_call_ids.py); the conversation as a client that drops the
    reasoning (as Continue does) sends it back."""
    call = {"id": "call_0", "name": "get_weather", "arguments": json.dumps({"city": city})}
    gateway.engine.push(Reply(reasoning=f"Weather in {city}: call.", tool_calls=(call,)))
    question = [{"role": "user", "content": f"Weather in {city}?"}]
    answer = ask(
        gateway,
        api,
        stream,
        thinking=True,
        tools=tools(api, "get_weather", WEATHER),
        messages=question,
    )
    assert answer.calls[0][0] != "call_0"
    return question + echoed(api, answer, {"city": city}, result="sunny")


@pytest.mark.parametrize(("api", "stream"), APIS, ids=API_IDS)
def test_short_upstream_call_ids_are_restored_per_conversation(
    chat_gateway: Gateway, api: str, stream: bool
) -> None:
    paris = weather_turn(chat_gateway, api, stream, "Paris")
    rome = weather_turn(chat_gateway, api, stream, "Rome")
    for city, history in (("Rome", rome), ("Paris", paris)):
        chat_gateway.engine.push(Reply(content=f"Sunny in {city}."))
        answer = ask(
            chat_gateway,
            api,
            stream,
            thinking=True,
            tools=tools(api, "get_weather", WEATHER),
            messages=history,
        )
        assert answer.content == f"Sunny in {city}."
        sent = chat_gateway.engine.requests[-1]["messages"]
        assistant = next(m for m in sent if m["role"] == "assistant")
        assert assistant["reasoning_content"] == f"Weather in {city}: call."
        if api == "openai":  # the endpoint's own arguments JSON, not the client's compact one
            assert assistant["tool_calls"][0]["function"]["arguments"] == json.dumps({"city": city})


def test_without_restoring_the_hosted_400_reaches_the_client(chat_gateway: Gateway) -> None:
    """A conversation the gateway never answered, with the same ``call_0``: nothing to put
    back, and the endpoint's 400 comes through."""
    weather_turn(chat_gateway, "openai", False, "Paris")
    history: list[Any] = [
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_0", "content": "sunny"},
    ]
    with pytest.raises(openai.BadRequestError) as caught:
        chat_gateway.openai().chat.completions.create(
            model="m", messages=history, timeout=CLIENT_TIMEOUT
        )
    assert HOSTED_REASONING_RULE in str(caught.value)


def test_text_the_client_rewrote_is_used_as_sent_and_noted(
    text_gateway: Gateway, caplog: pytest.LogCaptureFixture
) -> None:
    text_gateway.engine.push(Reply(text=edit_output(1)), Reply(text="Done.</think>Fixed."))
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix f1.py."}]
    edit = tools("openai", "Edit", EDIT)
    answer = ask(text_gateway, "openai", False, thinking=True, tools=edit, messages=messages)
    history = echoed("openai", answer, answer.calls[0][2])
    history[0]["content"] = "I was asked to edit f1.py."
    with caplog.at_level("INFO", logger="dsmlkit.server.access"):
        ask(text_gateway, "openai", False, thinking=True, tools=edit, messages=messages + history)
        line = access_lines(caplog, 1)[-1]
    prompt = text_gateway.engine.requests[-1]["prompt"]
    assert "I was asked to edit f1.py." in prompt and "Editing  f1.py." not in prompt
    assert edit_output(1).split("f1.py.", 1)[1] in prompt  # the call is still the model's
    assert line["history_changed"] == {"content": 1}


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_one_conversation_numbering_every_answer_call_0_gets_each_reasoning(
    chat_gateway: Gateway, api: str
) -> None:
    """The endpoint numbers each answer's calls from 0; the client drops the reasoning and
    (Anthropic) moves its cache marker to the last message, as Claude Code does."""
    history = weather_turn(chat_gateway, api, False, "Paris")
    call = {"id": "call_0", "name": "get_weather", "arguments": '{"city": "Rome"}'}
    chat_gateway.engine.push(Reply(reasoning="Now Rome: call.", tool_calls=(call,)))
    weather = tools(api, "get_weather", WEATHER)
    marked = history[-1]["content"][-1] if api == "anthropic" else {}
    marked["cache_control"] = {"type": "ephemeral"}
    answer = ask(chat_gateway, api, False, thinking=True, tools=weather, messages=history)
    del marked["cache_control"]
    history += echoed(api, answer, {"city": "Rome"}, result="rainy")
    chat_gateway.engine.push(Reply(content="Sunny, then rainy."))
    ask(chat_gateway, api, False, thinking=True, tools=weather, messages=history)
    sent = chat_gateway.engine.requests[-1]["messages"]
    reasoning = [m["reasoning_content"] for m in sent if m["role"] == "assistant"]
    assert reasoning == ["Weather in Paris: call.", "Now Rome: call."]
