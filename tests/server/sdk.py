"""Ask a gateway through the official SDKs and reduce the answer to comparable parts.

Streams are accumulated by the SDKs' own helpers (openai's ``ChatCompletionStreamState``
and ``responses.stream`` / ``get_final_response``, anthropic's ``messages.stream`` /
``get_final_message``), which also check the stream's grammar; reasoning (a DeepSeek
extension on the Chat side) is summed from the chunks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

import anthropic
import openai
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.responses import Response


class Clients(Protocol):
    """A running gateway's SDK clients (:class:`~tests.server.conftest.Gateway` is one)."""

    def openai(self) -> openai.OpenAI: ...

    def anthropic(self) -> anthropic.Anthropic: ...


@dataclass(frozen=True)
class Answer:
    """What a client saw: text, reasoning, calls ``(id, name, arguments)`` and why it stopped."""

    content: str
    reasoning: str
    calls: list[tuple[str, str, dict[str, Any]]]
    finish: str


def _arguments(text: str) -> dict[str, Any]:
    """Arguments of a call; a cut-off stream's unfinished JSON is kept as ``{"partial": …}``."""
    try:
        arguments: dict[str, Any] = json.loads(text)
    except ValueError:
        return {"partial": text}
    return arguments


def declared(api: str, *names: str) -> dict[str, Any]:
    """``tools`` (for :func:`ask`) declaring ``names`` with any arguments, in ``api``'s
    spelling (Chat's for Responses, which :func:`ask` converts); none for no names. The
    gateway lets through only calls to declared tools."""
    unique = dict.fromkeys(names)
    if not unique:
        return {}
    if api == "anthropic":
        return {"tools": [{"name": name, "input_schema": {"type": "object"}} for name in unique]}
    return {
        "tools": [
            {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
            for name in unique
        ]
    }


def ask(gateway: Clients, api: str, stream: bool, *, thinking: bool, **extra: Any) -> Answer:
    """One request with a single user turn (plus ``extra`` request fields)."""
    messages = extra.pop("messages", [{"role": "user", "content": "go"}])
    if api == "responses":
        tools = [{"type": "function", **tool["function"]} for tool in extra.pop("tools", ())]
        body: dict[str, Any] = {"model": "m", "input": messages, **extra}
        if tools:
            body["tools"] = tools
        if not thinking:
            body["reasoning"] = {"effort": "none"}
        client_r = gateway.openai()
        return ask_responses_stream(client_r, body) if stream else ask_responses(client_r, body)
    if api == "openai":
        body = {"model": "m", "messages": messages, **extra}
        if not thinking:
            body["extra_body"] = {"chat_template_kwargs": {"thinking": False}}
        client = gateway.openai()
        return ask_openai_stream(client, body) if stream else ask_openai(client, body)
    body = {"model": "m", "max_tokens": 4096, "messages": messages, **extra}
    if thinking:
        body["thinking"] = {"type": "enabled", "budget_tokens": 1024}
    client_a = gateway.anthropic()
    return ask_anthropic_stream(client_a, body) if stream else ask_anthropic(client_a, body)


def ask_openai(client: openai.OpenAI, body: dict[str, Any]) -> Answer:
    completion = client.chat.completions.create(**body)
    choice = completion.choices[0]
    extra = choice.message.model_extra or {}
    calls = [
        (call.id, call.function.name, _arguments(call.function.arguments))
        for call in choice.message.tool_calls or []
        if call.type == "function"
    ]
    return Answer(
        choice.message.content or "",
        extra.get("reasoning_content") or "",
        calls,
        choice.finish_reason,
    )


def ask_openai_stream(client: openai.OpenAI, body: dict[str, Any]) -> Answer:
    state: ChatCompletionStreamState = ChatCompletionStreamState()
    reasoning = []
    for chunk in client.chat.completions.create(stream=True, **body):
        state.handle_chunk(chunk)
        for choice in chunk.choices:
            piece = (choice.delta.model_extra or {}).get("reasoning_content")
            reasoning.append(piece or "")
    choice = state.current_completion_snapshot.choices[0]  # (the final one raises on length)
    calls = [
        (call.id, call.function.name, _arguments(call.function.arguments))
        for call in choice.message.tool_calls or []
    ]
    return Answer(choice.message.content or "", "".join(reasoning), calls, choice.finish_reason)


def _from_message(message: anthropic.types.Message) -> Answer:
    content = "".join(block.text for block in message.content if block.type == "text")
    reasoning = "".join(block.thinking for block in message.content if block.type == "thinking")
    calls = [
        (block.id, block.name, dict(block.input))
        for block in message.content
        if block.type == "tool_use"
    ]
    return Answer(content, reasoning, calls, str(message.stop_reason))


def ask_anthropic(client: anthropic.Anthropic, body: dict[str, Any]) -> Answer:
    return _from_message(client.messages.create(**body))


def ask_anthropic_stream(client: anthropic.Anthropic, body: dict[str, Any]) -> Answer:
    with client.messages.stream(**body) as stream:
        return _from_message(stream.get_final_message())


def from_response(response: Response) -> Answer:
    """What a Responses client saw; ``finish`` is the response's status."""
    content, reasoning, calls = [], [], []
    for item in response.output:
        if item.type == "message":
            content += [part.text for part in item.content if part.type == "output_text"]
        elif item.type == "reasoning":
            reasoning += [part.text for part in item.content or ()]
        elif item.type == "function_call":
            calls.append((item.call_id, item.name, _arguments(item.arguments)))
    return Answer("".join(content), "".join(reasoning), calls, str(response.status))


def ask_responses(client: openai.OpenAI, body: dict[str, Any]) -> Answer:
    return from_response(client.responses.create(**body))


def ask_responses_stream(client: openai.OpenAI, body: dict[str, Any]) -> Answer:
    with client.responses.stream(**body) as stream:
        for event in stream:
            if event.type in ("response.incomplete", "response.failed"):
                return from_response(event.response)  # get_final_response wants completed
        return from_response(stream.get_final_response())
