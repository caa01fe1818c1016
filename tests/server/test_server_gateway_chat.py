"""The gateway in front of a leaky hosted endpoint, DeepSeek-like (the fake engine's
:mod:`~tests.server.fake_hosted` endpoints), driven by the official SDKs.

The leak tests run through real ``dsmlkit serve`` processes, one per hosted upstream kind
(``--upstream-api chat``: ``/v1/chat/completions``; ``--upstream-api messages``: the
Anthropic-format ``/v1/messages``, where the leak sits in text and thinking blocks), for
the three client APIs, streamed and not; what is particular to chat mode follows.
"""

from __future__ import annotations

from typing import Any

import pytest

from dsmlkit.dialects import ASCII_MARKER, V4, V4_1
from tests.helpers import write_block
from tests.server.conftest import HOSTED_KINDS, HOSTED_MODELS, Gateway
from tests.server.fake_engine import FakeEngine, Reply
from tests.server.sdk import ask, declared

# Real dsmlkit serve processes, one per upstream kind.
pytestmark = pytest.mark.slow

APIS = [("openai", False), ("openai", True), ("anthropic", False), ("anthropic", True)]
API_IDS = ["openai", "openai-stream", "anthropic", "anthropic-stream"]
ALL_APIS = [*APIS, ("responses", False), ("responses", True)]
ALL_API_IDS = [*API_IDS, "responses", "responses-stream"]
#: The hosted upstream kinds (``--upstream-api``).
#: What each client API calls an answer that ends in calls, and one that does not.
CALL_FINISH = {"openai": "tool_calls", "anthropic": "tool_use", "responses": "completed"}
STOP_FINISH = {"openai": "stop", "anthropic": "end_turn", "responses": "completed"}

NOTE = {"text": "closing tags </｜DSML｜ parameter> and </｜DSML｜ invoke> are text", "n": 2}
LEAKED = "Let me check." + write_block(V4_1, [("get_weather", {"city": "Paris"}), ("note", NOTE)])
FULL = write_block(V4_1, [("get_weather", {"city": "Paris"})])
#: The leak shapes replayed (as tests/test_parse_recoveries.py and the LiteLLM proxy test
#: name them); each also comes cut into 1- and 7-character pieces.
LEAKS = {
    "full-width": FULL,
    "ascii": FULL.replace("｜DSML｜", "|DSML|"),
    "doubled-bars": FULL.replace("｜DSML｜", "‖DSML‖"),
    "spaced": FULL.replace("｜DSML｜", " | DSML | "),
}


@pytest.fixture(params=HOSTED_KINDS)
def hosted(
    request: pytest.FixtureRequest, hosted_processes: dict[str, str], engine: FakeEngine
) -> Gateway:
    """The process of one hosted upstream kind in front of the fake engine."""
    engine.served = HOSTED_MODELS
    return Gateway(hosted_processes[request.param], engine)


def _names_and_args(answer: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(name, args) for _, name, args in answer.calls]


def _cut(text: str, size: int) -> tuple[str, ...]:
    return tuple(text[i : i + size] for i in range(0, len(text), size))


@pytest.mark.parametrize("size", [0, 1, 7], ids=["whole", "cut-1", "cut-7"])
@pytest.mark.parametrize("shape", list(LEAKS))
@pytest.mark.parametrize(("api", "stream"), ALL_APIS, ids=ALL_API_IDS)
def test_every_leak_shape_becomes_a_call(
    hosted: Gateway, api: str, stream: bool, shape: str, size: int
) -> None:
    leaked = "Checking." + LEAKS[shape]
    hosted.engine.push(Reply(pieces=_cut(leaked, size) if size else (leaked,)))
    answer = ask(hosted, api, stream, thinking=False, **declared(api, "get_weather"))
    assert answer.content == "Checking."
    assert _names_and_args(answer) == [("get_weather", {"city": "Paris"})]
    assert answer.finish == CALL_FINISH[api]


@pytest.mark.parametrize(("api", "stream"), ALL_APIS, ids=ALL_API_IDS)
def test_leaked_dsml_in_content_is_repaired_into_calls(
    hosted: Gateway, api: str, stream: bool
) -> None:
    hosted.engine.push(Reply(content=LEAKED, chunk_size=3))
    answer = ask(hosted, api, stream, thinking=False, **declared(api, "get_weather", "note"))
    assert answer.content == "Let me check."
    assert _names_and_args(answer) == [("get_weather", {"city": "Paris"}), ("note", NOTE)]
    assert answer.finish == CALL_FINISH[api]


@pytest.mark.parametrize(("api", "stream"), ALL_APIS, ids=ALL_API_IDS)
def test_leaked_dsml_in_reasoning_is_repaired(hosted: Gateway, api: str, stream: bool) -> None:
    block = write_block(V4, [("search", {"q": "dsml"})], marker=ASCII_MARKER)
    hosted.engine.push(Reply(reasoning="Search first." + block, chunk_size=4))
    answer = ask(hosted, api, stream, thinking=True, **declared(api, "search"))
    assert answer.reasoning == "Search first."
    assert answer.content == ""
    assert _names_and_args(answer) == [("search", {"q": "dsml"})]


@pytest.mark.parametrize(("api", "stream"), ALL_APIS, ids=ALL_API_IDS)
def test_proper_tool_calls_pass_through_after_repaired_ones(
    hosted: Gateway, api: str, stream: bool
) -> None:
    proper = {"id": "call_upstream_0001", "name": "get_time", "arguments": '{"tz": "UTC"}'}
    hosted.engine.push(
        Reply(content=LEAKED, tool_calls=(proper,), finish_reason="tool_calls", chunk_size=5)
    )
    tools = declared(api, "get_weather", "note", "get_time")
    answer = ask(hosted, api, stream, thinking=False, **tools)
    assert _names_and_args(answer) == [
        ("get_weather", {"city": "Paris"}),
        ("note", NOTE),
        ("get_time", {"tz": "UTC"}),
    ]
    assert answer.calls[2][0] == "call_upstream_0001"


@pytest.mark.parametrize(("api", "stream"), ALL_APIS, ids=ALL_API_IDS)
def test_plain_answers_pass_unchanged(hosted: Gateway, api: str, stream: bool) -> None:
    text = "No tools needed: 2 < 3 and <b>bold</b> stays."
    hosted.engine.push(Reply(content=text, reasoning="Easy.", chunk_size=2))
    answer = ask(hosted, api, stream, thinking=True)
    assert (answer.reasoning, answer.content, answer.calls) == ("Easy.", text, [])
    assert answer.finish == STOP_FINISH[api]


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_cut_off_leak_is_not_a_call(hosted: Gateway, api: str) -> None:
    hosted.engine.push(Reply(content=LEAKED[: LEAKED.index("Paris")], finish_reason="length"))
    answer = ask(hosted, api, False, thinking=False)
    finish = {"openai": "length", "anthropic": "max_tokens"}[api]
    assert (answer.content, answer.calls, answer.finish) == ("Let me check.", [], finish)


def test_openai_request_is_forwarded_as_sent(chat_gateway: Gateway) -> None:
    """…to the configured upstream only, whatever the request says."""
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    body = {
        "model": "deepseek-chat",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": tools,
        "temperature": 0.2,
        "user": "someone",
        "base_url": "http://127.0.0.1:9/v1",
    }
    steering = {"x-forwarded-host": "127.0.0.1:9", "host": "127.0.0.1:9"}
    with chat_gateway.http() as http:
        assert http.post("/v1/chat/completions", json=body, headers=steering).status_code == 200
    sent = chat_gateway.engine.requests[-1]
    assert sent == {**body, "stream": True, "stream_options": {"include_usage": True}}


def test_anthropic_request_is_converted_to_chat(chat_gateway: Gateway) -> None:
    chat_gateway.engine.push(Reply(content="Sunny."))
    message = chat_gateway.anthropic().messages.create(
        model="claude-via-gateway",
        max_tokens=300,
        system="Be brief.",
        tools=[{"name": "get_weather", "input_schema": {"type": "object"}}],
        messages=[
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sun"}],
            },
        ],
    )
    assert message.content[0].type == "text" and message.content[0].text == "Sunny."
    sent = chat_gateway.engine.requests[-1]
    assert sent["model"] == "claude-via-gateway"
    assert sent["max_tokens"] == 300
    assert sent["stream"] is True
    assert [m["role"] for m in sent["messages"]] == ["system", "user", "assistant", "tool"]
    assert sent["messages"][3] == {"role": "tool", "tool_call_id": "toolu_1", "content": "sun"}
    assert sent["tools"][0]["function"]["name"] == "get_weather"


@pytest.mark.slow
def test_model_flag_overrides_the_forwarded_model(start_gateway: Any, engine: FakeEngine) -> None:
    engine.served = HOSTED_MODELS
    gateway = Gateway(start_gateway(upstream_api="chat", model="hosted-model"), engine)
    engine.push(Reply(content="ok"))
    answer = ask(gateway, "openai", False, thinking=False)
    assert answer.content == "ok"
    assert engine.requests[-1]["model"] == "hosted-model"


@pytest.mark.slow
def test_client_key_is_forwarded_only_when_the_server_has_no_key_of_its_own(
    start_gateway: Any, engine: FakeEngine
) -> None:
    engine.served = HOSTED_MODELS
    open_gateway = Gateway(start_gateway(upstream_api="chat"), engine)
    with open_gateway.http() as http:
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
        http.post("/v1/chat/completions", json=body, headers={"authorization": "Bearer sk-1"})
        http.post("/v1/messages", json={**body, "max_tokens": 5}, headers={"x-api-key": "sk-2"})
    keyed = Gateway(
        start_gateway(upstream_api="chat", api_key="gw-key", upstream_api_key="up-key"), engine
    )
    with keyed.http() as http:
        http.post("/v1/chat/completions", json=body, headers={"authorization": "Bearer gw-key"})
    assert engine.authorizations == ["Bearer sk-1", "Bearer sk-2", "Bearer up-key"]
