"""The state stores under faults, through a real ``dsmlkit serve`` and the official SDKs.

A full Redis or Redis Cluster (``--maxmemory`` reached, ``noeviction``) refuses every
write: no answer quotes what another client stored, and what was stored before keeps being
read. A corrupted entry, written straight into sqlite, Redis or a Redis Cluster, is a miss.
Thinking a client was not shown (``thinking.display: "omitted"``) is not shown by the render
routes either.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack
from functools import partial
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
import redis

from tests.server.conftest import CLIENT_TIMEOUT
from tests.server.fake_engine import FakeEngine, Reply
from tests.server.process import serve_process
from tests.server.redis_server import (
    client_for,
    node_ports,
    redis_cluster,
    redis_server,
    redis_url,
)
from tests.server.test_reasoning_roundtrip import ANTHROPIC_TOOLS, CALL_TEXT, REASONING, TOOLS

# Real processes (dsmlkit serve, Redis).
pytestmark = pytest.mark.slow

#: The tools as the SDKs' typed parameters take them.
CHAT_TOOLS: Any = TOOLS
MESSAGES_TOOLS: Any = ANTHROPIC_TOOLS

#: A Redis that takes 4 MB and then refuses writes (Redis 7 starts at about 1 MB).
FULL_REDIS = ("--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
#: What the other client's answer holds: its reasoning, stored under its call id.
SECRET = "Private plan of another client: the vault code is 7319."
CONTINUATIONS = 40

__all__ = ["redis_url"]  # the fixture
#: What the render routes show in place of reasoning the client was not shown.
PLACEHOLDER = "[sealed reasoning]"


def _gateway(engine_url: str, state: str, *flags: str) -> AbstractContextManager[Any]:
    return serve_process("--upstream", engine_url, "--tokenizer", "none", "--state", state, *flags)


def _openai(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=CLIENT_TIMEOUT)


def _fill(url: str) -> int:
    """Write 8 KB values until Redis refuses one (out of memory), then halve its bound: the
    connections' buffers count as used memory and shrink when idle, so right at the bound
    a few writes would pass again. How many values it took."""
    written = 0
    with redis.Redis.from_url(url) as client:
        try:
            while True:
                client.set(f"filler:{written}", "x" * 8192)
                written += 1
        except redis.ResponseError as exc:
            assert "maxmemory" in str(exc)
        bound = int(client.config_get("maxmemory")["maxmemory"])
        client.config_set("maxmemory", bound // 2)
    return written


def _fill_cluster(setting: str) -> int:
    """Make every node of a Redis Cluster refuse writes (a bound of 1 byte, noeviction)."""
    for port in node_ports(setting):
        with redis.Redis(port=port) as node:
            node.config_set("maxmemory-policy", "noeviction")
            node.config_set("maxmemory", 1)
    return 1


@pytest.fixture(params=["redis", "cluster"])
def full_redis(request: pytest.FixtureRequest) -> Iterator[tuple[str, Callable[[str], int]]]:
    """A Redis and how to fill it: one server or a Cluster of three."""
    if request.param == "redis":
        with redis_server(options=FULL_REDIS) as url:
            yield url, _fill
    else:
        with redis_cluster() as setting:
            yield setting, _fill_cluster


def test_a_full_redis_leaks_nothing_and_keeps_serving_what_it_holds(
    engine_server: tuple[FakeEngine, str],
    engine: FakeEngine,
    full_redis: tuple[str, Callable[[str], int]],
) -> None:
    setting, fill = full_redis
    ports = [str(port) for port in node_ports(setting)]
    with _gateway(engine_server[1], setting) as (_, url):
        client = _openai(url)
        engine.push(Reply(text="Noted: the meeting is at noon.</think>Noted."))
        stored = client.responses.create(model="m", input="Remember: the meeting is at noon.")
        assert fill(setting) > 0
        # another client's answer: its write (call id, reasoning) is refused
        engine.push(Reply(text=SECRET + CALL_TEXT.removeprefix(REASONING)))
        other = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Weather?"}], tools=CHAT_TOOLS
        )
        [call] = other.choices[0].message.tool_calls or []
        failed, bodies = 0, []
        for turn in range(CONTINUATIONS):  # each one's own write is refused too
            engine.push(Reply(text=f"Noon.</think>At noon ({turn})."))
            try:
                client.responses.create(
                    model="m", input="When is the meeting?", previous_response_id=stored.id
                )
            except openai.APIStatusError as exc:
                failed += 1
                bodies.append(exc.response.text)
            else:
                assert "the meeting is at noon" in engine.requests[-1]["prompt"]
        unknown = httpx.post(
            url + "/v1/responses",
            json={"model": "m", "input": "Go on.", "previous_response_id": "resp_unknown"},
        )
        bodies.append(unknown.text)
    with client_for(setting) as store:
        assert not store.exists("dsmlkit:turn:" + call.id)  # Redis did refuse the writes
    for body in bodies:
        assert call.id not in body and "vault code" not in body, body
        assert not [port for port in ports if port in body], body
    assert failed == 0, f"{failed} of {CONTINUATIONS} failed: {bodies[0]}"
    assert unknown.status_code == 400 and "not found" in unknown.text


def test_a_stopped_redis_is_a_503_that_names_no_address(
    engine_server: tuple[FakeEngine, str], engine: FakeEngine
) -> None:
    with redis_server() as setting, _gateway(engine_server[1], setting) as (_, url):
        port = setting.rsplit(":", 1)[1].split("/")[0]
        engine.push(Reply(text="Stored."))
        stored = _openai(url).responses.create(model="m", input="Keep this.")
        redis.Redis.from_url(setting).shutdown(nosave=True)
        bodies = []
        for _ in range(2):  # the first waits for Redis, the second backs off
            answer = httpx.post(
                url + "/v1/responses",
                json={"model": "m", "input": "Go on.", "previous_response_id": stored.id},
            )
            assert answer.status_code == 503
            bodies.append(answer.text)
    for body in bodies:
        error = json.loads(body)["error"]
        assert error["param"] == "previous_response_id"
        assert "state store is unavailable" in error["message"]
        assert port not in body and "127.0.0.1" not in body and "redis" not in body, body


#: Values of a ``response:`` entry that are not a stored turn.
NOT_TURNS = [
    "{not json",
    "[1, 2",
    "[" * 100_000,
    '"a string"',
    "42",
    "null",
    '{"items": []}',
    '{"links": 5, "items": []}',
    '{"links": [7], "items": []}',
    '{"links": [], "items": 5}',
    '{"links": [], "items": [5, "x", null]}',
    "[5]",
]
#: Stored turns whose items the request reader refuses.
UNREADABLE_TURNS = [
    '{"links": [], "items": [{"type": "message", "role": 5, "content": []}]}',
    '[{"type": "function_call_output", "call_id": "call_stored_secret", "output": "x"}]',
]
#: Values of a ``turn:`` entry (what the model wrote, by call id) that are not one.
BAD_TURNS = [
    "{not json",
    "[]",
    '{"name": 5, "arguments": [], "reasoning": 1, "content": null}',
    '{"name": "get_weather", "arguments": "{}", "reasoning": ["x"], "content": "c"}',
    '{"name": "get_weather"}',
]
LONG_CALL_ID = "call_corrupted_entry_0123456789"


def _write_sqlite(path: Path, items: dict[str, str]) -> None:
    with sqlite3.connect(path) as db:
        db.executemany(
            "INSERT OR REPLACE INTO state (key, value, expires) VALUES (?, ?, ?)",
            [(key, value, time.time() + 3600) for key, value in items.items()],
        )


def _write_redis(setting: str, items: dict[str, str]) -> None:
    with client_for(setting) as client:
        for key, value in items.items():
            client.set("dsmlkit:" + key, value)


@pytest.mark.parametrize("backend", ["sqlite", "redis", "cluster"])
def test_a_corrupted_entry_is_a_miss(
    engine_server: tuple[FakeEngine, str],
    engine: FakeEngine,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    backend: str,
) -> None:
    with ExitStack() as stack:
        if backend == "sqlite":
            setting = f"sqlite:{tmp_path}/state.db"
            write = partial(_write_sqlite, tmp_path / "state.db")
        else:
            cluster = stack.enter_context(redis_cluster()) if backend == "cluster" else None
            setting = cluster or request.getfixturevalue("redis_url")
            write = partial(_write_redis, setting)
        process, url = stack.enter_context(_gateway(engine_server[1], setting))
        _check_corrupted_entries(url, engine, write)
    log = process.stderr.read()
    assert "Traceback" not in log
    corrupt = [json.loads(line) for line in log.splitlines() if "state_entry_corrupt" in line]
    assert len(corrupt) == len(NOT_TURNS) * 2 + len(UNREADABLE_TURNS) * 2 + len(BAD_TURNS)


def _refusal(client: openai.OpenAI, response_id: str) -> str:
    """The message of the 400 a continuation of ``response_id`` gets (its param checked,
    and left out of it)."""
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model="m", input="Go on.", previous_response_id=response_id)
    error: dict[str, Any] = raised.value.body  # type: ignore[assignment]
    assert error["param"] == "previous_response_id", error
    message: str = error["message"]
    return message.removeprefix("previous_response_id: ")


def _check_corrupted_entries(
    url: str, engine: FakeEngine, write: Callable[[dict[str, str]], None]
) -> None:
    client = _openai(url)
    engine.push(Reply(text="Stored.</think>Stored."))
    good = client.responses.create(model="m", input="Keep this.")
    for index, value in enumerate(NOT_TURNS + UNREADABLE_TURNS):
        named, linking = f"resp_bad_{index}", f"resp_linking_{index}"
        # and a good turn whose earlier link is the corrupted one
        write(
            {
                f"response:{named}": value,
                f"response:{linking}": json.dumps({"links": [named, good.id], "items": []}),
            }
        )
        missing, unreadable = _refusal(client, named), _refusal(client, linking)
        if value in NOT_TURNS:
            assert missing == f"Previous response with id '{named}' not found."
            assert f"the earlier response '{named}' of its conversation" in unreadable
        else:
            assert missing.startswith(f"Previous response with id '{named}' cannot be")
            assert unreadable.startswith(f"Previous response with id '{linking}' cannot be")
        for message in (missing, unreadable):
            assert (
                "does not read back" in message or "not found" in message or "no longer" in message
            )
            assert "stored_secret" not in message and "must be" not in message
    history: Any = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": LONG_CALL_ID,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": LONG_CALL_ID, "content": "sunny"},
    ]
    for value in BAD_TURNS:
        write({f"turn:{LONG_CALL_ID}": value})
        engine.push(Reply(text="Sunny.</think>Sunny."))
        answer = client.chat.completions.create(model="m", messages=history, tools=CHAT_TOOLS)
        assert answer.choices[0].message.content == "Sunny."
        assert 'name="city" string="true">Paris<' in engine.requests[-1]["prompt"]


def test_omitted_thinking_is_not_shown_by_the_render_routes(
    engine_server: tuple[FakeEngine, str], engine: FakeEngine, v41_tokenizer: str
) -> None:
    thinking: Any = {"type": "enabled", "budget_tokens": 1024, "display": "omitted"}
    question = {"role": "user", "content": "Weather in Paris?"}
    flags = ("--upstream", engine_server[1], "--tokenizer", v41_tokenizer)
    with serve_process(*flags) as (_, url):
        client = anthropic.Anthropic(
            base_url=url, api_key="k", max_retries=0, timeout=CLIENT_TIMEOUT
        )
        engine.push(Reply(text=CALL_TEXT))
        first = client.messages.create(
            model="m",
            max_tokens=4096,
            thinking=thinking,
            tools=MESSAGES_TOOLS,
            messages=[question],  # type: ignore[list-item]
        )
        block, call = first.content
        assert block.type == "thinking" and block.thinking == "" and call.type == "tool_use"
        echoed = [b.model_dump(exclude_none=True) for b in first.content]
        result = {"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}
        messages: Any = [
            question,
            {"role": "assistant", "content": echoed},
            {"role": "user", "content": [result]},
        ]
        body = {"model": "m", "max_tokens": 4096, "thinking": thinking, "tools": ANTHROPIC_TOOLS}
        # the engine's prompt (token ids) is the real one, the reasoning put back
        engine.push(Reply(text="Sunny.</think>Sunny."))
        client.messages.create(**body, messages=messages)
        real = len(engine.requests[-1]["prompt"])
        rendered = httpx.post(url + "/v1/messages/render", json={**body, "messages": messages})
        counted = client.messages.count_tokens(
            model="m",
            thinking=thinking,
            tools=MESSAGES_TOOLS,
            messages=messages,
        )
        chat = {
            "model": "m",
            "tools": TOOLS,
            "messages": [
                question,
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
            ],
        }
        chat_rendered = httpx.post(url + "/v1/chat/completions/render", json=chat)
    for answer in (rendered, chat_rendered):
        assert answer.status_code == 200, answer.text
        shown = answer.json()
        assert REASONING not in answer.text and PLACEHOLDER in shown["prompt"]
        assert shown["token_ids"] is None
    assert rendered.json()["prompt_tokens"] == real
    assert counted.input_tokens == real
