"""Anthropic ``thinking.display: "omitted"`` (Claude Code's ``adaptive`` setting): thinking
blocks with an empty text and a signature, streamed and not, in both upstream modes; the
reasoning itself comes back from the gateway's state on the next turn."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import pytest
from anthropic.types import Message, ToolParam

from tests.server.conftest import Gateway, gateway_for_mode
from tests.server.fake_engine import FakeEngine, Reply
from tests.server.test_reasoning_roundtrip import ANTHROPIC_TOOLS, CALL_TEXT, REASONING

OMITTED: list[dict[str, Any]] = [
    {"type": "adaptive", "display": "omitted"},
    {"type": "enabled", "budget_tokens": 1024, "display": "omitted"},
]
UPSTREAM_CALL = {"id": "call_up_weather_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
QUESTION = {"role": "user", "content": "Weather in Paris?"}


@pytest.fixture(params=["completions", "chat"])
def gateway(
    request: pytest.FixtureRequest, start_gateway: Callable[..., str], engine: FakeEngine
) -> Gateway:
    return gateway_for_mode(request.param, start_gateway, engine)


def chat_mode(gateway: Gateway) -> bool:
    return gateway.engine.served == ("m",)


def create(gateway: Gateway, stream: bool, **body: Any) -> tuple[Message, list[str]]:
    """The message and, streamed, the types of its block deltas."""
    client = gateway.anthropic()
    fields: dict[str, Any] = {"model": "m", "max_tokens": 4096, **body}
    if "tools" in fields:
        fields["tools"] = cast("list[ToolParam]", fields["tools"])
    if not stream:
        return client.messages.create(**fields), []
    with client.messages.stream(**fields) as events:
        deltas: list[str] = [e.delta.type for e in events if e.type == "content_block_delta"]
        message: Message = events.get_final_message()
        return message, deltas


def first_turn(gateway: Gateway, stream: bool, thinking: dict[str, Any]) -> Message:
    if chat_mode(gateway):
        reply = Reply(reasoning=REASONING, tool_calls=(UPSTREAM_CALL,), finish_reason="tool_calls")
    else:
        reply = Reply(text=CALL_TEXT)
    gateway.engine.push(reply)
    message, deltas = create(
        gateway, stream, thinking=thinking, tools=ANTHROPIC_TOOLS, messages=[QUESTION]
    )
    if stream:  # the block opens and closes with its signature, its text never sent
        assert "thinking_delta" not in deltas and "signature_delta" in deltas
    return message


def reasoning_sent_upstream(gateway: Gateway) -> str:
    """The prompt the engine got (completions) or its assistant turn's reasoning (chat)."""
    sent = gateway.engine.requests[-1]
    if not chat_mode(gateway):
        prompt: str = sent["prompt"]
        return prompt
    [assistant] = [m for m in sent["messages"] if m["role"] == "assistant"]
    reasoning: str = assistant.get("reasoning_content", "")
    return reasoning


@pytest.mark.parametrize("thinking", OMITTED, ids=["adaptive", "enabled"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_omitted_thinking_is_an_empty_signed_block_and_comes_back(
    gateway: Gateway, stream: bool, thinking: dict[str, Any]
) -> None:
    message = first_turn(gateway, stream, thinking)
    block, call = message.content
    assert block.type == "thinking" and block.thinking == "" and block.signature
    assert call.type == "tool_use" and call.name == "get_weather"
    # turn 2: the client echoes the blocks exactly as it got them, with the tool's result
    echoed = [b.model_dump(exclude_none=True) for b in message.content]
    result = {"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}
    history = [QUESTION, {"role": "assistant", "content": echoed}]
    history.append({"role": "user", "content": [result]})
    gateway.engine.push(Reply(text="Sunny.", content="Sunny."))
    create(gateway, stream, thinking=thinking, tools=ANTHROPIC_TOOLS, messages=history)
    assert REASONING in reasoning_sent_upstream(gateway)


def test_without_display_the_thinking_is_shown(gateway: Gateway) -> None:
    message = first_turn(gateway, False, {"type": "adaptive"})
    assert message.content[0].type == "thinking" and message.content[0].thinking == REASONING
