"""Upstream answers the fake engine does not produce, through a mock transport in-process."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import anyio
import httpx
import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from dsmlkit.server import ServerConfig, create_app
from dsmlkit.server.errors import UpstreamError
from dsmlkit.server.upstream import UpstreamClient, UpstreamStream, error_message
from tests.server.mock_upstream import Handler, mock_upstream

CHAT = {
    "model": "m",
    "messages": [{"role": "user", "content": "hi"}],
    "chat_template_kwargs": {"thinking": False},
}


def _chunk(text: str, finish: str | None = None) -> str:
    choice = {"index": 0, "text": text, "finish_reason": finish}
    return "data: " + json.dumps({"choices": [choice]}) + "\n\n"


@contextmanager
def _gateway(answer: Handler, **settings: Any) -> Iterator[TestClient]:
    """A gateway in-process whose upstream answers with ``answer``."""
    with mock_upstream(answer) as url:
        config = ServerConfig(upstream=url, tokenizer="none", **settings)
        with TestClient(create_app(config)) as client:
            yield client


def _client(
    body: bytes, content_type: str = "text/event-stream"
) -> AbstractContextManager[TestClient]:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": content_type}, content=body)

    return _gateway(answer)


def _ask(client: TestClient, **extra: Any) -> Any:
    return client.post("/v1/chat/completions", json={**CHAT, **extra})


def test_sse_comments_multiline_data_and_no_final_blank_line() -> None:
    stream = (
        ": keep-alive comment\n\n"
        'data: {"choices": [{"index": 0,\ndata:  "text": "Hel", "finish_reason": null}]}\n\n'
        "event: ignored\n"
        + _chunk("lo")
        + "data:"
        + json.dumps({"choices": [{"index": 0, "text": "!", "finish_reason": "stop"}]})
    )
    with _client(stream.encode()) as client:
        response = _ask(client)
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "Hello!"


@pytest.mark.parametrize(
    ("stream", "words"),
    [
        (_chunk("Hel"), "ended before the output did"),
        (_chunk("Hel") + _chunk("", "abort"), "finish_reason 'abort'"),
        (
            _chunk("Hel") + 'data: {"error": {"message": "engine died", "code": 500}}\n\n',
            "engine died",
        ),
        (_chunk("Hel") + "data: [1, 2]\n\n", "non-object chunk"),
    ],
)
def test_streams_that_do_not_finish_properly(stream: str, words: str) -> None:
    with _client(stream.encode()) as client:
        plain = _ask(client)
        streamed = _ask(client, stream=True)
    assert plain.status_code == 502
    assert words in plain.json()["error"]["message"]
    last = [line for line in streamed.text.splitlines() if line.startswith("data: ")][-1]
    assert words in json.loads(last[6:])["error"]["message"]


def test_a_json_answer_to_a_stream_request_is_refused() -> None:
    with _client(b'{"choices": []}', content_type="application/json") as client:
        response = client.post("/v1/messages", json={**CHAT, "max_tokens": 5})
    assert response.status_code == 502
    assert "not an event stream" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"error": {"message": "context too long"}}', "context too long"),
        (b'{"detail": "Not Found"}', "Not Found"),
        (b'{"error": "plain words"}', "plain words"),
        (b"<html>bad gateway</html>", "<html>bad gateway</html>"),
        (b"", "(empty body)"),
    ],
)
def test_error_message_of_upstream_bodies(body: bytes, message: str) -> None:
    assert error_message(body) == message


@pytest.mark.parametrize(
    ("stream", "words"),
    [
        (_chunk("Hel") + 'data: {"choices": "oops"}\n\n', "choices is not a list"),
        (_chunk("Hel") + 'data: {"choices": [1]}\n\n', "choices is not a list"),
        (_chunk("Hel") + 'data: {"choices": [], "usage": 5}\n\n', "usage is not an object"),
    ],
)
def test_malformed_chunks_are_502s(stream: str, words: str) -> None:
    with _client(stream.encode()) as client:
        plain = _ask(client)
    assert plain.status_code == 502
    assert words in plain.json()["error"]["message"]


def test_a_body_declared_gzip_that_is_not_is_a_502() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        headers = {"content-type": "text/event-stream", "content-encoding": "gzip"}
        raw = httpx.ByteStream(_chunk("plain text").encode())  # content= would decode it here
        return httpx.Response(200, headers=headers, stream=raw)

    with _gateway(answer) as client:
        plain = _ask(client)
        streamed = _ask(client, stream=True)
    assert plain.status_code == 502
    assert "cannot be decoded" in plain.json()["error"]["message"]
    assert "cannot be decoded" in streamed.text


def test_a_mid_stream_401_is_the_gateways_upstream_problem() -> None:
    stream = _chunk("Hel") + 'data: {"error": {"message": "key expired", "code": 401}}\n\n'
    with _client(stream.encode()) as client:
        plain = _ask(client)
        message = client.post("/v1/messages", json={**CHAT, "max_tokens": 5})
    assert plain.status_code == 502 and message.status_code == 502
    assert plain.json()["error"]["type"] == "api_error"
    assert "mid-stream (401): key expired" in plain.json()["error"]["message"]
    assert message.json()["error"]["type"] == "api_error"


@pytest.mark.parametrize(
    ("settings", "headers", "status"),
    [
        ({"upstream_api_key": "gateway-key"}, {}, 502),  # the gateway's own key was refused
        ({}, {"authorization": "Bearer client-key"}, 401),  # the client's forwarded key
    ],
)
def test_an_upstream_401_is_the_clients_only_for_the_clients_key(
    settings: dict[str, Any], headers: dict[str, str], status: int
) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, json={"error": {"message": "bad key"}})

    with _gateway(answer, **settings) as client:
        response = client.post("/v1/chat/completions", json=CHAT, headers=headers)
    assert response.status_code == status
    assert "bad key" in response.json()["error"]["message"]


def _arriving(reads: list[bytes]) -> Callable[[], Awaitable[bytes]]:
    """A body that arrives in the given reads (then ``b""``, its end)."""
    left = [read for read in reads if read]  # an empty read would say the body ended

    async def read() -> bytes:
        return left.pop(0) if left else b""

    return read


def _nothing_to_close() -> None:
    pass


def _payloads(reads: list[bytes]) -> list[dict[str, Any]]:
    stream = UpstreamStream(_arriving(reads), _nothing_to_close, time.perf_counter())

    async def read() -> list[dict[str, Any]]:
        return [chunk async for batch in stream.batches() for chunk in batch]

    return anyio.run(read)


_EVENTS = [{"choices": [{"index": 0, "text": text}]} for text in ("a", "é\n", "", "日本")]


@settings(derandomize=True, deadline=None)  # an anyio loop per example: slow under load
@given(
    ending=st.sampled_from(["\n", "\r\n", "\r"]),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12),
    done=st.booleans(),
)
def test_sse_events_are_the_same_however_the_reads_fall(
    ending: str, cuts: list[int], done: bool
) -> None:
    lines = [": comment", "event: x", "data: " + json.dumps(_EVENTS[0]), ""]
    lines += ["data:" + json.dumps(_EVENTS[1]), "", ""]
    split = json.dumps(_EVENTS[2], ensure_ascii=False)
    at = split.index("[")  # the data lines join with a newline: between two JSON tokens
    lines += ["data: " + split[:at], "data: " + split[at:], ""]
    lines += ["data: " + json.dumps(_EVENTS[3], ensure_ascii=False), ""]
    lines += ["data: [DONE]", "", "data: " + json.dumps({"after": "done"}), ""] if done else []
    body = ending.join(lines).encode()
    points = sorted({min(cut, len(body)) for cut in cuts})
    reads = [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]
    assert _payloads(reads) == _EVENTS


def test_an_event_without_its_blank_line_ends_the_body() -> None:
    assert _payloads([b"data: " + json.dumps(_EVENTS[0]).encode() + b"\r"]) == _EVENTS[:1]


def test_an_event_that_is_not_utf8_is_read_with_replacement_characters() -> None:
    body = b'data: {"choices": [{"index": 0, "text": "a\xffb"}]}\n\n'
    assert _payloads([body]) == [{"choices": [{"index": 0, "text": "a\ufffdb"}]}]


def test_lone_surrogate_escapes_are_read_as_replacement_characters() -> None:
    # JSON may escape a UTF-16 surrogate alone; it is not text, and no answer can carry it
    body = b'data: {"choices": [{"index": 0, "text": "a\\ud800b\\udfff", "\\udc00": 1}]}\n\n'
    pair = b'data: {"choices": [{"index": 0, "text": "\\ud83d\\ude00"}]}\n\n'
    assert _payloads([body + pair]) == [
        {"choices": [{"index": 0, "text": "a\ufffdb\ufffd", "\ufffd": 1}]},
        {"choices": [{"index": 0, "text": "\U0001f600"}]},
    ]


def test_a_lone_surrogate_in_the_output_reaches_the_client_as_a_replacement() -> None:
    stream = _chunk("hi \ud800 there") + _chunk("", "stop")  # json.dumps escapes it
    with _client(stream.encode()) as client:
        plain = _ask(client)
        streamed = client.post("/v1/messages", json={**CHAT, "max_tokens": 5, "stream": True})
    assert plain.status_code == 200
    assert plain.json()["choices"][0]["message"]["content"] == "hi \ufffd there"
    assert streamed.status_code == 200
    assert "hi \ufffd there" in streamed.text
    assert "event: message_stop" in streamed.text


def test_chunks_the_fast_decoder_refuses_are_read_by_the_standard_one() -> None:
    big, nan = {"choices": [], "n": 2**70}, b'data: {"choices": [], "x": NaN}\n\n'
    body = b"data: " + json.dumps(big).encode() + b"\n\n" + nan
    first, second = _payloads([body])
    assert first == big
    assert second["x"] != second["x"]  # NaN, as the standard decoder reads it


def test_a_refused_connection_is_said_without_the_address() -> None:
    with socket.socket() as unused:  # a port nothing listens on
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]

    async def refused() -> UpstreamError:
        client = UpstreamClient(read_timeout=5, connect_timeout=5, deadline=10)
        try:
            with pytest.raises(UpstreamError) as raised:
                await client.open_stream(f"http://127.0.0.1:{port}/v1/completions", {}, {}, {})
        finally:
            await client.aclose()
        return raised.value

    error = anyio.run(refused)
    assert error.kind == "connect"
    assert error.message == "cannot reach the upstream: Connection refused"


def test_a_redirect_is_not_followed() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/elsewhere"):
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=b"")
        return httpx.Response(307, headers={"location": "/elsewhere"})

    with _gateway(answer) as client:
        response = _ask(client)
    assert response.status_code == 502
    assert "not an event stream" in response.json()["error"]["message"]


def test_a_cookie_an_upstream_sets_goes_out_with_no_later_request() -> None:
    """One upstream client serves every client: what one answer set must not be sent
    with another client's request (an upstream named by host name: cookies of a bare IP
    address are refused anyway)."""
    cookies: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/completions"):
            cookies.append(request.headers.get("cookie"))
        stream = _chunk("hi", "stop") + "data: [DONE]\n\n"
        headers = {"content-type": "text/event-stream", "set-cookie": "session=client-a; Path=/"}
        return httpx.Response(200, headers=headers, content=stream.encode())

    with mock_upstream(answer) as url:
        config = ServerConfig(upstream=url.replace("127.0.0.1", "localhost"), tokenizer="none")
        with TestClient(create_app(config)) as client:
            assert _ask(client).status_code == 200
            assert _ask(client).status_code == 200
    assert cookies == [None, None]
