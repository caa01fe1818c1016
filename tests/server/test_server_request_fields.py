"""Real client captures and DeepSeek's request fields through the render routes and the
completions gateway (fake engine behind it)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from dsmlkit.api.common import DEFAULT_MAX_TOKENS_CHAT, DEFAULT_MAX_TOKENS_THINKING
from tests.server.conftest import Gateway
from tests.server.fake_engine import Reply
from tests.test_captures import CAPTURES, capture_api, load
from tests.test_request_model import TOOLS, codex_chat_turn

ROUTES = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}


@pytest.mark.parametrize("path", CAPTURES, ids=[p.stem for p in CAPTURES])
def test_every_capture_goes_through_the_gateway(completions_gateway: Gateway, path: Any) -> None:
    api = capture_api(path)
    body = load(path)
    completions_gateway.engine.push(Reply(text="Done.", content="Done."))
    with completions_gateway.http() as http:
        response = http.post(ROUTES[api], json=body)
        rendered = http.post(ROUTES[api] + "/render", json=body).json()
    assert response.status_code == 200
    if body.get("stream"):
        assert "Done." in response.text
    sent = completions_gateway.engine.requests[-1]
    assert sent["prompt"] == rendered["token_ids"]
    assert sent["max_tokens"] == body["max_tokens"]


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({}, DEFAULT_MAX_TOKENS_THINKING),
        ({"thinking": {"type": "disabled"}}, DEFAULT_MAX_TOKENS_CHAT),
    ],
)
def test_max_tokens_is_always_sent_upstream(
    completions_gateway: Gateway, extra: dict[str, Any], expected: int
) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}
    with completions_gateway.http() as http:
        rendered = http.post("/v1/chat/completions/render", json=body).json()
        assert http.post("/v1/chat/completions", json=body).status_code == 200
    assert rendered["sampling_params"]["max_tokens"] == expected
    assert completions_gateway.engine.requests[-1]["max_tokens"] == expected


def test_prefix_completion_through_the_gateway(completions_gateway: Gateway) -> None:
    body = {
        "model": "m",
        "thinking": {"type": "disabled"},
        "messages": [
            {"role": "user", "content": "Count to three."},
            {"role": "assistant", "content": "One,\n", "prefix": True},
        ],
    }
    completions_gateway.engine.push(Reply(text="two, three.", content="two, three."))
    with completions_gateway.http() as http:
        rendered = http.post("/v1/chat/completions/render", json=body).json()
        answer = http.post("/v1/chat/completions", json=body).json()
    assert rendered["prompt"].endswith("<｜Assistant｜></think>One,\n")
    assert answer["choices"][0]["message"]["content"] == "two, three."


def test_fields_without_effect_are_listed_in_the_notes(local_client: TestClient) -> None:
    body = {
        "model": "m",
        "max_tokens": 16,
        "metadata": {"user_id": "u"},
        "context_management": {"edits": []},
        "system": [{"type": "text", "text": "S", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "hi"}],
    }
    shown = local_client.post(
        "/v1/messages/render", json=body, headers={"anthropic-beta": "context-management-2025"}
    ).json()
    notes = " | ".join(shown["notes"])
    for field in ("metadata", "context_management", "cache_control on 1 blocks", "anthropic-beta"):
        assert field in notes


def test_codex_chat_mode_split_turn_goes_through_the_gateway(completions_gateway: Gateway) -> None:
    body = {
        "model": "m",
        "messages": codex_chat_turn(),
        "tools": TOOLS,
        "thinking": {"type": "disabled"},
    }
    completions_gateway.engine.push(Reply(text="Done.", content="Done."))
    with completions_gateway.http() as http:
        response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "Done."
