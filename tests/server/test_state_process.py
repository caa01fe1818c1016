"""The state stores through a real ``dsmlkit serve``: every ``--state`` with one worker and
with ``--workers 2`` (Responses chains whatever worker answers), a real Redis killed and
restarted under a running gateway, and the one key several workers share."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.server.conftest import CLIENT_TIMEOUT, Gateway
from tests.server.fake_engine import FakeEngine, Reply
from tests.server.process import free_port, serve_process
from tests.server.redis_server import redis_server, redis_url
from tests.server.test_server_responses_state import CALL_TEXT, TOOLS

# Real processes (dsmlkit serve, Redis).
pytestmark = pytest.mark.slow

__all__ = ["redis_url"]  # the fixture

#: Responses requests in each chain: enough that both of two workers answer some.
TURNS = 12


def _gateway(engine_server: tuple[FakeEngine, str], state: str, *flags: str) -> Any:
    """``dsmlkit serve`` in front of the fake engine with text prompts and ``--state``."""
    return serve_process(
        "--upstream", engine_server[1], "--tokenizer", "none", "--state", state, *flags
    )


def _client(url: str) -> openai.OpenAI:
    """An SDK client whose every request asks for its connection to be closed after, so
    that with several workers any of them may answer each one (a kept-alive connection
    stays with one)."""
    return openai.OpenAI(
        base_url=url + "/v1",
        api_key="test",
        max_retries=0,
        timeout=CLIENT_TIMEOUT,
        default_headers={"connection": "close"},
    )


def _chain(gateway: Gateway, turns: int = TURNS) -> str:
    """Ask ``turns`` Responses questions, each continuing the last by
    ``previous_response_id``; the last prompt the engine saw."""
    client = _client(gateway.url)
    previous: str | None = None
    for turn in range(turns):
        gateway.engine.push(Reply(text=f"Answer {turn}."))
        linked: dict[str, Any] = {"previous_response_id": previous} if previous else {}
        answer = client.responses.create(
            model="m", input=f"Question {turn}?", reasoning={"effort": "none"}, **linked
        )
        assert answer.output_text == f"Answer {turn}."
        previous = answer.id
    prompt: str = gateway.engine.requests[-1]["prompt"]
    return prompt


def _holds_every_turn(prompt: str, turns: int = TURNS) -> bool:
    said = [f"Question {t}?" for t in range(turns)] + [f"Answer {t}." for t in range(turns - 1)]
    return all(text in prompt for text in said)


@pytest.mark.parametrize(
    ("state", "workers"),
    [
        ("memory", 1),
        ("sqlite:{tmp}/state.db", 1),
        ("sqlite::memory:", 1),
        ("sqlite:{tmp}/state.db", 2),
        ("{redis}", 2),
    ],
    ids=["memory", "sqlite", "sqlite-memory", "sqlite-2-workers", "redis-2-workers"],
)
def test_a_responses_chain_is_read_back_in_every_configuration(
    engine_server: tuple[FakeEngine, str],
    engine: FakeEngine,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    state: str,
    workers: int,
) -> None:
    redis = request.getfixturevalue("redis_url") if "{redis}" in state else ""
    setting = state.format(tmp=tmp_path, redis=redis)
    with _gateway(engine_server, setting, "--workers", str(workers)) as (_, url):
        ready = httpx.get(url + "/ready", timeout=5).json()
        prompt = _chain(Gateway(url, engine))
    assert ready["state"]["ok"] is True, ready
    assert _holds_every_turn(prompt), prompt


def test_a_50_turn_chain_stores_each_turn_once(
    engine_server: tuple[FakeEngine, str], engine: FakeEngine, tmp_path: Path
) -> None:
    """The bytes a chain takes in the sqlite file grow linearly with its turns."""
    path = tmp_path / "state.db"
    with _gateway(engine_server, f"sqlite:{path}") as (_, url):
        assert _holds_every_turn(_chain(Gateway(url, engine), 50), 50)
    with sqlite3.connect(path) as db:
        sizes = [
            size
            for (size,) in db.execute(
                "SELECT length(value) FROM state WHERE key LIKE 'response:%' ORDER BY rowid"
            )
        ]
    assert len(sizes) == 50
    # each turn holds its question, its answer and at most 16 links: the last is no
    # bigger than the 17th (today's store re-stored the whole history: 50 times the first)
    assert max(sizes[16:]) <= sizes[16] * 1.05, sizes
    assert sum(sizes) < 50 * sizes[16]


def test_the_memory_store_of_a_server_keeps_the_latest_responses_within_its_bound(
    engine_server: tuple[FakeEngine, str], engine: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``DSMLKIT_STATE_MAX_MB=1``, five responses of 300 KB: the two oldest are dropped."""
    monkeypatch.setenv("DSMLKIT_STATE_MAX_MB", "1")
    thought = "x" * 300_000  # an earlier turn's reasoning: stored, left out of the prompt
    closed_turn: list[Any] = [
        {"role": "user", "content": "Hello?"},
        {
            "type": "reasoning",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": thought}],
        },
        {"role": "assistant", "content": "Hello."},
    ]
    with _gateway(engine_server, "memory") as (_, url):
        client = _client(url)
        ids = []
        for turn in range(5):
            engine.push(Reply(text="Fine.</think>Noted."))
            asked = [*closed_turn, {"role": "user", "content": f"Question {turn}?"}]
            ids.append(client.responses.create(model="m", input=asked).id)
        kept = []
        for response_id in ids:
            engine.push(Reply(text="Fine.</think>Again."))
            try:
                client.responses.create(
                    model="m", input="Go on.", previous_response_id=response_id, store=False
                )
            except openai.BadRequestError as exc:
                assert "not found" in exc.message
                kept.append(False)
            else:
                kept.append(True)
    assert kept == [False, False, True, True, True]


def test_a_sqlite_file_outlives_the_gateway(
    engine_server: tuple[FakeEngine, str], engine: FakeEngine, tmp_path: Path
) -> None:
    setting = f"sqlite:{tmp_path}/state.db"
    with _gateway(engine_server, setting) as (_, url):
        engine.push(Reply(text="Stored."))
        first = Gateway(url, engine).openai().responses.create(model="m", input="Keep this.")
    with _gateway(engine_server, setting) as (_, url):
        engine.push(Reply(text="Read back."))
        Gateway(url, engine).openai().responses.create(
            model="m", input="Again.", previous_response_id=first.id
        )
    assert "Keep this." in engine.requests[-1]["prompt"]


def test_redis_killed_and_restarted_under_a_running_gateway(
    engine_server: tuple[FakeEngine, str], engine: FakeEngine
) -> None:
    port = free_port()
    redis = redis_server(port)
    setting = redis.__enter__()
    with _gateway(engine_server, setting) as (_, url):
        gateway = Gateway(url, engine)
        try:
            assert _holds_every_turn(_chain(gateway, 3), 3)
            engine.push(Reply(text="Before."))
            before = gateway.openai().responses.create(model="m", input="Before the outage.")
        finally:
            redis.__exit__(None, None, None)
        with gateway.http() as client:
            for _ in range(3):  # the first one waits for Redis, the next ones back off
                answer = client.post(
                    "/v1/responses",
                    json={"model": "m", "input": "Go on.", "previous_response_id": before.id},
                )
                assert answer.status_code == 503, answer.text
                error = answer.json()["error"]
                assert error["param"] == "previous_response_id"
                assert "state store is unavailable" in error["message"]
            engine.push(Reply(text="Served anyway."))
            served = client.post("/v1/responses", json={"model": "m", "input": "Hi."})
            assert served.status_code == 200 and "Served anyway." in served.text
            assert client.get("/ready").json()["state"]["ok"] is False
        with redis_server(port):
            deadline = time.monotonic() + 15
            while not httpx.get(url + "/ready", timeout=5).json()["state"]["ok"]:
                assert time.monotonic() < deadline, "the gateway did not see Redis come back"
                time.sleep(0.2)
            time.sleep(2.1)  # past the back-off the last failure started
            assert _holds_every_turn(_chain(gateway, 3), 3)


@pytest.mark.parametrize("state", ["memory", "sqlite::memory:"])
def test_several_workers_with_a_per_process_store_are_refused(state: str) -> None:
    command = [sys.executable, "-m", "dsmlkit", "serve", "--port", str(free_port())]
    done = subprocess.run(
        [*command, "--tokenizer", "none", "--workers", "2", "--state", state],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 5, done.stderr
    assert done.stderr.startswith(f"dsmlkit serve: --workers 2 with --state {state}: ")
    assert "--state sqlite:PATH or --state redis://HOST:PORT/DB" in done.stderr


def test_workers_without_a_secret_share_the_one_key_the_parent_made(
    engine_server: tuple[FakeEngine, str], engine: FakeEngine, tmp_path: Path
) -> None:
    """Reasoning sealed by one worker opens on the other: 20 follow-ups, none refused."""
    assert "DSMLKIT_STATE_SECRET" not in os.environ
    with _gateway(engine_server, f"sqlite:{tmp_path}/state.db", "--workers", "2") as (_, url):
        client = _client(url)
        for turn in range(20):
            engine.push(Reply(text=f"Secret thought {turn}." + CALL_TEXT.split("</think>")[1]))
            engine.push(Reply(text="Sunny.</think>It is sunny."))
            first = client.responses.create(
                model="m",
                input="Weather in Paris?",
                tools=TOOLS,
                store=False,
                include=["reasoning.encrypted_content"],
            )
            sealed = next(item for item in first.output if item.type == "reasoning")
            call = next(item for item in first.output if item.type == "function_call")
            assert sealed.encrypted_content
            follow_up: list[Any] = [
                {"role": "user", "content": "Weather in Paris?"},
                {
                    "type": "reasoning",
                    "summary": [],
                    "encrypted_content": sealed.encrypted_content,
                },
                {
                    "type": "function_call",
                    "call_id": call.call_id,
                    "name": call.name,
                    "arguments": call.arguments,
                },
                {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
            ]
            client.responses.create(model="m", store=False, tools=TOOLS, input=follow_up)
            assert f"Secret thought {turn}.</think>" in engine.requests[-1]["prompt"]
