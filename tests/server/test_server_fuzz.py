"""Fuzzing every request route: mutated valid bodies never produce a 5xx.

Each example takes a valid body of the route and applies a few mutations at random paths:
a value replaced by one of another type (NaN, Infinity, huge numbers, lone surrogates,
deep nesting included), a key deleted, or an unknown key added. The gateway routes run
in-process against an upstream that always answers a short stream. The default budget
keeps the run near 20 s; ``DSMLKIT_FUZZ_EXAMPLES=5000`` runs longer locally.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsmlkit.dialects import DEFAULT_DIALECT
from dsmlkit.server import ServerConfig, create_app
from tests.server.mock_upstream import mock_upstream

EXAMPLES = int(os.environ.get("DSMLKIT_FUZZ_EXAMPLES", "40"))

TOOLS_OPENAI = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    }
]
TOOLS_ANTHROPIC = [
    {
        "name": "get_weather",
        "description": "Weather.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]
CHAT: dict[str, Any] = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "Look it up.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ],
    "tools": TOOLS_OPENAI,
    "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    "temperature": 0.5,
    "top_p": 0.9,
    "max_tokens": 50,
    "stop": ["###"],
    "reasoning_effort": "high",
    "response_format": {"type": "json_object"},
    "chat_template_kwargs": {"thinking": True},
    "stream": False,
}
MESSAGES: dict[str, Any] = {
    "model": "m",
    "max_tokens": 50,
    "system": [{"type": "text", "text": "Be brief."}],
    "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Look it up.", "signature": "x"},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"city": "P"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "sunny"}],
                    "is_error": False,
                }
            ],
        },
    ],
    "tools": TOOLS_ANTHROPIC,
    "tool_choice": {"type": "tool", "name": "get_weather"},
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "temperature": 0.5,
    "top_p": 0.9,
    "stop_sequences": ["###"],
    "stream": False,
}
PARSE = {
    "text": (
        'Hi.<｜DSML｜ calls><｜DSML｜ invoke name="get_weather"></｜DSML｜ invoke></｜DSML｜ calls>'
    ),
    "api": "openai",
    "dialect": DEFAULT_DIALECT.name,
    "start_in": "content",
    "tools": TOOLS_OPENAI,
    "finish_reason": "stop",
    "model": "m",
}
ROUTES: dict[str, list[dict[str, Any]]] = {
    "/v1/chat/completions": [
        CHAT,
        {**CHAT, "stream": True, "stream_options": {"include_usage": True}},
    ],
    "/v1/messages": [MESSAGES, {**MESSAGES, "stream": True}],
    "/v1/chat/completions/render": [CHAT],
    "/v1/messages/render": [MESSAGES],
    "/tokenize": [
        {"prompt": "hi <｜User｜>", "add_special_tokens": True, "return_token_strs": True},
        {"model": "m", "messages": CHAT["messages"][:2]},
    ],
    "/detokenize": [{"tokens": [0, 1, 2, 300]}],
    "/v1/messages/count_tokens": [{k: v for k, v in MESSAGES.items() if k != "max_tokens"}],
    "/v1/parse": [PARSE, {**PARSE, "api": "anthropic", "tools": TOOLS_ANTHROPIC}],
}

SSE = (
    b'data: {"choices": [{"index": 0, "text": "Hello", "finish_reason": null}]}\n\n'
    b'data: {"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]}\n\n'
    b"data: [DONE]\n\n"
)
CHAT_SSE = (
    b'data: {"choices": [{"index": 0, "delta": {"content": "Hello"}, "finish_reason": null}]}\n\n'
    b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n'
    b"data: [DONE]\n\n"
)


def _chat_sse(sent: dict[str, Any]) -> bytes:
    """A short chat answer; a call to the forced tool when ``tool_choice`` forces one (the
    gateway refuses an answer without it)."""
    choice = sent.get("tool_choice")
    if choice != "required" and not isinstance(choice, dict):
        return CHAT_SSE
    name = (choice.get("function") or {}).get("name") if isinstance(choice, dict) else None
    function = {"name": name or sent["tools"][0]["function"]["name"], "arguments": "{}"}
    call = {"id": "call_fuzz_000000001", "type": "function", "function": function}
    delta = {"tool_calls": [{"index": 0, **call}]}
    chunks = [{"index": 0, "delta": delta, "finish_reason": "tool_calls"}]
    return b"data: " + json.dumps({"choices": chunks}).encode() + b"\n\ndata: [DONE]\n\n"


def _upstream(request: httpx.Request) -> httpx.Response:
    if request.url.path.endswith("/models"):
        return httpx.Response(200, json={"data": [{"id": "deepseek-v4.1", "max_model_len": 8192}]})
    if request.url.path.endswith("/completions"):
        chat = "chat" in request.url.path
        body = _chat_sse(json.loads(request.content)) if chat else SSE
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)
    return httpx.Response(404, json={"error": {"message": "no route"}})


@pytest.fixture(scope="module", params=["completions", "chat"])
def client(request: pytest.FixtureRequest, v41_tokenizer: str) -> Iterator[TestClient]:
    with mock_upstream(_upstream) as url:
        config = ServerConfig(upstream=url, upstream_api=request.param, tokenizer=v41_tokenizer)
        with TestClient(create_app(config), raise_server_exceptions=False) as test_client:
            yield test_client


#: A string standing for an array nested that deep (spliced in after encoding).
DEEP = "__deep_{}__"


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["\ud800", "a\udfffb", "<｜User｜>", "｜DSML｜", "", "auto", "tool", "user"]),
)
VALUES = st.one_of(
    SCALARS,
    st.lists(SCALARS, max_size=3),
    st.dictionaries(st.sampled_from(["type", "name", "text", "content", "x"]), SCALARS, max_size=3),
    st.sampled_from([DEEP.format(70), DEEP.format(1100)]),
    st.builds(lambda: {"type": ["tool"]}),
    st.builds(lambda: [{"type": None}]),
)


def json_paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path into ``value`` (its keys and indexes), the empty path first."""
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from json_paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from json_paths(item, (*path, index))


def _mutate(body: Any, path: tuple[Any, ...], action: str, new: Any) -> Any:
    if not path:
        return new if action == "replace" else body
    parent = body
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if action == "delete":
        if isinstance(parent, dict):
            del parent[last]
        else:
            parent.pop(last)
    elif action == "add" and isinstance(parent, dict):
        parent["fuzz_" + str(last)] = new
    else:
        parent[last] = new
    return body


@st.composite
def mutated(draw: st.DrawFn, bases: list[dict[str, Any]]) -> bytes:
    body: Any = json.loads(json.dumps(draw(st.sampled_from(bases))))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = list(json_paths(body))
        path = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        body = _mutate(body, path, action, draw(VALUES))
    text = json.dumps(body, allow_nan=True)
    for depth in (70, 1100):
        text = text.replace(json.dumps(DEEP.format(depth)), "[" * depth + "1" + "]" * depth)
    return text.encode()


@pytest.mark.slow
@pytest.mark.parametrize("route", list(ROUTES))
def test_mutated_bodies_never_get_a_5xx(client: TestClient, route: str) -> None:
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(body=mutated(ROUTES[route]))
    def check(body: bytes) -> None:
        response = client.post(route, content=body, headers={"content-type": "application/json"})
        assert response.status_code < 500, (body[:2000], response.text[:2000])
        if response.status_code >= 400:
            error = response.json()["error"]
            assert error["message"] and error["type"]

    check()


@pytest.mark.parametrize("route", list(ROUTES))
def test_valid_bodies_succeed(client: TestClient, route: str) -> None:
    for body in ROUTES[route]:
        response = client.post(route, json=body)
        assert response.status_code == 200, response.text
        assert "error" not in response.text or route == "/v1/parse"
