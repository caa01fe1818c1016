"""Call ids unique within a conversation, through real ``dsmlkit serve`` processes.

An endpoint that numbers its calls per answer names every turn's call ``call_0``; Claude
Code drops a ``tool_use`` whose id it has seen and ends the task undone. The clients (the
official SDKs, three turns: two calls, then an answer) must see a new id for each call,
and the endpoint must see the history with the ids it issued. In completions mode the
gateway names the calls itself. With the state store lost the endpoint gets the client's
ids, the same in each call and in its result.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from dsmlkit.dialects import V4_1
from dsmlkit.server.call_ids import AnswerIds
from tests.helpers import write_block
from tests.server.conftest import HOSTED_MODELS, Gateway
from tests.server.fake_engine import FakeEngine, Reply
from tests.server.process import serve_process
from tests.server.sdk import ask
from tests.server.test_model_turns import echoed, tools

# Real processes (dsmlkit serve).
pytestmark = pytest.mark.slow

APIS = [(api, stream) for api in ("anthropic", "openai", "responses") for stream in (False, True)]
API_IDS = [f"{api}{'-stream' if stream else ''}" for api, stream in APIS]
BASH = {"type": "object", "properties": {"command": {"type": "string"}}}
COMMANDS = ("ls", "cat a.txt")
#: What a client that knows the API's style expects of a call id.
PREFIXES = {"anthropic": "toolu_", "openai": "call_", "responses": "call_"}


@pytest.fixture(scope="module")
def chat_url(engine_server: tuple[FakeEngine, str]) -> Iterator[str]:
    with serve_process("--upstream", engine_server[1], "--upstream-api", "chat") as (_, url):
        yield url


@pytest.fixture(scope="module")
def storeless_url(engine_server: tuple[FakeEngine, str]) -> Iterator[str]:
    """A chat-mode gateway whose memory store keeps nothing (1 byte)."""
    flags = ("--upstream-api", "chat", "--state-max-mb", "0.000001")
    with serve_process("--upstream", engine_server[1], *flags) as (_, url):
        yield url


@pytest.fixture(scope="module")
def completions_url(engine_server: tuple[FakeEngine, str]) -> Iterator[str]:
    with serve_process("--upstream", engine_server[1], "--tokenizer", "none") as (_, url):
        yield url


def session(gateway: Gateway, api: str, stream: bool, *, thinking: bool, chat: bool) -> list[str]:
    """Two turns whose call the engine names ``call_0`` (chat) or writes in DSML, each sent
    back by the client with its result (its reasoning dropped), then an answer; the call
    ids the client saw."""
    history: list[dict[str, Any]] = [{"role": "user", "content": "Look at the repository."}]
    bash = tools(api, "bash", BASH)
    seen = []
    for step, command in enumerate(COMMANDS):
        arguments = {"command": command}
        call = {"id": "call_0", "name": "bash", "arguments": json.dumps(arguments)}
        reasoning = f"Step {step}: run {command}."
        gateway.engine.push(
            Reply(reasoning=reasoning, tool_calls=(call,), finish_reason="tool_calls")
            if chat
            else Reply(text=reasoning + "</think>" + write_call(command))
        )
        answer = ask(gateway, api, stream, thinking=thinking, tools=bash, messages=history)
        assert [(name, args) for _, name, args in answer.calls] == [("bash", arguments)]
        seen.append(answer.calls[0][0])
        history += echoed(api, answer, arguments, result=f"output {step}")
    gateway.engine.push(Reply(content="Done.", text="Checked.</think>Done."))
    final = ask(gateway, api, stream, thinking=thinking, tools=bash, messages=history)
    assert final.content == "Done."
    return seen


def write_call(command: str) -> str:
    """A call to ``bash`` as the model writes it in DSML."""
    return write_block(V4_1, [("bash", {"command": command})])


def upstream_ids(request: dict[str, Any]) -> list[tuple[str, str]]:
    """The call ids of a chat request's history, in order: ``("call", id)`` for each call
    of an assistant turn, ``("result", id)`` for each tool message."""
    ids = []
    for message in request["messages"]:
        ids += [("call", call["id"]) for call in message.get("tool_calls") or ()]
        if message["role"] == "tool":
            ids.append(("result", message["tool_call_id"]))
    return ids


@pytest.mark.parametrize(("api", "stream"), APIS, ids=API_IDS)
def test_calls_numbered_per_answer_get_ids_unique_in_the_conversation(
    chat_url: str, engine: FakeEngine, api: str, stream: bool
) -> None:
    engine.served = HOSTED_MODELS
    seen = session(Gateway(chat_url, engine), api, stream, thinking=True, chat=True)
    assert len(set(seen)) == 2, seen
    assert all(call_id.startswith(PREFIXES[api]) and len(call_id) >= 16 for call_id in seen)
    # the endpoint sees its own call_0 in every turn of the history it is sent
    first, second, third = engine.requests[-3:]
    assert upstream_ids(first) == []
    assert upstream_ids(second) == [("call", "call_0"), ("result", "call_0")]
    assert upstream_ids(third) == [("call", "call_0"), ("result", "call_0")] * 2
    # and each turn's reasoning, restored under the client's id
    said = [m.get("reasoning_content") for m in third["messages"] if m["role"] == "assistant"]
    assert said == [f"Step {step}: run {command}." for step, command in enumerate(COMMANDS)]


def test_a_unique_looking_upstream_id_new_to_the_conversation_is_kept(
    chat_url: str, engine: FakeEngine
) -> None:
    engine.served = HOSTED_MODELS
    gateway = Gateway(chat_url, engine)
    hosted = {"id": "call_00_8f1c2d3e4b5a69780a1b2c3d", "name": "bash", "arguments": "{}"}
    bash = tools("openai", "bash", BASH)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "ls"}]
    seen = []
    for _ in range(2):  # the second answer repeats the id: the client gets another
        engine.push(Reply(tool_calls=(hosted,), finish_reason="tool_calls"))
        answer = ask(gateway, "openai", False, thinking=False, tools=bash, messages=messages)
        seen.append(answer.calls[0][0])
        messages += echoed("openai", answer, {})
    ask(gateway, "openai", False, thinking=False, tools=bash, messages=messages)
    assert seen[0] == hosted["id"] and seen[1] != hosted["id"]
    assert (
        upstream_ids(engine.requests[-1]) == [("call", hosted["id"]), ("result", hosted["id"])] * 2
    )


def test_previous_response_id_chains_send_the_endpoints_ids(
    chat_url: str, engine: FakeEngine
) -> None:
    """A Responses history the gateway stored (``previous_response_id``) holds the
    client's ids; the endpoint gets its own."""
    engine.served = HOSTED_MODELS
    client = Gateway(chat_url, engine).openai()
    bash = [{"type": "function", "name": "bash", "parameters": BASH}]
    call = {"id": "call_0", "name": "bash", "arguments": "{}"}
    linked: dict[str, Any] = {"input": "Look at the repository."}
    seen = []
    for step in range(2):
        engine.push(Reply(reasoning=f"Step {step}.", tool_calls=(call,)))
        answer = client.responses.create(model="m", tools=bash, **linked)  # type: ignore[arg-type]
        call_id = next(item.call_id for item in answer.output if item.type == "function_call")
        seen.append(call_id)
        output = {"type": "function_call_output", "call_id": call_id, "output": f"out {step}"}
        linked = {"previous_response_id": answer.id, "input": [output]}
    engine.push(Reply(content="Done."))
    assert client.responses.create(model="m", tools=bash, **linked).output_text == "Done."  # type: ignore[arg-type]
    assert len(set(seen)) == 2 and "call_0" not in seen
    assert upstream_ids(engine.requests[-1]) == [("call", "call_0"), ("result", "call_0")] * 2


@pytest.mark.parametrize("api", ["anthropic", "openai", "responses"])
def test_with_the_store_lost_the_endpoint_gets_the_clients_ids(
    storeless_url: str, engine: FakeEngine, api: str
) -> None:
    engine.served = HOSTED_MODELS
    seen = session(Gateway(storeless_url, engine), api, False, thinking=False, chat=True)
    assert len(set(seen)) == 2 and "call_0" not in seen
    expected = [(kind, call_id) for call_id in seen for kind in ("call", "result")]
    assert upstream_ids(engine.requests[-1]) == expected


@pytest.mark.parametrize(("api", "stream"), APIS, ids=API_IDS)
def test_completions_mode_ids_are_unique_across_turns(
    completions_url: str, engine: FakeEngine, api: str, stream: bool
) -> None:
    seen = session(Gateway(completions_url, engine), api, stream, thinking=True, chat=False)
    assert len(set(seen)) == 2, seen
    assert all(call_id.startswith(PREFIXES[api]) and len(call_id) >= 16 for call_id in seen)


def test_which_upstream_ids_a_client_gets() -> None:
    """Kept: unique-looking and new. Replaced (and mapped): numbered, with characters an
    API refuses, taken by the conversation or by an earlier call of the answer, none."""
    minted = iter(f"toolu_minted_{n:08}" for n in range(5))
    ids = AnswerIds(lambda: next(minted), taken=["call_00_aaaaaaaaaaaaaaaa"])
    given = [
        "call_00_bbbbbbbbbbbbbbbb",
        "call_0",
        "functions.bash:0",
        "call_00_aaaaaaaaaaaaaaaa",
        "call_00_bbbbbbbbbbbbbbbb",
        "",
    ]
    assert [ids.client_id(upstream) for upstream in given] == [
        "call_00_bbbbbbbbbbbbbbbb",
        *(f"toolu_minted_{n:08}" for n in range(5)),
    ]
    assert ids.upstream == {f"toolu_minted_{n:08}": given[n + 1] for n in range(4)}
