"""``/v1/responses`` and ``/v1/responses/render`` against the real server, with the SDK.

Requests go through both gateway modes (an engine's ``/v1/completions`` and a leaky hosted
``/v1/chat/completions``), answered to ``client.responses.create(...)`` and
``client.responses.stream(...).get_final_response()``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest
from fastapi.testclient import TestClient

from dsmlkit.dialects import V4_1
from dsmlkit.render.tokens import load_tokenizer
from dsmlkit.server.local_routes import SEALED_MARKER
from dsmlkit.server.sealing import KeyRing
from tests.helpers import write_block
from tests.server.conftest import Gateway
from tests.server.fake_engine import FakeEngine, Reply
from tests.server.sdk import ask, declared

DATA = Path(__file__).parent.parent / "data"
VECTORS = [
    v for v in json.loads((DATA / "parse.json").read_text())["vectors"] if not v.get("options")
]
WEATHER_TOOL = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
WEATHER = write_block(V4_1, [("get_weather", {"city": "Paris", "days": 2})])


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("vector", VECTORS, ids=[v["id"] for v in VECTORS])
def test_recorded_outputs_reach_responses_clients_intact(
    completions_gateway: Gateway, vector: dict[str, Any], stream: bool
) -> None:
    completions_gateway.engine.push(Reply(text=vector["text"], chunk_size=3))
    expected = vector["expected"]
    tools = declared("responses", *[call["name"] for call in expected["calls"]])
    thinking = vector["mode"] == "thinking"
    answer = ask(completions_gateway, "responses", stream, thinking=thinking, **tools)
    assert answer.content == (expected.get("content") or "")
    assert answer.reasoning == (expected.get("reasoning") or "")
    assert [(name, args) for _, name, args in answer.calls] == [
        (call["name"], call["arguments"]) for call in expected["calls"]
    ]
    assert all(call_id.startswith("call_") for call_id, _, _ in answer.calls)
    assert answer.finish == "completed"


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_leaked_dsml_from_a_chat_upstream_is_repaired(chat_gateway: Gateway, stream: bool) -> None:
    chat_gateway.engine.push(Reply(content="Let me check." + WEATHER, chunk_size=4))
    answer = ask(
        chat_gateway, "responses", stream, thinking=False, **declared("responses", "get_weather")
    )
    assert answer.content == "Let me check."
    assert [(name, args) for _, name, args in answer.calls] == [
        ("get_weather", {"city": "Paris", "days": 2})
    ]
    sent = chat_gateway.engine.requests[-1]
    assert sent["messages"] == [{"role": "user", "content": "go"}]
    assert sent["chat_template_kwargs"] == {"thinking": False} and sent["stream"] is True


def test_cut_off_output_is_incomplete(completions_gateway: Gateway) -> None:
    engine = completions_gateway.engine
    engine.push(*[Reply(text="</think>A long answ", finish_reason="length")] * 2)
    for stream in (False, True):
        answer = ask(completions_gateway, "responses", stream, thinking=True)
        assert (answer.content, answer.finish) == ("A long answ", "incomplete")


def test_render_route_matches_chat_and_what_the_engine_gets(completions_gateway: Gateway) -> None:
    chat = {
        "model": "client-model",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather?"},
        ],
        "tools": [{"type": "function", "function": {"name": "get_weather"}}],
        "max_tokens": 77,
        "temperature": 0.3,
        "reasoning_effort": "high",
    }
    responses = {
        "model": "client-model",
        "instructions": "Be brief.",
        "input": "Weather?",
        "tools": [{"type": "function", "name": "get_weather"}, {"type": "web_search"}],
        "max_output_tokens": 77,
        "temperature": 0.3,
        "reasoning": {"effort": "high", "summary": "auto"},
    }
    with completions_gateway.http() as http:
        chat_rendered = http.post("/v1/chat/completions/render", json=chat).json()
        rendered = http.post("/v1/responses/render", json=responses).json()
        reply = http.post("/v1/responses", json=responses)
    assert rendered["prompt"] == chat_rendered["prompt"]
    assert rendered["token_ids"] == chat_rendered["token_ids"]
    assert rendered["sampling_params"] == chat_rendered["sampling_params"]
    assert rendered["request_id"].startswith("resp_")
    assert any("web_search" in note for note in rendered["notes"])
    assert reply.status_code == 200 and reply.json()["object"] == "response"
    assert completions_gateway.engine.requests[-1]["prompt"] == rendered["token_ids"]


def test_render_route_without_an_upstream(local_client: TestClient) -> None:
    response = local_client.post("/v1/responses/render", json={"model": "m", "input": "Hi"})
    assert response.status_code == 200
    assert response.json()["prompt"].endswith("<｜User｜>Hi<｜Assistant｜><think>")
    missing = local_client.post("/v1/responses", json={"model": "m", "input": "Hi"})
    assert missing.status_code == 404
    assert set(missing.json()["error"]) == {"message", "type", "param", "code"}


def test_codex_turn_with_namespaces_and_sealed_reasoning(completions_gateway: Gateway) -> None:
    """A stateless Codex-style client: the namespaced call comes back split, and its next
    request restores the sealed reasoning, which the engine's prompt then holds."""
    engine = completions_gateway.engine
    call = write_block(V4_1, [("mcp__docs__search", {"q": "dsml"})])
    engine.push(Reply(text=f"Search the docs.</think>{call}", chunk_size=4))
    tools = [
        {"type": "function", "name": "shell", "parameters": {"type": "object"}},
        {
            "type": "namespace",
            "name": "mcp__docs__",
            "description": "Docs",
            "tools": [{"type": "function", "name": "search", "parameters": {"type": "object"}}],
        },
        {"type": "web_search"},
    ]
    first_input = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}
    ]
    request: dict[str, Any] = {
        "model": "m",
        "instructions": "You are Codex.",
        "input": first_input,
        "tools": tools,
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "session-1",
        "extra_body": {"client_metadata": {"turn": "1"}},
    }
    client = completions_gateway.openai()
    with client.responses.stream(**request) as stream:
        final = stream.get_final_response()
    reasoning, function_call = final.output
    assert reasoning.type == "reasoning" and reasoning.encrypted_content
    assert function_call.type == "function_call"
    assert (function_call.namespace, function_call.name) == ("mcp__docs__", "search")

    engine.push(Reply(text="</think>Found it.", chunk_size=4))
    returned = [item.model_dump(exclude_none=True) for item in final.output]
    returned[0]["content"] = []  # only the sealed copy of the reasoning goes back
    follow_up = {
        **request,
        "input": [
            *first_input,
            *returned,
            {"type": "function_call_output", "call_id": function_call.call_id, "output": "hit"},
        ],
    }
    answer = client.responses.create(**follow_up)
    assert answer.output_text == "Found it."
    prompt = completions_gateway.engine.requests[-1]["prompt"]
    assert "Search the docs." in load_tokenizer(None).decode(prompt)
    with completions_gateway.http() as http:
        shown = http.post("/v1/responses/render", json=_plain(follow_up)).json()
    # The render route never shows what a token holds: a marker in its place, no ids.
    assert (shown["prompt_tokens"], shown["token_ids"]) == (len(prompt), None)
    assert "Search the docs." not in shown["prompt"] and SEALED_MARKER in shown["prompt"]
    assert 'invoke name="mcp__docs__search"' in shown["prompt"]


def _plain(request: dict[str, Any]) -> dict[str, Any]:
    """The request body as sent on the wire (``extra_body`` merged)."""
    body = {key: value for key, value in request.items() if key != "extra_body"}
    return {**body, **request.get("extra_body", {})}


@pytest.mark.slow
def test_a_configured_key_seals_across_servers(
    start_gateway: Callable[..., str], engine: FakeEngine
) -> None:
    """A token sealed under the shared secret opens on every server holding it (also as an
    older secret of a ring); elsewhere it is read as sent (here: no text), with a note."""
    shared, other_secret = "shared-secret-".ljust(32, "x"), "another-secret-".ljust(32, "y")
    keyed = Gateway(start_gateway(state_secret=shared), engine)
    rotated = Gateway(start_gateway(state_secret=f"{other_secret},{shared}"), engine)
    other = Gateway(start_gateway(state_secret=other_secret), engine)
    item = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [],
        "encrypted_content": KeyRing([shared.encode()]).seal("Sealed elsewhere.", "m"),
    }
    call = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"}
    body = {
        "model": "m",
        "tools": [WEATHER_TOOL],
        "input": [
            {"role": "user", "content": "q"},
            item,
            call,
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        ],
    }
    for opens in (keyed, rotated):
        with opens.http() as http:
            shown = http.post("/v1/responses/render", json=body).json()
        assert shown["token_ids"] is None and SEALED_MARKER in shown["prompt"]
    with other.http() as http:
        shown = http.post("/v1/responses/render", json=body).json()
    assert shown["token_ids"] is not None and SEALED_MARKER not in shown["prompt"]
    assert any("input[1].encrypted_content: not opened" in note for note in shown["notes"])


def test_malformed_bodies_are_400s_with_param_paths(completions_gateway: Gateway) -> None:
    client = completions_gateway.openai()
    cases: list[tuple[dict[str, Any], str]] = [
        ({"model": "m", "input": []}, "input"),
        (
            {
                "model": "m",
                "input": [{"type": "function_call_output", "call_id": "x", "output": ""}],
            },
            "input[0].call_id",
        ),
        ({"model": "m", "input": "x", "tool_choice": "required"}, "tool_choice"),
        ({"model": "m", "input": "x", "reasoning": {"effort": "huge"}}, "reasoning.effort"),
    ]
    for body, param in cases:
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(**body)
        assert caught.value.status_code == 400
        assert caught.value.param == param
        assert caught.value.type == "invalid_request_error"
    with completions_gateway.http() as http:
        broken = http.post(
            "/v1/responses", content=b"{not json", headers={"content-type": "application/json"}
        )
        render_broken = http.post("/v1/responses/render", json=[1])
    assert broken.status_code == 400 and broken.json()["error"]["type"] == "invalid_request_error"
    assert render_broken.status_code == 400
    assert completions_gateway.engine.requests == []


def test_upstream_failure_mid_stream_is_response_failed(completions_gateway: Gateway) -> None:
    completions_gateway.engine.push(Reply(text="The answer keeps going. " * 8, drop_after=3))
    client = completions_gateway.openai()
    with client.responses.stream(model="m", input="go") as stream:
        kinds = [event.type for event in stream]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.failed"


def test_upstream_error_before_the_stream_is_an_error_status(
    completions_gateway: Gateway,
) -> None:
    completions_gateway.engine.push(Reply(status=429))
    with pytest.raises(openai.RateLimitError):
        completions_gateway.openai().responses.create(model="m", input="go")
