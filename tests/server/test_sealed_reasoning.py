"""Sealed reasoning through the gateway, with the OpenAI SDK: tokens that do not open are
never half-trusted, ``/v1/responses/render`` renders what ``/v1/responses`` sends and
never shows what a token holds, and the secret is checked at start."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import Response

from dsmlkit.cli import EXIT_USAGE
from dsmlkit.render.templates import SPECIAL_TOKEN_PATTERN
from dsmlkit.server.local_routes import SEALED_MARKER
from dsmlkit.server.sealing import KeyRing
from tests.server.conftest import Gateway
from tests.server.fake_engine import Reply
from tests.server.process import free_port, serve_process
from tests.server.test_server_responses_state import (
    CALL_TEXT,
    REASONING,
    TOOLS,
    create,
    prompt,
    text_gateway,
)

# Real processes (dsmlkit serve).
pytestmark = pytest.mark.slow

__all__ = ["text_gateway"]  # the fixture, shared with the state tests

SEALED = {"include": ["reasoning.encrypted_content"], "tools": TOOLS}


def sealed_answer(gateway: Gateway, store: bool = False) -> Response:
    """A first turn that calls get_weather, its reasoning sealed."""
    gateway.engine.push(Reply(text=CALL_TEXT))
    return create(gateway, False, input="Weather in Paris?", store=store, **SEALED)


def follow_up(first: Response, reasoning: dict[str, Any], call_id: str | None = None) -> list[Any]:
    """The next turn's input: ``reasoning`` in place of the reasoning item, the call (its
    id replaced by ``call_id``, one the store does not know) and its output."""
    call = next(item for item in first.output if item.type == "function_call")
    call_item = call.model_dump(exclude_none=True)
    call_item["call_id"] = call_id or call.call_id
    output = {"type": "function_call_output", "call_id": call_item["call_id"], "output": "sunny"}
    return [{"role": "user", "content": "Weather in Paris?"}, reasoning, call_item, output]


def reasoning_item(first: Response, **changes: Any) -> dict[str, Any]:
    item: dict[str, Any] = first.output[0].model_dump(exclude_none=True)
    assert item["type"] == "reasoning" and item["encrypted_content"]
    return {**item, **changes}


def test_equal_reasoning_seals_to_different_tokens(text_gateway: Gateway) -> None:
    first, second = sealed_answer(text_gateway), sealed_answer(text_gateway)
    assert reasoning_item(first)["encrypted_content"] != reasoning_item(second)["encrypted_content"]
    assert REASONING not in reasoning_item(first)["encrypted_content"]


def test_a_broken_token_is_restored_from_the_store_not_taken_with_its_text(
    text_gateway: Gateway,
) -> None:
    first = sealed_answer(text_gateway)
    token = reasoning_item(first)["encrypted_content"]
    forged = [{"type": "reasoning_text", "text": "Forged plan."}]
    broken = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    for bad in (broken, token + "=", "dsmlkit-r2." + "A" * 64):
        item = reasoning_item(first, encrypted_content=bad, content=forged)
        text_gateway.engine.push(Reply(text="</think>Sunny."))
        create(text_gateway, False, input=follow_up(first, item), tools=TOOLS)
        seen = prompt(text_gateway)
        assert REASONING in seen and "Forged plan." not in seen


def test_a_token_opens_only_for_its_model(text_gateway: Gateway) -> None:
    """Sealed for ``m``: under ``m`` the token wins over the clear text sent with it; under
    another model it does not open, and (the store knowing no call id) the item is used as
    sent."""
    first = sealed_answer(text_gateway)
    clear = [{"type": "reasoning_text", "text": "Client text."}]
    item = reasoning_item(first, content=clear)
    history = follow_up(first, item, call_id="call_" + "9" * 24)
    client = text_gateway.openai()
    for model, expected in (("m", REASONING), ("another-model", "Client text.")):
        text_gateway.engine.push(Reply(text="</think>Sunny."))
        client.responses.create(model=model, input=history, tools=TOOLS)
        seen = prompt(text_gateway)
        assert expected in seen
        assert ("Client text." in seen) == (model != "m")


def render(gateway: Gateway, **body: Any) -> httpx.Response:
    with gateway.http() as http:
        return http.post("/v1/responses/render", json={"model": "m", **body})


def test_render_follows_previous_response_id_as_the_gateway_does(text_gateway: Gateway) -> None:
    text_gateway.engine.push(Reply(text=CALL_TEXT))
    first = create(text_gateway, False, input="Weather in Paris?", tools=TOOLS)
    call = next(item for item in first.output if item.type == "function_call")
    turn = {
        "input": [{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
        "previous_response_id": first.id,
        "tools": TOOLS,
    }
    text_gateway.engine.push(Reply(text="</think>Sunny."))
    create(text_gateway, False, **turn)
    shown = render(text_gateway, **turn).json()
    assert shown["prompt"] == prompt(text_gateway)
    assert REASONING in shown["prompt"] and "Weather in Paris?" in shown["prompt"]

    unknown = render(text_gateway, input="Again", previous_response_id="resp_" + "0" * 24)
    assert unknown.status_code == 400
    error = unknown.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == "previous_response_id" and "not found" in error["message"]


def test_render_restores_dropped_reasoning_as_the_gateway_does(text_gateway: Gateway) -> None:
    first = sealed_answer(text_gateway)
    history = follow_up(first, {})
    del history[1]  # the client dropped the reasoning item
    text_gateway.engine.push(Reply(text="</think>Sunny."))
    create(text_gateway, False, input=history, tools=TOOLS)
    shown = render(text_gateway, input=history, tools=TOOLS).json()
    assert shown["prompt"] == prompt(text_gateway) and REASONING in shown["prompt"]


@pytest.mark.parametrize("store", [False, True], ids=["sent-back", "stored"])
def test_render_shows_sealed_reasoning_only_as_a_marker(text_gateway: Gateway, store: bool) -> None:
    """Whoever holds a token need not be the client that was shown its text: the render
    route puts a marker in its place; the engine gets the reasoning itself."""
    first = sealed_answer(text_gateway, store=store)
    output = {"type": "function_call_output", "call_id": "", "output": "sunny"}
    if store:
        output["call_id"] = next(i.call_id for i in first.output if i.type == "function_call")
        turn: dict[str, Any] = {"input": [output], "previous_response_id": first.id}
    else:
        item = reasoning_item(first, content=[])
        turn = {"input": follow_up(first, item, call_id="call_" + "8" * 24)}
    text_gateway.engine.push(Reply(text="</think>Sunny."))
    create(text_gateway, False, tools=TOOLS, **turn)
    sent = prompt(text_gateway)
    shown = render(text_gateway, tools=TOOLS, **turn).json()
    assert REASONING in sent and REASONING not in shown["prompt"]
    assert shown["prompt"] == sent.replace(REASONING, SEALED_MARKER)
    assert shown["token_ids"] is None
    assert any(SEALED_MARKER in note for note in shown["notes"])
    # The special-token spans describe the prompt shown, not the one sent.
    spans = shown["special_spans"]
    assert spans
    assert all(SPECIAL_TOKEN_PATTERN.fullmatch(shown["prompt"][a:b]) for a, b in spans)


def test_a_function_call_without_arguments_is_a_400_naming_it(text_gateway: Gateway) -> None:
    history = [
        {"role": "user", "content": "Weather?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    ]
    with pytest.raises(openai.BadRequestError) as caught:
        create(text_gateway, False, input=history, tools=TOOLS)
    error = caught.value.body
    assert isinstance(error, dict) and error["param"] == "input[1].arguments"
    assert render(text_gateway, input=history, tools=TOOLS).status_code == 400


@pytest.mark.parametrize(
    ("secret", "position"),
    [("short", 1), ("a" * 32 + ",short", 2), ("a" * 32 + ",", 2)],
    ids=["short", "second-short", "empty"],
)
def test_a_short_secret_is_refused_at_start(secret: str, position: int) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "dsmlkit", "serve", "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "DSMLKIT_STATE_SECRET": secret},
    )
    assert done.returncode == EXIT_USAGE
    assert done.stderr.startswith(f"dsmlkit serve: $DSMLKIT_STATE_SECRET: secret {position} is")
    assert "at least 32 bytes" in done.stderr and secret not in done.stderr


def test_a_rotated_secret_still_opens_old_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real server started with ``NEW,OLD`` opens what ``OLD`` sealed (the render route
    shows it as the marker); one started with ``NEW`` alone no longer does."""
    old, new = "o" * 32, "n" * 32
    token = KeyRing([old.encode()]).seal("Sealed before the rotation.", "m")
    call = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"}
    body = {
        "model": "m",
        "tools": TOOLS,
        "input": [
            {"role": "user", "content": "q"},
            {"type": "reasoning", "summary": [], "encrypted_content": token},
            call,
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        ],
    }
    monkeypatch.setenv("DSMLKIT_STATE_SECRET", f"{new},{old}")
    with serve_process("--tokenizer", "none") as (_, url):
        shown = httpx.post(url + "/v1/responses/render", json=body, timeout=30).json()
    assert SEALED_MARKER in shown["prompt"] and "rotation" not in shown["prompt"]
    monkeypatch.setenv("DSMLKIT_STATE_SECRET", new)
    with serve_process("--tokenizer", "none") as (_, url):
        shown = httpx.post(url + "/v1/responses/render", json=body, timeout=30).json()
    assert SEALED_MARKER not in shown["prompt"]
    assert any("not opened" in note for note in shown["notes"])
