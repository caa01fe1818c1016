"""Routes that need no upstream (in-process), the middleware, metrics and the request log."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import anthropic.types
import openai.types.chat
import pytest
from fastapi.testclient import TestClient

from dsmlkit.api import parse_request
from dsmlkit.dialects import BOS, DEFAULT_DIALECT, EOS, V4_1
from dsmlkit.errors import install_hint
from dsmlkit.render import render_conversation
from dsmlkit.render.tokens import load_tokenizer
from dsmlkit.server import ServerConfig, create_app
from dsmlkit.server.reqlog import ACCESS_LOGGER, FIELDS
from tests.helpers import write_block

CHAT = {
    "model": "some-model",
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
    ],
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ],
    "temperature": 0.5,
}
MESSAGES = {
    "model": "claude-x",
    "max_tokens": 64,
    "system": "Be brief.",
    "messages": [{"role": "user", "content": "Weather in Paris?"}],
}
OUTPUT = "Checking." + write_block(V4_1, [("get_weather", {"city": "Paris"})])


@pytest.fixture(scope="module")
def keyed_client() -> Iterator[TestClient]:
    config = ServerConfig(api_key="s3cret", max_body_bytes=2000, tokenizer="none")
    with TestClient(create_app(config)) as client:
        yield client


def test_health_and_models(local_client: TestClient) -> None:
    assert local_client.get("/health").json() == {"status": "ok"}
    models = local_client.get("/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["deepseek-v4.1"]
    assert models["object"] == "list" and models["data"][0]["object"] == "model"


@pytest.mark.parametrize(
    ("path", "api", "body"),
    [
        ("/v1/chat/completions/render", "openai", CHAT),
        ("/v1/messages/render", "anthropic", MESSAGES),
    ],
)
def test_render_shows_the_exact_prompt_and_ids(
    local_client: TestClient, v41_tokenizer: str, path: str, api: str, body: dict[str, Any]
) -> None:
    response = local_client.post(path, json=body)
    assert response.status_code == 200
    shown = response.json()
    req = parse_request(api, body)
    expected = render_conversation(req.conversation, req.render)
    assert shown["prompt"] == expected.prompt
    assert shown["token_ids"] == load_tokenizer(v41_tokenizer).encode_prompt(expected)
    assert shown["notes"] == []
    assert shown["output_starts_in"] == expected.output_starts_in
    assert shown["model"] == body["model"]
    assert shown["dialect"] == DEFAULT_DIALECT.name
    assert shown["request_id"].startswith("chatcmpl-" if api == "openai" else "msg_")
    assert shown["sampling_params"]["skip_special_tokens"] is False
    assert shown["sampling_params"]["stop"][-1] == EOS
    assert shown["stream"] is False


def test_render_without_tokenizer_says_why(keyed_client: TestClient) -> None:
    shown = keyed_client.post(
        "/v1/chat/completions/render", json=CHAT, headers={"x-api-key": "s3cret"}
    ).json()
    assert shown["token_ids"] is None and shown["tokenizer"] is None
    assert any("no tokenizer" in note for note in shown["notes"])


def test_missing_tokenizer_extra_is_not_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    from dsmlkit.render import tokens
    from dsmlkit.server import state

    def not_installed(path: str | None = None) -> Any:
        raise tokens.TokenizerNotInstalled(install_hint("tokenizer"))

    monkeypatch.setattr(state, "load_tokenizer", not_installed)
    with TestClient(create_app()) as client:
        shown = client.post("/v1/chat/completions/render", json=CHAT).json()
        assert shown["token_ids"] is None
        assert any("pip install '.[tokenizer]'" in note for note in shown["notes"])
        refused = client.post("/tokenize", json={"prompt": "x"})
        assert refused.status_code == 501
        assert "pip install '.[tokenizer]'" in refused.json()["error"]["message"]


def test_tokenize_detokenize_and_count_tokens(local_client: TestClient, v41_tokenizer: str) -> None:
    tokenizer = load_tokenizer(v41_tokenizer)
    plain = local_client.post("/tokenize", json={"prompt": "hi <｜User｜>"}).json()
    assert plain["tokens"][0] == tokenizer.token_id(BOS)
    assert plain["tokens"][-1] == tokenizer.token_id("<｜User｜>")
    assert plain["count"] == len(plain["tokens"])
    bare = local_client.post(
        "/tokenize", json={"prompt": "hi", "add_special_tokens": False, "return_token_strs": True}
    ).json()
    assert bare["tokens"] == tokenizer.encode_text("hi")
    assert "".join(bare["token_strs"]) == "hi"
    chat = local_client.post("/tokenize", json={"messages": CHAT["messages"]}).json()
    rendered = local_client.post("/v1/chat/completions/render", json=CHAT | {"tools": []}).json()
    assert chat["tokens"] == rendered["token_ids"]
    back = local_client.post("/detokenize", json={"tokens": plain["tokens"]}).json()
    assert back["prompt"] == BOS + "hi <｜User｜>"
    counted = local_client.post("/v1/messages/count_tokens", json=MESSAGES | {"max_tokens": None})
    assert counted.status_code == 400  # a bad max_tokens is still checked when given
    body = {key: value for key, value in MESSAGES.items() if key != "max_tokens"}
    counted = local_client.post("/v1/messages/count_tokens", json=body).json()
    ids = local_client.post("/v1/messages/render", json=MESSAGES).json()["token_ids"]
    assert counted["input_tokens"] == len(ids)


@pytest.mark.parametrize("body", [{"tokens": "12"}, {"tokens": [1, -2]}, {"tokens": [True]}])
def test_detokenize_rejects_non_ids(local_client: TestClient, body: dict[str, Any]) -> None:
    response = local_client.post("/detokenize", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "tokens"


def test_parse_gives_an_openai_completion(local_client: TestClient) -> None:
    response = local_client.post("/v1/parse", json={"text": OUTPUT, "model": "raw"})
    completion = openai.types.chat.ChatCompletion.model_validate(response.json())
    message = completion.choices[0].message
    assert message.content == "Checking."
    assert message.tool_calls is not None
    call = message.tool_calls[0]
    assert call.type == "function" and call.id.startswith("call_")
    assert (call.function.name, json.loads(call.function.arguments)) == (
        "get_weather",
        {"city": "Paris"},
    )
    assert completion.choices[0].finish_reason == "tool_calls"
    assert response.json()["parse_diagnostics"] == []


def test_parse_gives_an_anthropic_message(local_client: TestClient) -> None:
    body = {
        "text": "Hmm.</think>" + OUTPUT + " trailing",
        "api": "anthropic",
        "start_in": "reasoning",
        "tools": [{"name": "get_weather", "input_schema": {}}],
    }
    response = local_client.post("/v1/parse", json=body).json()
    message = anthropic.types.Message.model_validate(response)
    assert [block.type for block in message.content] == ["thinking", "text", "tool_use"]
    assert message.content[2].type == "tool_use"
    assert message.content[2].input == {"city": "Paris"}
    assert message.stop_reason == "tool_use"
    assert [d["kind"] for d in response["parse_diagnostics"]] == ["text_after_block"]


def test_parse_of_cut_off_text_returns_no_call(local_client: TestClient) -> None:
    cut = OUTPUT[: OUTPUT.index("Paris")]
    response = local_client.post("/v1/parse", json={"text": cut, "finish_reason": "length"})
    choice = response.json()["choices"][0]
    assert choice["finish_reason"] == "length" and "tool_calls" not in choice["message"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "text"),
        ({"text": "x", "api": "gemini"}, "api"),
        ({"text": "x", "start_in": "middle"}, "start_in"),
        ({"text": "x", "dialect": "v9"}, "dialect"),
        ({"text": "x", "tools": "no"}, "tools"),
    ],
)
def test_parse_rejects_bad_bodies(
    local_client: TestClient, body: dict[str, Any], param: str
) -> None:
    response = local_client.post("/v1/parse", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param


@pytest.mark.parametrize("body", [b"", b" \r\n"])
@pytest.mark.parametrize("route", ["/v1/chat/completions/render", "/v1/messages/render"])
def test_an_empty_body_is_reported_as_empty(
    local_client: TestClient, route: str, body: bytes
) -> None:
    response = local_client.post(route, content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert "request body is empty" in message and "not valid JSON" not in message


def test_caller_mistakes_come_back_in_each_apis_envelope(local_client: TestClient) -> None:
    broken = local_client.post(
        "/v1/chat/completions/render",
        content=b"{nope",
        headers={"content-type": "application/json"},
    )
    assert broken.status_code == 400
    assert broken.json()["error"]["type"] == "invalid_request_error"
    bad_result = {
        "model": "m",
        "max_tokens": 5,
        "messages": [
            {"role": "user", "content": [{"type": "tool_result", "content": "orphan"}]},
        ],
    }
    anthropic_error = local_client.post("/v1/messages/render", json=bad_result)
    assert anthropic_error.status_code == 400
    body = anthropic_error.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith("messages[0].content[0]")
    assert body["request_id"] == anthropic_error.headers["x-request-id"]
    assert body["request_id"] == anthropic_error.headers["request-id"]


def test_gateway_routes_without_upstream_say_how_to_enable_them(local_client: TestClient) -> None:
    openai_side = local_client.post("/v1/chat/completions", json=CHAT)
    assert openai_side.status_code == 404
    assert "--upstream" in openai_side.json()["error"]["message"]
    anthropic_side = local_client.post("/v1/messages", json=MESSAGES)
    assert anthropic_side.json()["error"]["type"] == "not_found_error"
    assert local_client.get("/nowhere").json()["error"]["type"] == "not_found_error"


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        ({"authorization": "Bearer wrong"}, 401),
        ({"authorization": "Bearer s3cret"}, 200),
        ({"x-api-key": "s3cret"}, 200),
    ],
)
def test_api_key(keyed_client: TestClient, headers: dict[str, str], status: int) -> None:
    response = keyed_client.post("/v1/messages/render", json=MESSAGES, headers=headers)
    assert response.status_code == status
    if status == 401:
        assert response.json()["error"]["type"] == "authentication_error"
    assert keyed_client.get("/health").status_code == 200  # liveness needs no key


def test_body_size_limit(keyed_client: TestClient) -> None:
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * 3000}]}
    declared = keyed_client.post(
        "/v1/chat/completions/render", json=big, headers={"x-api-key": "s3cret"}
    )
    assert declared.status_code == 413
    assert declared.json()["error"]["type"] == "request_too_large"
    chunked = keyed_client.post(
        "/v1/messages/render",
        content=iter([json.dumps(big).encode()[:1500], json.dumps(big).encode()[1500:]]),
        headers={"x-api-key": "s3cret", "content-type": "application/json"},
    )
    assert chunked.status_code == 413
    assert chunked.json()["type"] == "error"


def _samples(text: str) -> dict[str, float]:
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def test_metrics_and_log_line(caplog: pytest.LogCaptureFixture) -> None:
    with TestClient(create_app(ServerConfig(tokenizer="none"))) as client:
        with caplog.at_level(logging.INFO, logger="dsmlkit.server.access"):
            client.post("/v1/parse", json={"text": OUTPUT + " after"})
            client.post("/v1/parse", json={})
            client.get("/no-such-route")
        lines = [getattr(r, FIELDS) for r in caplog.records if r.name == ACCESS_LOGGER.name]
        exposition = client.get("/metrics")
    assert exposition.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = _samples(exposition.text)
    assert samples['dsmlkit_requests_total{route="/v1/parse",status="200"}'] == 1
    assert samples['dsmlkit_requests_total{route="/v1/parse",status="400"}'] == 1
    assert samples['dsmlkit_requests_total{route="other",status="404"}'] == 1
    assert (
        samples['dsmlkit_request_errors_total{route="/v1/parse",type="invalid_request_error"}'] == 1
    )
    assert samples['dsmlkit_parse_diagnostics_total{kind="text_after_block"}'] == 1
    assert samples["dsmlkit_parse_seconds_count"] == 1
    assert samples['dsmlkit_parse_seconds_bucket{le="+Inf"}'] == 1
    assert [line["status"] for line in lines] == [200, 400, 404]
    first = lines[0]
    assert first["route"] == "/v1/parse" and first["id"].startswith("req_")
    assert first["diagnostics"] == {"text_after_block": 1}
    assert first["finish_reason"] == "tool_calls" and "parse_ms" in first
    assert lines[1]["error"] == "invalid_request_error"


_ONE_TURN = '"model": "m", "messages": [{"role": "user", "content": "hi"}]'
_DEEP = "[" * 1000 + "1" + "]" * 1000


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions/render", '{"temperature": NaN, ' + _ONE_TURN + "}", "temperature"),
        (
            "/v1/messages/render",
            '{"max_tokens": 5, "top_p": -Infinity, ' + _ONE_TURN + "}",
            "top_p",
        ),
        (
            "/v1/messages/render",
            '{"max_tokens": 5, "messages": [{"role": "user", "content": "a \\ud800"}]}',
            "messages[0].content",
        ),
        (
            "/v1/chat/completions/render",
            '{"messages": [{"role": "user", "content": "hi"}], "tools": ' + _DEEP + "}",
            "tools" + "[0]" * 63,
        ),
        (
            "/v1/chat/completions/render",
            '{"messages": [{"role": "user", "content": "hi"}], "x": ' + "[" * 80 + "]" * 80 + "}",
            "x" + "[0]" * 63,
        ),
        ("/v1/parse", '{"text": "x", "dialect": 4.1}', "dialect"),
        # issue 26, found by tests/server/test_hostile_bodies.py: each was a 500
        ("/v1/chat/completions/render", '{"temperature": 1e400, ' + _ONE_TURN + "}", "temperature"),
        ("/v1/parse", '{"text": "x", "tools": [{"parameters": -1E+999}]}', "tools[0].parameters"),
        ("/v1/parse", '{"text": "x", "a\\ud800": 1}', "a\\ud800"),
        ("/v1/parse", '{"text": "x", "b\\udc80": ' + _DEEP + "}", "b\\udc80" + "[0]" * 63),
        ("/v1/parse", b'{"text": "x\xed\xa0\x80"}', None),
        (
            "/v1/messages/render",
            '{"max_tokens": 5, ' + _ONE_TURN + ', "tools": [{"name": "a", "input_schema": '
            '{"type": "object"}}], "tool_choice": {"type": "tool", "name": ["a"]}}',
            "tool_choice.name",
        ),
    ],
)
def test_malformed_bodies_are_400s_naming_the_field(
    local_client: TestClient, path: str, body: str | bytes, param: str | None
) -> None:
    response = local_client.post(path, content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    if path.startswith("/v1/messages"):
        assert error["type"] == "invalid_request_error"
        assert error["message"].startswith(f"{param}: ")
    else:
        assert error["param"] == param


def test_detokenize_refuses_ids_the_tokenizer_lacks(local_client: TestClient) -> None:
    response = local_client.post("/detokenize", json={"tokens": [5, 10**7]})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "tokens[1]"
    assert "not in the tokenizer" in response.json()["error"]["message"]
