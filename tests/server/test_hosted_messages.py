"""``dsmlkit serve --upstream-api messages`` in front of a DeepSeek-like Anthropic-format
endpoint (the fake engine's ``/v1/messages``, :mod:`~tests.server.fake_hosted`), through a
real process with the official SDKs: what goes upstream, the reasoning round trip with the
upstream's thinking signature, and the endpoint's 400s reaching each client in its API's
error shape (the leak repair is in ``test_server_gateway_chat.py``, for both hosted kinds).
"""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from tests.images import base64_png
from tests.server.conftest import HOSTED_KINDS, HOSTED_MODELS, Gateway
from tests.server.fake_engine import FakeEngine, Reply
from tests.server.fake_hosted import (
    HOSTED_REASONING_RULE,
    HOSTED_THINKING_RULE,
    HOSTED_USER_ID_RULE,
    signature_of,
)
from tests.server.sdk import ask, declared
from tests.server.test_reasoning_roundtrip import REASONING, history, tools_for

# Real dsmlkit serve processes.
pytestmark = pytest.mark.slow

APIS = [("openai", False), ("openai", True), ("anthropic", False), ("anthropic", True)]
API_IDS = ["openai", "openai-stream", "anthropic", "anthropic-stream"]
UPSTREAM_CALL = {"id": "toolu_up_" + "a1b2c3" * 4, "name": "get_weather", "arguments": "{}"}
#: The 400 each hosted kind's endpoint gives a tool turn sent back without its reasoning.
MISSING_REASONING = {"chat": HOSTED_REASONING_RULE, "messages": HOSTED_THINKING_RULE}


@pytest.fixture
def gateway(hosted_processes: dict[str, str], engine: FakeEngine) -> Gateway:
    """The messages-mode process."""
    engine.served = HOSTED_MODELS
    return Gateway(hosted_processes["messages"], engine)


@pytest.fixture(params=HOSTED_KINDS)
def hosted(
    request: pytest.FixtureRequest, hosted_processes: dict[str, str], engine: FakeEngine
) -> Any:
    """``(kind, gateway)`` for each hosted kind."""
    engine.served = HOSTED_MODELS
    return request.param, Gateway(hosted_processes[request.param], engine)


# --- what goes upstream -------------------------------------------------------------------


def test_a_chat_request_goes_up_as_an_anthropic_body_with_the_key_as_x_api_key(
    gateway: Gateway,
) -> None:
    gateway.engine.push(Reply(content="Sunny.", tool_calls=(UPSTREAM_CALL,)))
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "d"}}]
    request: dict[str, Any] = dict(
        model="m",
        max_tokens=300,
        temperature=0.5,
        stop=["END"],
        tools=tools,
        tool_choice="required",
        parallel_tool_calls=False,
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": "Looking.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sun"},
        ],
        extra_body={"chat_template_kwargs": {"thinking": False}},
    )
    message = gateway.openai().chat.completions.create(**request).choices[0].message
    assert message.content == "Sunny."
    assert [call.function.name for call in message.tool_calls or ()] == ["get_weather"]
    sent = gateway.engine.requests[-1]
    assert sent == {
        "model": "m",
        "max_tokens": 300,
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Looking."},
                    {
                        "type": "tool_use",
                        "id": "call_1",
                        "name": "get_weather",
                        "input": {"city": "Oslo"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "sun"}],
            },
        ],
        "tools": [{"name": "get_weather", "description": "d", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "thinking": {"type": "disabled"},
        "temperature": 0.5,
        "stop_sequences": ["END"],
        "stream": True,
    }
    headers = gateway.engine.headers[-1]
    assert (headers["x-api-key"], headers["anthropic-version"]) == ("test", "2023-06-01")
    assert "authorization" not in headers


def test_a_messages_request_goes_up_as_sent_with_its_history_rewritten(gateway: Gateway) -> None:
    """Fields the gateway does not read (``metadata``) reach the upstream; the thinking
    block the client holds (signed by the gateway) goes up with the upstream's signature."""
    gateway.engine.push(Reply(reasoning=REASONING, tool_calls=(UPSTREAM_CALL,)))
    request: dict[str, Any] = {
        "model": "m",
        "max_tokens": 2000,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "tools": tools_for("anthropic"),
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
    }
    first = gateway.anthropic().messages.create(**request)
    thought, call = first.content
    assert thought.type == "thinking" and call.type == "tool_use"
    gateway.engine.push(Reply(content="Sunny."))
    request["messages"] += [
        {"role": "assistant", "content": [block.model_dump() for block in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sun"}],
        },
    ]
    gateway.anthropic().messages.create(
        **request, metadata={"user_id": "user_1"}, system=[{"type": "text", "text": "Be brief."}]
    )
    sent = gateway.engine.requests[-1]
    assert sent["metadata"] == {"user_id": "user_1"}
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert sent["system"] == "Be brief."
    thinking = sent["messages"][1]["content"][0]
    assert thinking == {
        "type": "thinking",
        "thinking": REASONING,
        "signature": signature_of(REASONING),
    }
    assert thought.signature != signature_of(REASONING)


def test_usage_and_stop_sequence_come_from_the_events(gateway: Gateway) -> None:
    gateway.engine.push(Reply(content="Counting 1 2", stop_reason="3"))
    message = gateway.anthropic().messages.create(
        model="m", max_tokens=50, stop_sequences=["3"], messages=[{"role": "user", "content": "go"}]
    )
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "3")
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0


# --- the reasoning round trip -----------------------------------------------------------


@pytest.mark.parametrize(("api", "stream"), APIS, ids=API_IDS)
def test_the_upstreams_thinking_and_signature_go_back_on_the_next_turn(
    gateway: Gateway, api: str, stream: bool
) -> None:
    """Turn one: the upstream thinks and calls. Turn two: the client sends the call back
    without its reasoning; the upstream gets its thinking block with its own signature
    (without it, DeepSeek's endpoint answers 400)."""
    gateway.engine.push(Reply(reasoning=REASONING, tool_calls=(UPSTREAM_CALL,)))
    answer = ask(gateway, api, stream, thinking=True, tools=tools_for(api))
    assert answer.reasoning == REASONING
    [(call_id, _, _)] = answer.calls
    gateway.engine.push(Reply(content="Sunny in Paris."))
    later = ask(
        gateway, api, stream, thinking=True, tools=tools_for(api), messages=history(api, call_id)
    )
    assert later.content == "Sunny in Paris."
    assistant = gateway.engine.requests[-1]["messages"][1]
    assert assistant["content"][0] == {
        "type": "thinking",
        "thinking": REASONING,
        "signature": signature_of(REASONING),
    }
    assert assistant["content"][1]["id"] == UPSTREAM_CALL["id"]


# --- the endpoint's 400s, in each client API's error shape -------------------------------


@pytest.mark.parametrize("api", ["openai", "anthropic", "responses"])
def test_a_tool_turn_without_reasoning_is_the_endpoints_400(hosted: Any, api: str) -> None:
    """A call the gateway never issued has no stored reasoning: the history goes up as
    sent and the endpoint's refusal reaches the client."""
    kind, gateway = hosted
    messages = history("anthropic" if api == "anthropic" else "openai", "call_not_ours_0123456")
    if api == "responses":
        messages = [
            messages[0],
            {
                "type": "function_call",
                "call_id": "call_not_ours_0123456",
                "name": "get_weather",
                "arguments": "{}",
            },
            {"type": "function_call_output", "call_id": "call_not_ours_0123456", "output": "sun"},
        ]
    error = anthropic.BadRequestError if api == "anthropic" else openai.BadRequestError
    with pytest.raises(error) as caught:
        ask(gateway, api, False, thinking=True, messages=messages, **declared(api, "get_weather"))
    body = getattr(caught.value, "body", None)
    assert isinstance(body, dict)
    if api == "anthropic":
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        message = body["error"]["message"]
    else:
        message = body["message"] if "message" in body else body["error"]["message"]
    assert MISSING_REASONING[kind] in message
    assert "127.0.0.1" not in message


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_user_id_deepseek_refuses_is_a_400_in_the_messages_shape(
    gateway: Gateway, stream: bool
) -> None:
    body: dict[str, Any] = {
        "model": "m",
        "max_tokens": 50,
        "messages": [{"role": "user", "content": "hi"}],
    }
    client = gateway.anthropic()
    with pytest.raises(anthropic.BadRequestError, match="does not match pattern") as caught:
        if stream:
            with client.messages.stream(**body, metadata={"user_id": "me@example.com"}) as events:
                events.get_final_message()
        else:
            client.messages.create(**body, metadata={"user_id": "me@example.com"})
    assert HOSTED_USER_ID_RULE in str(caught.value)
    gateway.engine.push(Reply(content="ok"))
    assert client.messages.create(**body, metadata={"user_id": "me_example-1"}).content


@pytest.mark.parametrize(("api", "stream"), APIS, ids=API_IDS)
@pytest.mark.parametrize("choice", ["required", "named"])
def test_a_forced_choice_the_endpoint_refuses_in_thinking_mode_is_asked_again_with_auto(
    gateway: Gateway, api: str, stream: bool, choice: str
) -> None:
    gateway.engine.push(Reply(reasoning="Weather.", tool_calls=(UPSTREAM_CALL,)))
    tools = declared(api, "get_weather", "get_time")
    if api == "openai":
        forced: Any = (
            "required"
            if choice == "required"
            else {
                "type": "function",
                "function": {"name": "get_weather"},
            }
        )
    else:
        forced = (
            {"type": "any"} if choice == "required" else {"type": "tool", "name": "get_weather"}
        )
    answer = ask(gateway, api, stream, thinking=True, tool_choice=forced, **tools)
    assert [name for _, name, _ in answer.calls] == ["get_weather"]
    refused, retried = gateway.engine.requests[-2:]
    assert refused["tool_choice"]["type"] in ("any", "tool")
    assert retried["tool_choice"] == {"type": "auto"}
    names = [tool["name"] for tool in retried["tools"]]
    assert names == (["get_weather"] if choice == "named" else ["get_weather", "get_time"])


def test_an_error_event_midstream_reaches_the_client(gateway: Gateway) -> None:
    error = b'{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}'
    gateway.engine.push(Reply(raw=b"event: error\ndata: " + error + b"\n\n"))
    with pytest.raises(openai.APIStatusError, match="Overloaded") as caught:
        ask(gateway, "openai", False, thinking=False)
    assert caught.value.status_code == 502


# --- images --------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_an_image_from_a_messages_client_reaches_the_upstream_as_an_image_block(
    gateway: Gateway, stream: bool
) -> None:
    """Issue 31: an image reaches the engine or is refused, in every upstream mode; here,
    as the image block the client sent, in its place, pixels and all."""
    gateway.engine.push(Reply(content="A grey square."))
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": base64_png(16, 16)},
    }
    content: Any = [{"type": "text", "text": "What is in this image?"}, image]
    body: dict[str, Any] = {
        "model": "m",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": content}],
    }
    client = gateway.anthropic()
    if stream:
        with client.messages.stream(**body) as events:
            message = events.get_final_message()
    else:
        message = client.messages.create(**body)
    assert [block.type for block in message.content] == ["text"]
    assert gateway.engine.requests[-1]["messages"] == [{"role": "user", "content": content}]
