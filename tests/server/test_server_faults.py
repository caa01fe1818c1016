"""Every upstream fault ends in an error in the client's API shape, never in a hang."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.server.conftest import CLIENT_TIMEOUT, Gateway, closed_port_url
from tests.server.fake_engine import FakeEngine, Reply
from tests.server.sdk import ask

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
MESSAGES = {**CHAT, "max_tokens": 50}
LONG_TEXT = "The answer keeps going for a while. " * 8


def _post(gateway: Gateway, api: str, **extra: Any) -> httpx.Response:
    path, body = ("/v1/chat/completions", CHAT) if api == "openai" else ("/v1/messages", MESSAGES)
    with gateway.http() as http:
        return http.post(path, json={**body, **extra})


def _error_of(api: str, body: dict[str, Any]) -> dict[str, Any]:
    """The error object, after checking the API's envelope."""
    if api == "anthropic":
        assert body["type"] == "error" and body["request_id"].startswith("req_")
        assert set(body["error"]) == {"type", "message"}
    else:
        assert set(body["error"]) == {"message", "type", "param", "code"}
    error: dict[str, Any] = body["error"]
    return error


FAULTS = {
    "upstream-500": (Reply(status=500), 502, "api_error", "answered 500"),
    "upstream-400": (Reply(status=400), 400, "invalid_request_error", "scripted failure 400"),
    "upstream-429": (Reply(status=429), 429, "rate_limit_error", "answered 429"),
    "hang": (Reply(text=LONG_TEXT, hang_after=0), 504, "timeout_error", "read timeout"),
    "drop-mid-stream": (Reply(text=LONG_TEXT, drop_after=3), 502, "api_error", "broke off"),
    "malformed-sse": (Reply(text=LONG_TEXT, malformed_after=2), 502, "api_error", "not JSON"),
}


@pytest.fixture
def gateway(start_gateway: Callable[..., str], engine: FakeEngine) -> Gateway:
    """A completions gateway that gives up on a silent upstream after 0.3 s."""
    return Gateway(start_gateway(upstream_timeout=0.3), engine)


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("fault", list(FAULTS))
def test_fault_without_streaming_is_an_error_response(
    gateway: Gateway, fault: str, api: str
) -> None:
    reply, status, error_type, words = FAULTS[fault]
    gateway.engine.push(reply)
    response = _post(gateway, api)
    assert response.status_code == status
    error = _error_of(api, response.json())
    assert error["type"] == error_type
    assert words in error["message"]


def _stream_events(api: str, response: httpx.Response) -> list[tuple[str | None, dict[str, Any]]]:
    events: list[tuple[str | None, dict[str, Any]]] = []
    name = None
    for line in response.iter_lines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: ") and line != "data: [DONE]":
            events.append((name, json.loads(line[6:])))
            name = None
    return events


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("fault", ["hang", "drop-mid-stream", "malformed-sse"])
def test_fault_mid_stream_ends_with_an_error_event(gateway: Gateway, fault: str, api: str) -> None:
    reply, _, error_type, words = FAULTS[fault]
    gateway.engine.push(reply)
    response = _post(gateway, api, stream=True)
    assert response.status_code == 200
    events = _stream_events(api, response)
    name, last = events[-1]
    assert "data: [DONE]" not in response.text
    if api == "anthropic":
        assert name == "error"
        assert events[0][0] == "message_start"
    else:
        assert "choices" in events[0][1]
    error = _error_of(api, last)
    assert error["type"] == error_type
    assert words in error["message"]


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("fault", ["upstream-500", "upstream-429"])
def test_fault_before_the_stream_starts_is_an_error_status(
    completions_gateway: Gateway, fault: str, api: str
) -> None:
    reply, status, error_type, _ = FAULTS[fault]
    completions_gateway.engine.push(reply)
    response = _post(completions_gateway, api, stream=True)
    assert response.status_code == status
    assert _error_of(api, response.json())["type"] == error_type


def test_sdks_raise_on_mid_stream_errors(completions_gateway: Gateway) -> None:
    engine = completions_gateway.engine
    engine.push(Reply(text=LONG_TEXT, drop_after=3), Reply(text=LONG_TEXT, drop_after=3))
    with pytest.raises(openai.APIError, match="broke off"):
        ask(completions_gateway, "openai", True, thinking=False)
    with pytest.raises(anthropic.APIStatusError, match="broke off"):
        ask(completions_gateway, "anthropic", True, thinking=False)


def test_chat_upstream_drop_mid_stream(chat_gateway: Gateway) -> None:
    chat_gateway.engine.push(Reply(content=LONG_TEXT, drop_after=4))
    response = _post(chat_gateway, "openai", stream=True)
    assert "broke off" in _error_of("openai", _stream_events("openai", response)[-1][1])["message"]


@pytest.mark.slow
@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_unreachable_upstream(
    start_gateway: Callable[..., str], engine: FakeEngine, api: str
) -> None:
    gateway = Gateway(start_gateway(upstream=closed_port_url()), engine)
    for stream in (False, True):
        response = _post(gateway, api, stream=stream)
        assert response.status_code == 502
        assert "cannot reach the upstream" in _error_of(api, response.json())["message"]


def _wait_for(condition: Callable[[], bool], within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.mark.slow
@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_client_disconnect_closes_the_upstream_request(
    start_gateway: Callable[..., str], engine: FakeEngine, api: str
) -> None:
    """With a long upstream timeout, only the client's going away can end these requests."""
    gateway = Gateway(start_gateway(upstream_timeout=300.0), engine)
    engine.push(Reply(text=LONG_TEXT, hang_after=3), Reply(text=LONG_TEXT, hang_after=0))
    path, body = ("/v1/chat/completions", CHAT) if api == "openai" else ("/v1/messages", MESSAGES)
    with (
        httpx.Client(base_url=gateway.url, timeout=CLIENT_TIMEOUT) as http,
        http.stream("POST", path, json={**body, "stream": True}) as response,
    ):
        assert next(response.iter_lines())  # the stream is running; now hang up
    assert _wait_for(lambda: engine.disconnects == 1)
    with httpx.Client(base_url=gateway.url, timeout=0.5) as http, pytest.raises(httpx.ReadTimeout):
        http.post(path, json=body)
    assert _wait_for(lambda: engine.disconnects == 2)
    sample = f'dsmlkit_request_errors_total{{route="{path}",type="client_disconnected"}} 2.0'

    def recorded() -> bool:
        with gateway.http() as http:
            return sample in http.get("/metrics").text.splitlines()

    assert _wait_for(recorded)


@pytest.mark.parametrize(
    ("path", "broken"),
    [
        ("/metrics", "dsmlkit.server.metrics.Metrics.render"),  # a FastAPI route
        ("/v1/chat/completions", "dsmlkit.server.pipeline.plan_upstream"),  # the gateway's
    ],
)
def test_a_bug_is_a_500_in_the_apis_shape_with_the_request_id(
    monkeypatch: pytest.MonkeyPatch, path: str, broken: str
) -> None:
    """Nothing a client sends should reach a bug; if one is reached anyway, the answer is
    still the API's error envelope, with the request id to find the log line by."""
    from fastapi.testclient import TestClient

    from dsmlkit.server import ServerConfig, create_app

    def bug(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(broken, bug)
    app = create_app(ServerConfig(upstream=closed_port_url(), tokenizer="none"))
    with TestClient(app, raise_server_exceptions=False) as client:
        if path == "/metrics":
            response = client.get(path)
        else:
            response = client.post(
                path, json={"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            )
    assert response.status_code == 500
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert error["type"] == "api_error"
    assert "RuntimeError" in error["message"]
    assert response.headers["x-request-id"].startswith("req_")
