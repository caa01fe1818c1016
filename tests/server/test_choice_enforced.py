"""tool_choice enforced on what reaches the client, through the official SDKs: every API
(Chat, Messages, Responses), both upstream modes, streamed and not, whatever the engine
writes. A named choice lets only that tool through, ``none`` no call, and ``required``
without a call is an error in the API's shape; what was held back is a diagnostic and a
log line."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from dsmlkit.dialects import V4_1
from dsmlkit.server.reqlog import FIELDS
from tests.helpers import write_block
from tests.server.conftest import Gateway, gateway_for_mode
from tests.server.fake_engine import FakeEngine, Reply
from tests.server.sdk import Answer, ask
from tests.server.test_forced_calls import BOTH_ANTHROPIC, BOTH_TOOLS

APIS = [(api, stream) for api in ("openai", "anthropic", "responses") for stream in (False, True)]
API_IDS = [f"{api}-{'stream' if stream else 'whole'}" for api, stream in APIS]
MODES = ["completions", "chat"]
WEATHER = ("get_weather", {"city": "Paris"})
EVIL = ("evil_tool", {"cmd": "rm -rf /"})
EVIL_CALL = {"id": "call_up_evil_0001", "name": "evil_tool", "arguments": '{"cmd": "rm -rf /"}'}
WEATHER_CALL = {"id": "call_up_weather_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
#: What each API calls a finished answer without calls, and one with calls.
NO_CALL_FINISH = {"openai": "stop", "anthropic": "end_turn", "responses": "completed"}
CALL_FINISH = {"openai": "tool_calls", "anthropic": "tool_use", "responses": "completed"}


@pytest.fixture
def gateway(
    request: pytest.FixtureRequest, start_gateway: Callable[..., str], engine: FakeEngine
) -> Gateway:
    """The gateway of the test's ``mode``: completions (text prompts) or chat."""
    return gateway_for_mode(request.param, start_gateway, engine)


def choice(api: str, kind: str) -> dict[str, Any]:
    """The tools and a ``named`` (get_weather), ``none`` or ``required`` choice in ``api``'s
    own spelling."""
    if api == "anthropic":
        spelled: Any = {
            "named": {"type": "tool", "name": "get_weather"},
            "none": {"type": "none"},
            "required": {"type": "any"},
        }[kind]
        return {"tools": BOTH_ANTHROPIC, "tool_choice": spelled}
    named: dict[str, Any] = {"type": "function", "name": "get_weather"}
    if api == "openai":
        named = {"type": "function", "function": {"name": "get_weather"}}
    return {"tools": BOTH_TOOLS, "tool_choice": named if kind == "named" else kind}


def engine_block(*calls: tuple[str, dict[str, Any]]) -> str:
    return write_block(V4_1, list(calls))


def held_back_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    lines = [getattr(r, FIELDS, {}) for r in caplog.records if r.name == "dsmlkit.server"]
    return [line for line in lines if line.get("event") == "tool_call_held_back"]


def access_diagnostics(caplog: pytest.LogCaptureFixture) -> dict[str, int]:
    """The diagnostics of the last request log line (written after the last byte)."""
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        lines = [getattr(r, FIELDS) for r in caplog.records if r.name == "dsmlkit.server.access"]
        if lines:
            diagnostics: dict[str, int] = lines[-1].get("diagnostics", {})
            return diagnostics
        time.sleep(0.01)
    raise AssertionError("no request log line")


def refused(gateway: Gateway, api: str, stream: bool, *, thinking: bool, **fields: Any) -> str:
    """The error message a client gets for an answer that cannot go out: a 502 in the
    API's shape, or the API's stream error event (Responses: ``response.failed``)."""
    if api == "responses" and stream:
        tools = [{"type": "function", **tool["function"]} for tool in fields.pop("tools")]
        body = {"model": "m", "input": "go", "tools": tools, **fields}
        if not thinking:
            body["reasoning"] = {"effort": "none"}
        with gateway.openai().responses.stream(**body) as events:
            failed = [e for e in events if e.type == "response.failed"]
        assert len(failed) == 1 and failed[0].response.error is not None
        return failed[0].response.error.message
    errors = (anthropic.APIError,) if api == "anthropic" else (openai.APIError,)
    with pytest.raises(errors) as raised:
        ask(gateway, api, stream, thinking=thinking, **fields)
    if not stream:
        assert getattr(raised.value, "status_code", None) == 502
    return str(raised.value)


def chat_mode(gateway: Gateway) -> bool:
    return gateway.engine.served == ("m",)


def only_weather(answer: Answer, api: str) -> None:
    assert [(name, args) for _, name, args in answer.calls] == [WEATHER]
    assert answer.finish == CALL_FINISH[api]


# --- a named tool_choice --------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("gateway", MODES, indirect=True)
@pytest.mark.parametrize(("api", "stream"), APIS, ids=API_IDS)
def test_a_named_choice_lets_only_that_tool_through(
    gateway: Gateway, api: str, stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    if chat_mode(gateway):
        reply = Reply(tool_calls=(WEATHER_CALL, EVIL_CALL), finish_reason="tool_calls")
    else:  # the prompt opens get_weather's invoke; the engine writes on into evil_tool
        reply = Reply(text=engine_block(WEATHER, EVIL).split('">\n', 1)[1])
    gateway.engine.push(reply)
    with caplog.at_level("INFO"):
        answer = ask(gateway, api, stream, thinking=False, **choice(api, "named"))
        diagnostics = access_diagnostics(caplog)
    only_weather(answer, api)
    [line] = held_back_lines(caplog)
    assert "'evil_tool' was held back" in line["message"]
    assert json.loads(line["arguments"]) == EVIL[1]
    assert diagnostics["tool_call_held_back"] == 1


@pytest.mark.parametrize("gateway", MODES, indirect=True)
@pytest.mark.parametrize(("api", "stream"), APIS, ids=API_IDS)
def test_a_named_choice_with_only_other_calls_is_an_error(
    gateway: Gateway, api: str, stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    if chat_mode(gateway):
        gateway.engine.push(Reply(tool_calls=(EVIL_CALL,), finish_reason="tool_calls"))
    else:  # thinking: the engine answers past the </think> stop, with the wrong call
        gateway.engine.push(Reply(text="Hmm.</think>" + engine_block(EVIL), ignore_stop=True))
    with caplog.at_level("WARNING"):
        message = refused(
            gateway, api, stream, thinking=not chat_mode(gateway), **choice(api, "named")
        )
    wanted = "names 'get_weather' but the model made no call to it (held back: evil_tool)"
    assert wanted in message
    assert len(held_back_lines(caplog)) == 1


# --- tool_choice none -------------------------------------------------------------------------


@pytest.mark.parametrize("gateway", MODES, indirect=True)
@pytest.mark.parametrize(("api", "stream"), APIS, ids=API_IDS)
def test_none_lets_no_call_through(
    gateway: Gateway, api: str, stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    if chat_mode(gateway):
        reply = Reply(content="Fine.", tool_calls=(EVIL_CALL,), finish_reason="tool_calls")
    else:
        reply = Reply(text="Fine." + engine_block(EVIL))
    gateway.engine.push(reply)
    with caplog.at_level("INFO"):
        answer = ask(gateway, api, stream, thinking=False, **choice(api, "none"))
        diagnostics = access_diagnostics(caplog)
    assert (answer.content, answer.calls) == ("Fine.", [])
    assert answer.finish == NO_CALL_FINISH[api]
    [line] = held_back_lines(caplog)
    assert "tool_choice is none: the model's call to 'evil_tool' was held back" in line["message"]
    assert diagnostics["tool_call_held_back"] == 1


# --- tool_choice required ---------------------------------------------------------------------


@pytest.mark.parametrize("gateway", MODES, indirect=True)
@pytest.mark.parametrize(("api", "stream"), APIS, ids=API_IDS)
def test_required_without_a_call_is_an_error(gateway: Gateway, api: str, stream: bool) -> None:
    if chat_mode(gateway):
        gateway.engine.push(Reply(content="I would rather not."))
    else:  # thinking: the engine answers past the </think> stop, without a call
        gateway.engine.push(Reply(text="Hmm.</think>It is sunny.", ignore_stop=True))
    fields = choice(api, "required")
    message = refused(gateway, api, stream, thinking=not chat_mode(gateway), **fields)
    assert "tool_choice is required but the model made no call" in message


@pytest.mark.parametrize("gateway", MODES, indirect=True)
def test_required_cut_off_by_the_length_limit_stays_a_length_stop(gateway: Gateway) -> None:
    if chat_mode(gateway):
        gateway.engine.push(Reply(content="Let me see", finish_reason="length"))
    else:
        gateway.engine.push(Reply(text="Long thoughts", finish_reason="length"))
    answer = ask(gateway, "openai", False, thinking=True, **choice("openai", "required"))
    assert (answer.finish, answer.calls) == ("length", [])


@pytest.mark.parametrize("gateway", ["chat"], indirect=True)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_one_call_only_counts_only_the_calls_let_through(gateway: Gateway, stream: bool) -> None:
    """A held-back call does not use up the one call ``parallel_tool_calls: false`` allows."""
    second = {**WEATHER_CALL, "id": "call_up_weather_2"}
    calls = (EVIL_CALL, WEATHER_CALL, second)
    gateway.engine.push(Reply(tool_calls=calls, finish_reason="tool_calls"))
    fields = {**choice("openai", "named"), "parallel_tool_calls": False}
    answer = ask(gateway, "openai", stream, thinking=False, **fields)
    only_weather(answer, "openai")
