"""Which calls reach the client, through real ``dsmlkit serve`` processes in front of the
fake engine (completions mode with text prompts, and ``--upstream-api chat`` with its leaky
endpoint), with the official SDKs:

* a call to a tool the request does not declare is held back like one ``tool_choice``
  forbids (a ``tool_call_held_back`` log line with its name and arguments); ``required``
  with nothing left is a 502; a request with no tools gets no calls;
* a prefill that ends in a call (Anthropic ``tool_use``, Chat ``continue_final_message``)
  is continued: the answer holds only what the model added.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import pytest

from dsmlkit.dialects import V4_1
from tests.server.conftest import Gateway
from tests.server.fake_engine import FakeEngine, Reply
from tests.server.process import ServerLog, serve_process
from tests.server.sdk import ask, declared
from tests.server.test_choice_enforced import (
    API_IDS,
    APIS,
    CALL_FINISH,
    EVIL,
    EVIL_CALL,
    NO_CALL_FINISH,
    WEATHER,
    WEATHER_CALL,
    choice,
    engine_block,
    refused,
)

# Real processes (dsmlkit serve).
pytestmark = pytest.mark.slow

MODES = ["completions", "chat"]


def held_back(log: ServerLog, since: int) -> list[dict[str, Any]]:
    """The ``tool_call_held_back`` lines after the first ``since`` lines, once the
    request's own log line (written after its last byte) has come."""
    log.wait_for("request", since, method="POST")
    return [line for line in log.records(since) if line.get("event") == "tool_call_held_back"]


@dataclass
class Served(Gateway):
    """A gateway process and its log."""

    log: ServerLog


@pytest.fixture(scope="module")
def processes(
    engine_server: tuple[FakeEngine, str],
) -> Iterator[dict[str, tuple[str, ServerLog]]]:
    """One ``dsmlkit serve`` per upstream mode, for the whole module."""
    upstream = engine_server[1]
    flags = {
        "completions": ("--upstream", upstream, "--tokenizer", "none"),
        "chat": ("--upstream", upstream, "--upstream-api", "chat"),
    }
    with ExitStack() as stack:
        running = {}
        for mode, mode_flags in flags.items():
            process, url = stack.enter_context(serve_process(*mode_flags))
            running[mode] = (url, ServerLog(process))
        yield running


@pytest.fixture
def gateway(
    request: pytest.FixtureRequest,
    processes: dict[str, tuple[str, ServerLog]],
    engine: FakeEngine,
) -> Served:
    """The process of the test's ``mode``; a chat-mode engine serves ``m``, as a hosted
    endpoint would."""
    if request.param == "chat":
        engine.served = ("m",)
    url, log = processes[request.param]
    return Served(url, engine, log)


def chat_mode(gateway: Gateway) -> bool:
    return gateway.engine.served == ("m",)


def tools_of(api: str) -> dict[str, Any]:
    """The tools of ``choice`` (get_weather, get_time), with no ``tool_choice``: auto."""
    return {"tools": choice(api, "required")["tools"]}


# --- calls to tools the request does not declare ----------------------------------------


@pytest.mark.parametrize("gateway", MODES, indirect=True)
@pytest.mark.parametrize(("api", "stream"), APIS, ids=API_IDS)
def test_auto_holds_back_a_call_to_an_undeclared_tool(
    gateway: Served, api: str, stream: bool
) -> None:
    if chat_mode(gateway):
        calls = (EVIL_CALL, WEATHER_CALL)
        reply = Reply(content="On it.", tool_calls=calls, finish_reason="tool_calls")
    else:
        reply = Reply(text="On it." + engine_block(EVIL, WEATHER))
    gateway.engine.push(reply)
    since = len(gateway.log.lines)
    answer = ask(gateway, api, stream, thinking=False, **tools_of(api))
    assert answer.content == "On it."
    assert [(name, args) for _, name, args in answer.calls] == [WEATHER]
    assert answer.finish == CALL_FINISH[api]
    [line] = held_back(gateway.log, since)
    assert line["message"] == (
        "the request declares no tool of that name: "
        "the model's call to 'evil_tool' was held back from the client"
    )
    assert json.loads(line["arguments"]) == EVIL[1]


@pytest.mark.parametrize("gateway", MODES, indirect=True)
@pytest.mark.parametrize(("api", "stream"), APIS, ids=API_IDS)
def test_required_with_only_an_undeclared_call_is_an_error(
    gateway: Served, api: str, stream: bool
) -> None:
    if chat_mode(gateway):
        gateway.engine.push(Reply(tool_calls=(EVIL_CALL,), finish_reason="tool_calls"))
    else:  # the prompt ends with the block opener; the engine writes the invoke
        opener = f"\n\n{V4_1.block_open()}\n"
        gateway.engine.push(Reply(text=engine_block(EVIL).removeprefix(opener)))
    since = len(gateway.log.lines)
    message = refused(gateway, api, stream, thinking=False, **choice(api, "required"))
    assert "tool_choice is required but the model made no call (held back: evil_tool)" in message
    [line] = held_back(gateway.log, since)
    assert json.loads(line["arguments"]) == EVIL[1]


@pytest.mark.parametrize("gateway", MODES, indirect=True)
@pytest.mark.parametrize(("api", "stream"), APIS, ids=API_IDS)
def test_a_request_without_tools_gets_no_calls(gateway: Served, api: str, stream: bool) -> None:
    if chat_mode(gateway):
        reply = Reply(content="Fine.", tool_calls=(EVIL_CALL,), finish_reason="tool_calls")
    else:
        reply = Reply(text="Fine." + engine_block(EVIL))
    gateway.engine.push(reply)
    since = len(gateway.log.lines)
    answer = ask(gateway, api, stream, thinking=False)
    assert (answer.content, answer.calls) == ("Fine.", [])
    assert answer.finish == NO_CALL_FINISH[api]
    [line] = held_back(gateway.log, since)
    assert line["message"].startswith("the request declares no tools: the model's call to")
    assert json.loads(line["arguments"]) == EVIL[1]


# --- a prefill that ends in a call ----------------------------------------------------------

#: The client's own call the prefill ends with (arguments the parser streams in parts).
OWN_CALL = {"type": "tool_use", "id": "toolu_own", "name": "bash", "input": {"cmd": "ls"}}
PREFILL = [
    {"role": "user", "content": "list the files"},
    {"role": "assistant", "content": [{"type": "text", "text": "Let me look."}, OWN_CALL]},
]
CHAT_PREFILL = [
    {"role": "user", "content": "list the files"},
    {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [
            {
                "id": "call_own",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"cmd": "ls"}'},
            }
        ],
    },
]
#: Chat's way to continue the last message (vLLM's extension).
CONTINUE = {"continue_final_message": True, "add_generation_prompt": False}
STREAMS = pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])


def rendered_prompt(gateway: Gateway, route: str, body: dict[str, Any]) -> str:
    with gateway.http() as http:
        answer = http.post(route + "/render", json=body)
    assert answer.status_code == 200
    prompt: str = answer.json()["prompt"]
    return prompt


@pytest.mark.parametrize("gateway", ["completions"], indirect=True)
@STREAMS
def test_an_anthropic_prefill_ending_in_tool_use_is_continued(
    gateway: Served, stream: bool
) -> None:
    gateway.engine.push(Reply(text="Done."))
    answer = ask(gateway, "anthropic", stream, thinking=False, messages=PREFILL)
    assert (answer.content, answer.calls, answer.finish) == ("Done.", [], "end_turn")
    body = {"model": "m", "max_tokens": 4096, "messages": PREFILL}
    prompt = rendered_prompt(gateway, "/v1/messages", body)
    assert prompt.endswith(V4_1.block_close())
    assert gateway.engine.requests[-1]["prompt"] == prompt


@pytest.mark.parametrize("gateway", ["completions"], indirect=True)
@STREAMS
def test_a_call_after_a_prefilled_call_is_the_answers_only_call(
    gateway: Served, stream: bool
) -> None:
    gateway.engine.push(Reply(text=engine_block(WEATHER)))
    tools = declared("anthropic", "bash", "get_weather")
    answer = ask(gateway, "anthropic", stream, thinking=False, messages=PREFILL, **tools)
    assert [(name, args) for _, name, args in answer.calls] == [WEATHER]
    assert (answer.content, answer.finish) == ("", "tool_use")


@pytest.mark.parametrize("gateway", ["completions"], indirect=True)
@STREAMS
def test_a_chat_prefix_ending_in_tool_calls_is_continued(gateway: Served, stream: bool) -> None:
    gateway.engine.push(Reply(text="Done."))
    switches = {**CONTINUE, "chat_template_kwargs": {"thinking": False}}
    # (thinking=True: ask would set extra_body to the thinking switch alone)
    fields = {"messages": CHAT_PREFILL, "extra_body": switches}
    answer = ask(gateway, "openai", stream, thinking=True, **fields)
    assert (answer.content, answer.calls, answer.finish) == ("Done.", [], "stop")
    body = {"model": "m", "messages": CHAT_PREFILL, **switches}
    assert gateway.engine.requests[-1]["prompt"] == rendered_prompt(
        gateway, "/v1/chat/completions", body
    )


@pytest.mark.parametrize("gateway", ["completions"], indirect=True)
@STREAMS
def test_a_chat_prefix_that_opens_a_call_is_finished_by_the_model(
    gateway: Served, stream: bool
) -> None:
    """DeepSeek's chat prefix completion: the prefix opens get_weather's invoke, the model
    writes its arguments; the client gets the whole call."""
    opened = f'\n\n{V4_1.block_open()}\n<｜DSML｜ invoke name="get_weather">\n'
    prefix = {"role": "assistant", "content": "Checking." + opened, "prefix": True}
    rest = engine_block(WEATHER).split('">\n', 1)[1]
    gateway.engine.push(Reply(text=rest))
    fields = {"messages": [{"role": "user", "content": "weather?"}, prefix]}
    answer = ask(gateway, "openai", stream, thinking=False, **fields, **tools_of("openai"))
    assert [(name, args) for _, name, args in answer.calls] == [WEATHER]
    assert (answer.content, answer.finish) == ("", "tool_calls")
