"""401 and 403 answers say ``x-should-retry: false``: the official SDKs, with their default
retries, send exactly one request for a wrong or refused key."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from tests.server.conftest import CLIENT_TIMEOUT, Gateway
from tests.server.fake_engine import FakeEngine, Reply

APIS = ["openai", "anthropic", "responses"]
MESSAGES = [{"role": "user", "content": "go"}]


class Counted:
    """SDK clients (default retries) over each SDK's own HTTP client, counting the
    answers they got: ``sent`` holds ``(status, x-should-retry)`` per request."""

    def __init__(self, url: str) -> None:
        self.sent: list[tuple[int, str | None]] = []
        self._url = url
        self._hooks = {"response": [self._count]}

    def _count(self, response: Any) -> None:
        self.sent.append((response.status_code, response.headers.get("x-should-retry")))

    def ask(self, api: str) -> None:
        if api == "anthropic":
            http = anthropic.DefaultHttpxClient(timeout=CLIENT_TIMEOUT, event_hooks=self._hooks)
            client = anthropic.Anthropic(base_url=self._url, api_key="wrong", http_client=http)
            client.messages.create(model="m", max_tokens=10, messages=MESSAGES)  # type: ignore[arg-type]
            return
        http_o = openai.DefaultHttpxClient(timeout=CLIENT_TIMEOUT, event_hooks=self._hooks)
        openai_client = openai.OpenAI(
            base_url=self._url + "/v1", api_key="wrong", http_client=http_o
        )
        if api == "responses":
            openai_client.responses.create(model="m", input="go")
        else:
            openai_client.chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]


def _errors(api: str) -> tuple[type[Exception], type[Exception]]:
    """(the SDK's 401 error, its 403 error)."""
    if api == "anthropic":
        return anthropic.AuthenticationError, anthropic.PermissionDeniedError
    return openai.AuthenticationError, openai.PermissionDeniedError


@pytest.mark.parametrize("api", APIS)
def test_a_wrong_api_key_is_answered_once(
    start_gateway: Callable[..., str], engine: FakeEngine, api: str
) -> None:
    client = Counted(start_gateway(upstream_api="completions", api_key="right-key"))
    with pytest.raises(_errors(api)[0]):
        client.ask(api)
    assert client.sent == [(401, "false")]
    assert engine.requests == []


@pytest.mark.parametrize("api", APIS)
def test_a_key_the_upstream_refuses_is_answered_once(chat_gateway: Gateway, api: str) -> None:
    """The client's own key, forwarded, refused upstream with 403: the client's 403."""
    chat_gateway.engine.push(*[Reply(status=403)] * 3)
    client = Counted(chat_gateway.url)
    with pytest.raises(_errors(api)[1]):
        client.ask(api)
    assert client.sent == [(403, "false")]
    assert len(chat_gateway.engine.requests) == 1


def test_other_errors_leave_retrying_to_the_client(completions_gateway: Gateway) -> None:
    body: dict[str, Any] = {"model": "m", "messages": MESSAGES, "max_tokens": 0}
    with completions_gateway.http() as http:
        answer = http.post("/v1/chat/completions", json=body)
    assert answer.status_code == 400 and "x-should-retry" not in answer.headers
