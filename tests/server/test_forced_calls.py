"""Forced tool calls through the official SDKs: tool_choice required or named, and
parallel_tool_calls false, in completions and chat upstream modes, streamed and not."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from dsmlkit.dialects import EOS, V4_1, Dialect
from dsmlkit.render.tokens import load_tokenizer
from dsmlkit.server.reqlog import FIELDS
from tests.helpers import ALL_DIALECTS, write_block, write_invoke
from tests.server.conftest import Gateway
from tests.server.fake_engine import FakeEngine, Reply
from tests.server.sdk import Answer, ask
from tests.server.test_reasoning_roundtrip import ANTHROPIC_TOOLS, TOOLS

CITY_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
BOTH_TOOLS = [*TOOLS, CITY_TOOL]
BOTH_ANTHROPIC = [
    *ANTHROPIC_TOOLS,
    {"name": "get_time", "input_schema": CITY_TOOL["function"]["parameters"]},
]
APIS = [("openai", False), ("openai", True), ("anthropic", False), ("anthropic", True)]
API_IDS = ["openai", "openai-stream", "anthropic", "anthropic-stream"]

BLOCK_OPENER = f"\n\n{V4_1.block_open()}\n"
WEATHER_INVOKE = write_invoke(V4_1, "get_weather", {"city": "Paris"}, "｜DSML｜")
#: What the model writes after the block opener, to the end of the block.
REST_OF_BLOCK = f"{WEATHER_INVOKE}\n{V4_1.block_close()}"
#: What it writes after the named invoke's opener.
REST_OF_INVOKE = REST_OF_BLOCK.split('">\n', 1)[1]


@pytest.fixture
def text_gateway(start_gateway: Callable[..., str], engine: FakeEngine) -> Gateway:
    return Gateway(start_gateway(upstream_api="completions", tokenizer="none"), engine)


def forced(api: str, choice: str, *, parallel: bool = True) -> dict[str, Any]:
    """Request fields for a ``required`` (``any``) or ``named`` choice."""
    if api == "openai":
        fields: dict[str, Any] = {"tools": BOTH_TOOLS}
        if choice == "required":
            fields["tool_choice"] = "required"
        elif choice == "named":
            fields["tool_choice"] = {"type": "function", "function": {"name": "get_weather"}}
        if not parallel:
            fields["parallel_tool_calls"] = False
        return fields
    kind = {"required": {"type": "any"}, "named": {"type": "tool", "name": "get_weather"}}
    tool_choice: dict[str, Any] = dict(kind.get(choice, {"type": "auto"}))
    if not parallel:
        tool_choice["disable_parallel_tool_use"] = True
    return {"tools": BOTH_ANTHROPIC, "tool_choice": tool_choice}


def assert_weather_call(answer: Answer, api: str) -> None:
    assert [(name, args) for _, name, args in answer.calls] == [("get_weather", {"city": "Paris"})]
    assert answer.finish == ("tool_calls" if api == "openai" else "tool_use")


# --- completions mode, chat (no thinking) ---------------------------------------------------


@pytest.mark.parametrize(("api", "stream"), APIS, ids=API_IDS)
def test_required_in_chat_mode_opens_the_block_in_the_prompt(
    text_gateway: Gateway, api: str, stream: bool
) -> None:
    text_gateway.engine.push(Reply(text=REST_OF_BLOCK))
    answer = ask(text_gateway, api, stream, thinking=False, **forced(api, "required"))
    assert_weather_call(answer, api)
    assert answer.content == ""
    prompt = text_gateway.engine.requests[-1]["prompt"]
    assert prompt.endswith("<｜Assistant｜></think>" + BLOCK_OPENER)


@pytest.mark.parametrize(("api", "stream"), APIS, ids=API_IDS)
def test_a_named_function_opens_its_invoke_in_the_prompt(
    text_gateway: Gateway, api: str, stream: bool
) -> None:
    text_gateway.engine.push(Reply(text=REST_OF_INVOKE))
    answer = ask(text_gateway, api, stream, thinking=False, **forced(api, "named"))
    assert_weather_call(answer, api)
    prompt = text_gateway.engine.requests[-1]["prompt"]
    assert prompt.endswith(BLOCK_OPENER + V4_1.invoke_open("get_weather") + "\n")


@pytest.mark.parametrize("dialect", ALL_DIALECTS, ids=lambda d: d.name)
def test_every_dialect_gets_its_own_opener(
    start_gateway: Callable[..., str], engine: FakeEngine, dialect: Dialect
) -> None:
    gateway = Gateway(start_gateway(tokenizer="none", dialect=dialect.name), engine)
    rest = write_block(dialect, [("get_weather", {"city": "Paris"})]).split('">\n', 1)[1]
    engine.push(Reply(text=rest))
    answer = ask(gateway, "openai", False, thinking=False, **forced("openai", "named"))
    assert_weather_call(answer, "openai")
    opener = f"\n\n{dialect.block_open()}\n{dialect.invoke_open('get_weather')}\n"
    assert engine.requests[-1]["prompt"].endswith(opener)


@pytest.mark.slow
def test_the_opener_goes_upstream_as_the_models_own_token_ids(
    completions_gateway: Gateway,
) -> None:
    completions_gateway.engine.push(Reply(text=REST_OF_INVOKE))
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "go"}],
        "chat_template_kwargs": {"thinking": False},
        **forced("openai", "named"),
    }
    with completions_gateway.http() as http:
        rendered = http.post("/v1/chat/completions/render", json=body).json()["token_ids"]
        assert http.post("/v1/chat/completions", json=body).status_code == 200
    sent = completions_gateway.engine.requests[-1]["prompt"]
    tokenizer = load_tokenizer(None)
    assert sent[: len(rendered)] == rendered
    opener = BLOCK_OPENER + V4_1.invoke_open("get_weather") + "\n"
    assert tokenizer.decode(sent[len(rendered) :]) == opener
    marker_id = tokenizer.encode_text("｜DSML｜", special=True)
    assert len(marker_id) == 1 and marker_id[0] in sent[len(rendered) :]  # one control token


# --- completions mode, thinking ---------------------------------------------------------------


@pytest.mark.parametrize(("api", "stream"), APIS, ids=API_IDS)
@pytest.mark.parametrize("choice", ["required", "named"])
def test_thinking_mode_reasons_then_a_second_request_opens_the_call(
    text_gateway: Gateway, api: str, stream: bool, choice: str
) -> None:
    engine = text_gateway.engine
    engine.push(
        Reply(text="I need the weather.", finish_reason="stop", stop_reason="</think>"),
        Reply(text=REST_OF_INVOKE if choice == "named" else REST_OF_BLOCK),
    )
    answer = ask(text_gateway, api, stream, thinking=True, max_tokens=100, **forced(api, choice))
    assert answer.reasoning == "I need the weather."
    assert_weather_call(answer, api)
    first, second = engine.requests[-2:]
    assert first["prompt"].endswith("<think>")
    assert first["stop"] == [EOS, "</think>"]
    opener = BLOCK_OPENER + (V4_1.invoke_open("get_weather") + "\n" if choice == "named" else "")
    assert second["prompt"] == first["prompt"] + "I need the weather.</think>" + opener
    assert second["stop"] == [EOS]
    # what the first request spent: its text and the stop string's tokens, as vLLM counts
    reasoned = len(engine.encode("I need the weather.</think>", add_special_tokens=False))
    assert second["max_tokens"] == 100 - reasoned


def test_thinking_mode_without_the_think_stop_still_gets_a_call(text_gateway: Gateway) -> None:
    """An engine that reports no stop_reason: a normal stop inside reasoning continues too."""
    text_gateway.engine.push(Reply(text="Hmm."), Reply(text=REST_OF_BLOCK))
    answer = ask(text_gateway, "openai", False, thinking=True, **forced("openai", "required"))
    assert_weather_call(answer, "openai")
    assert answer.reasoning == "Hmm."


def test_an_engine_that_answered_past_the_think_stop_is_not_asked_again(
    text_gateway: Gateway,
) -> None:
    """Its answer has no call, so it cannot go out (the choice is enforced)."""
    text_gateway.engine.push(Reply(text="Hmm.</think>It is sunny.", ignore_stop=True))
    with pytest.raises(openai.InternalServerError, match="made no call"):
        ask(text_gateway, "openai", False, thinking=True, **forced("openai", "required"))
    assert len(text_gateway.engine.requests) == 1


def test_a_call_cut_off_in_reasoning_is_not_continued(text_gateway: Gateway) -> None:
    text_gateway.engine.push(Reply(text="Long thoughts", finish_reason="length"))
    answer = ask(text_gateway, "openai", False, thinking=True, **forced("openai", "required"))
    assert answer.finish == "length" and answer.calls == []
    assert len(text_gateway.engine.requests) == 1


def test_a_failing_second_request_is_an_error_in_the_stream(text_gateway: Gateway) -> None:
    text_gateway.engine.push(Reply(text="Thinking.", stop_reason="</think>"), Reply(status=500))
    with pytest.raises(openai.APIError, match="upstream answered 500"):
        ask(text_gateway, "openai", True, thinking=True, **forced("openai", "required"))


# --- parallel_tool_calls false --------------------------------------------------------------


@pytest.mark.parametrize(("api", "stream"), APIS, ids=API_IDS)
def test_one_call_only_stops_at_the_first_invoke_closer(
    text_gateway: Gateway, api: str, stream: bool
) -> None:
    first_invoke = BLOCK_OPENER + WEATHER_INVOKE.removesuffix(V4_1.invoke_close())
    text_gateway.engine.push(
        Reply(text="Checking." + first_invoke, stop_reason=V4_1.invoke_close())
    )
    answer = ask(text_gateway, api, stream, thinking=False, **forced(api, "auto", parallel=False))
    assert_weather_call(answer, api)
    assert answer.content == "Checking."
    assert text_gateway.engine.requests[-1]["stop"] == [EOS, V4_1.invoke_close()]


@pytest.mark.parametrize(("api", "stream"), APIS, ids=API_IDS)
def test_an_engine_that_writes_a_second_call_anyway_is_cut(
    text_gateway: Gateway, api: str, stream: bool
) -> None:
    two = write_block(V4_1, [("get_weather", {"city": "Paris"}), ("get_time", {"city": "Oslo"})])
    text_gateway.engine.push(Reply(text=two))
    answer = ask(text_gateway, api, stream, thinking=False, **forced(api, "auto", parallel=False))
    assert_weather_call(answer, api)


def test_tool_choice_none_sets_no_call_stop(text_gateway: Gateway) -> None:
    text_gateway.engine.push(Reply(text="Fine."))
    fields = {**forced("openai", "auto", parallel=False), "tool_choice": "none"}
    ask(text_gateway, "openai", False, thinking=False, **fields)
    assert text_gateway.engine.requests[-1]["stop"] == [EOS]


# --- chat upstream mode -----------------------------------------------------------------------

UPSTREAM_CALL = {"id": "call_up_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
SECOND_CALL = {"id": "call_up_2", "name": "get_time", "arguments": '{"city": "Oslo"}'}


@pytest.mark.parametrize(("api", "stream"), APIS, ids=API_IDS)
def test_chat_mode_forwards_the_forced_choice(
    chat_gateway: Gateway, api: str, stream: bool
) -> None:
    chat_gateway.engine.push(Reply(tool_calls=(UPSTREAM_CALL,), finish_reason="tool_calls"))
    answer = ask(chat_gateway, api, stream, thinking=False, **forced(api, "named"))
    assert_weather_call(answer, api)
    sent = chat_gateway.engine.requests[-1]
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}


@pytest.mark.parametrize(("api", "stream"), APIS, ids=API_IDS)
def test_chat_mode_cuts_a_second_upstream_call(
    chat_gateway: Gateway, api: str, stream: bool
) -> None:
    reply = Reply(tool_calls=(UPSTREAM_CALL, SECOND_CALL), finish_reason="tool_calls")
    chat_gateway.engine.push(reply)
    answer = ask(chat_gateway, api, stream, thinking=False, **forced(api, "auto", parallel=False))
    assert_weather_call(answer, api)
    assert chat_gateway.engine.requests[-1]["parallel_tool_calls"] is False


@pytest.mark.parametrize(("api", "stream"), APIS, ids=API_IDS)
@pytest.mark.parametrize("choice", ["required", "named"])
def test_a_400_to_a_forced_choice_in_thinking_mode_retries_with_auto(
    chat_gateway: Gateway, api: str, stream: bool, choice: str
) -> None:
    engine = chat_gateway.engine  # it refuses a forced choice in thinking mode, as DeepSeek
    engine.push(
        Reply(reasoning="Weather it is.", tool_calls=(UPSTREAM_CALL,), finish_reason="tool_calls"),
    )
    answer = ask(chat_gateway, api, stream, thinking=True, **forced(api, choice))
    assert_weather_call(answer, api)
    assert answer.reasoning == "Weather it is."
    rejected, retried = engine.requests[-2:]
    assert rejected["tool_choice"] != "auto"
    assert retried["tool_choice"] == "auto"
    names = [tool["function"]["name"] for tool in retried["tools"]]
    assert names == (["get_weather"] if choice == "named" else ["get_weather", "get_time"])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_the_log_line_of_a_fallback_counts_it_beside_the_answers_diagnostics(
    chat_gateway: Gateway, stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    chat_gateway.engine.push(
        Reply(reasoning="Weather.", tool_calls=(UPSTREAM_CALL,), finish_reason="tool_calls"),
    )
    with caplog.at_level("INFO", logger="dsmlkit.server.access"):
        ask(chat_gateway, "openai", stream, thinking=True, **forced("openai", "required"))
        deadline = time.monotonic() + 2
        while not _access_lines(caplog) and time.monotonic() < deadline:
            time.sleep(0.01)  # the line is written after the last byte
    (line,) = _access_lines(caplog)
    assert line["diagnostics"]["tool_choice_fallback"] == 1


def _access_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [getattr(r, FIELDS) for r in caplog.records if r.name == "dsmlkit.server.access"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_fallback_without_a_call_is_an_honest_error(chat_gateway: Gateway, stream: bool) -> None:
    chat_gateway.engine.push(Reply(content="I would rather not."))
    with pytest.raises(openai.APIError, match="forced tool_choice in thinking mode"):
        ask(chat_gateway, "openai", stream, thinking=True, **forced("openai", "required"))


def test_anthropic_fallback_without_a_call_is_an_error_event(chat_gateway: Gateway) -> None:
    chat_gateway.engine.push(Reply(content="No."))
    with pytest.raises(anthropic.APIStatusError, match="made no call"):
        ask(chat_gateway, "anthropic", False, thinking=True, **forced("anthropic", "required"))


def test_a_400_without_thinking_is_the_requests_own_error(chat_gateway: Gateway) -> None:
    chat_gateway.engine.push(Reply(status=400))
    with pytest.raises(openai.BadRequestError):
        ask(chat_gateway, "openai", False, thinking=False, **forced("openai", "required"))
    assert len(chat_gateway.engine.requests) == 1
