"""The fault matrix: an engine's transport faults × the three client APIs × streamed or not
× both upstream modes, through real ``dsmlkit serve`` processes in front of the fault
engine (:mod:`tests.server.fault_engine`).

Each cell asserts what the client got (the answer, or the API's error: its status and
shape, or the error event that ends a stream) and that it came within the upstream timeout
plus slack; each fault, that the gateway closed the faulted upstream connections and
logged no traceback and no 500 of its own. The cells of one fault run at once (each
request carries its own marker, which picks its reply), so the file takes seconds.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.server.conftest import anthropic_client, openai_client
from tests.server.fault_engine import Fault, FaultEngine, Reply, fault_engine
from tests.server.process import ServerLog, serve_process
from tests.server.sdk import Answer, declared
from tests.server.sdk import ask as ask_sdk
from tests.server.test_choice_enforced import engine_block

# Real processes (dsmlkit serve).
pytestmark = pytest.mark.slow

#: ``--upstream-timeout`` of the gateways under test.
UPSTREAM_TIMEOUT = 1.0
#: How late an error may come: the timeout, the gateway's check of a waiting read (every
#: second at most) and a loaded 2-core machine.
ON_TIME = UPSTREAM_TIMEOUT + 2.5
APIS = ("chat", "messages", "responses")
MODES = ("completions", "chat")
TEXT = "The answer goes on for a while, in small pieces. " * 4
MB = 1024 * 1024


@dataclass
class Served:
    """A running gateway: its process, URL and what it logged so far (read as it comes,
    so that a full pipe never blocks it)."""

    process: subprocess.Popen[str]
    url: str
    log: ServerLog

    def memory_mb(self, field: str = "VmRSS") -> float:
        """The process's resident memory now (``VmHWM``: its peak so far), in MB."""
        with open(f"/proc/{self.process.pid}/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
        raise AssertionError(f"no {field} in /proc/{self.process.pid}/status")

    def openai(self) -> openai.OpenAI:
        return openai_client(self.url)

    def anthropic(self) -> anthropic.Anthropic:
        return anthropic_client(self.url)

    def problems(self) -> list[str]:
        """Log lines with a traceback or a 500 of the gateway's own."""
        return [line for line in self.log.lines if "Traceback" in line or '"status": 500' in line]


@contextmanager
def gateway(engine: FaultEngine, mode: str, *flags: str) -> Iterator[Served]:
    """``dsmlkit serve`` in front of ``engine`` (``--upstream-api mode``)."""
    with serve_process(
        "--upstream",
        engine.url,
        "--upstream-api",
        mode,
        "--tokenizer",
        "none",
        "--upstream-timeout",
        str(UPSTREAM_TIMEOUT),
        *flags,
    ) as (process, url):
        yield Served(process, url, ServerLog(process))


@pytest.fixture(scope="module")
def engine() -> Iterator[FaultEngine]:
    with fault_engine(Reply(text=TEXT, content=TEXT)) as running:
        yield running


@pytest.fixture(scope="module")
def gateways(engine: FaultEngine) -> Iterator[dict[str, Served]]:
    with gateway(engine, "completions") as completions, gateway(engine, "chat") as chat:
        yield {"completions": completions, "chat": chat}


@dataclass(frozen=True)
class Got:
    """What a client got: the status, the error's type (``None`` for an answer; for a
    Responses stream the failed response's error code), the answer's text, the time."""

    status: int
    error: str | None
    text: str
    seconds: float


def ask(url: str, api: str, stream: bool, marker: str) -> Got:
    """One request with raw HTTP; the answer's shape is checked on the way."""
    path, body = _request(api, marker)
    started = time.monotonic()
    with httpx.Client(timeout=30) as http:
        response = http.post(url + path, json={**body, "stream": stream})
    seconds = time.monotonic() - started
    if not stream or response.status_code != 200:
        data = response.json()
        if response.status_code != 200:
            return Got(response.status_code, _error_type(api, data), "", seconds)
        return Got(200, None, _text(api, data), seconds)
    events = _sse(response.text)
    error, text = _stream_outcome(api, events)
    return Got(200, error, text, seconds)


def _request(api: str, marker: str) -> tuple[str, dict[str, Any]]:
    """A request whose prompt holds ``marker``, in non-thinking mode (the engine's text is
    the answer's)."""
    messages = [{"role": "user", "content": marker}]
    if api == "chat":
        off = {"chat_template_kwargs": {"thinking": False}}
        return "/v1/chat/completions", {"model": "m", "messages": messages, **off}
    if api == "messages":
        return "/v1/messages", {"model": "m", "max_tokens": 200, "messages": messages}
    return "/v1/responses", {"model": "m", "input": marker, "reasoning": {"effort": "none"}}


def _error_type(api: str, data: dict[str, Any]) -> str:
    if api == "messages":
        assert data["type"] == "error" and data["request_id"].startswith("req_")
        assert set(data["error"]) == {"type", "message"}
    else:
        assert set(data["error"]) == {"message", "type", "param", "code"}
    _no_address(data["error"]["message"])
    error_type: str = data["error"]["type"]
    return error_type


def _no_address(message: str) -> None:
    assert "127.0.0.1" not in message and "http://" not in message, message


def _text(api: str, data: dict[str, Any]) -> str:
    if api == "chat":
        return str(data["choices"][0]["message"]["content"])
    if api == "messages":
        return "".join(block["text"] for block in data["content"] if block["type"] == "text")
    return "".join(
        part["text"]
        for item in data["output"]
        if item["type"] == "message"
        for part in item["content"]
    )


def _sse(body: str) -> list[tuple[str | None, Any]]:
    """``(event name, decoded data)`` of each event; ``[DONE]`` as a string."""
    events: list[tuple[str | None, Any]] = []
    for block in body.split("\n\n"):
        name, data = None, None
        for line in block.splitlines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = line[6:] if line == "data: [DONE]" else json.loads(line[6:])
        if data is not None:
            events.append((name, data))
    return events


def _stream_outcome(api: str, events: list[tuple[str | None, Any]]) -> tuple[str | None, str]:
    """The error type that ended the stream (None if it finished), and its text."""
    name, last = events[-1]
    if api == "chat":
        pieces = [e["choices"][0]["delta"].get("content") or "" for _, e in events[:-1]]
        if last == "[DONE]":
            return None, "".join(p for p in pieces)
        return _error_type(api, last), ""
    if api == "messages":
        text = "".join(e["delta"].get("text", "") for n, e in events if n == "content_block_delta")
        if name == "message_stop":
            return None, text
        assert name == "error"
        return _error_type(api, last), ""
    text = "".join(e["delta"] for n, e in events if n == "response.output_text.delta")
    if name == "response.completed":
        return None, text
    assert name == "response.failed"
    error = last["response"]["error"]
    _no_address(error["message"])
    return str(error["code"]), ""


@dataclass(frozen=True)
class Expected:
    """A fault's outcome: an error status and type (the Responses stream's error code is
    always ``server_error``; ``early``: the error comes before a stream starts, as a
    status), or an answer whose text holds ``text``."""

    status: int = 200
    error: str | None = None
    text: str = TEXT
    early: bool = False


#: Each fault, and what every client gets.
FAULTS: dict[Fault, Expected] = {
    "broken_chunk": Expected(502, "api_error"),
    "reset": Expected(502, "api_error"),
    "stall_headers": Expected(504, "timeout_error", early=True),
    "stall_mid": Expected(504, "timeout_error"),
    "huge_line": Expected(502, "api_error"),
    "invalid_utf8": Expected(text="\ufffd"),
    "silent_close": Expected(),
}


def _expected(got: Got, expected: Expected, api: str, stream: bool) -> None:
    """``got`` is ``expected`` (a stream that had started ends with an error event)."""
    if expected.error is None:
        assert (got.status, got.error) == (200, None)
        assert expected.text in got.text
        return
    if not stream or expected.early:
        assert (got.status, got.error) == (expected.status, expected.error)
    elif api == "responses":
        assert (got.status, got.error) == (200, "server_error")
    else:
        assert (got.status, got.error) == (200, expected.error)


@pytest.mark.parametrize("fault", list(FAULTS))
def test_every_fault_in_every_api_ends_on_time(
    engine: FaultEngine, gateways: dict[str, Served], fault: Fault
) -> None:
    cells = [(mode, api, stream) for mode in MODES for api in APIS for stream in (False, True)]
    for index in range(len(cells)):
        engine.mark(f"[cell {fault} {index}]", Reply(text=TEXT, content=TEXT, fault=fault, after=2))

    def run(index: int) -> Got:
        mode, api, stream = cells[index]
        return ask(gateways[mode].url, api, stream, f"[cell {fault} {index}]")

    with ThreadPoolExecutor(len(cells)) as pool:
        results = list(pool.map(run, range(len(cells))))
    for (mode, api, stream), got in zip(cells, results, strict=True):
        where = f"{fault}: {mode} upstream, {api}, stream={stream}: {got}"
        _expected_or_fail(got, FAULTS[fault], api, stream, where)
        assert got.seconds < ON_TIME, where
    assert engine.wait_faulted_closed(2.0) == 0, "the gateway left faulted connections open"
    for served in gateways.values():
        assert served.problems() == []


def _expected_or_fail(got: Got, expected: Expected, api: str, stream: bool, where: str) -> None:
    try:
        _expected(got, expected, api, stream)
    except AssertionError as exc:
        raise AssertionError(where) from exc


# --- what the model wrote, through the same engine --------------------------------------

#: The SDK spelling of each client API (:func:`tests.server.sdk.ask`).
SDK_APIS = ("openai", "anthropic", "responses")
WEATHER = ("get_weather", {"city": "Paris"})
EVIL = ("evil_tool", {"cmd": "rm -rf /"})
#: Prose that quotes DSML closers (aider edits files from such text).
QUOTED = "End a value with </｜DSML｜ parameter>, then </｜DSML｜ invoke>. Done."


def _chat_call(call_id: str, call: tuple[str, dict[str, Any]]) -> dict[str, str]:
    return {"id": call_id, "name": call[0], "arguments": json.dumps(call[1])}


#: Each content fault: the engine's reply (completions text, chat content and calls) and
#: the tools the request declares.
CONTENT_FAULTS: dict[str, tuple[Reply, tuple[str, ...]]] = {
    "undeclared_tool": (
        Reply(
            text="On it." + engine_block(EVIL, WEATHER),
            content="On it.",
            tool_calls=(_chat_call("call_0", EVIL), _chat_call("call_1", WEATHER)),
        ),
        ("get_weather",),
    ),
    "repeated_ids": (
        Reply(
            text="On it." + engine_block(WEATHER, WEATHER),
            content="On it.",
            tool_calls=(_chat_call("call_0", WEATHER), _chat_call("call_0", WEATHER)),
        ),
        ("get_weather",),
    ),
    "quoted_closer": (Reply(text=QUOTED, content=QUOTED), ()),
}


def _content_expected(fault: str, answer: Answer) -> None:
    """What the client must get for a content fault."""
    if fault == "quoted_closer":
        assert (answer.content, answer.calls) == (QUOTED, [])
        return
    assert answer.content == "On it."
    calls = [(name, arguments) for _, name, arguments in answer.calls]
    if fault == "undeclared_tool":
        assert calls == [WEATHER]  # the undeclared call is held back
    else:
        assert calls == [WEATHER, WEATHER]
        assert len({call_id for call_id, _, _ in answer.calls}) == 2, answer.calls


@pytest.mark.parametrize("fault", list(CONTENT_FAULTS))
def test_what_the_model_wrote_reaches_every_api_as_written(
    engine: FaultEngine, gateways: dict[str, Served], fault: str
) -> None:
    """Undeclared tools held back, repeated call ids made unique, closers quoted in prose
    kept: 3 APIs (the official SDKs) x streamed or not x both upstream modes."""
    reply, tools = CONTENT_FAULTS[fault]
    cells = [(mode, api, stream) for mode in MODES for api in SDK_APIS for stream in (False, True)]
    for index in range(len(cells)):
        engine.mark(f"[content {fault} {index}]", reply)

    def run(index: int) -> Answer:
        mode, api, stream = cells[index]
        messages = [{"role": "user", "content": f"[content {fault} {index}]"}]
        fields = {**declared(api, *tools), "messages": messages}
        return ask_sdk(gateways[mode], api, stream, thinking=False, **fields)

    with ThreadPoolExecutor(len(cells)) as pool:
        answers = list(pool.map(run, range(len(cells))))
    for (mode, api, stream), answer in zip(cells, answers, strict=True):
        try:
            _content_expected(fault, answer)
        except AssertionError as exc:
            raise AssertionError(f"{fault}: {mode} upstream, {api}, stream={stream}") from exc
    for served in gateways.values():
        assert served.problems() == []


def test_a_broken_chunk_through_the_sdks(engine: FaultEngine, gateways: dict[str, Served]) -> None:
    """The official SDKs (no retries) get their own error for a broken chunked encoding,
    streamed or not, on time."""
    url = gateways["completions"].url
    for index in range(6):
        engine.mark(f"[sdk {index}]", Reply(text=TEXT, fault="broken_chunk", after=2))
    chat = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=30)
    claude = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0, timeout=30)
    started = time.monotonic()
    with pytest.raises(openai.InternalServerError):
        chat.chat.completions.create(model="m", messages=[{"role": "user", "content": "[sdk 0]"}])
    with pytest.raises(openai.APIError, match=r"broke off|cannot be read"):
        for _ in chat.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "[sdk 1]"}], stream=True
        ):
            pass
    with pytest.raises(anthropic.InternalServerError):
        claude.messages.create(
            model="m", max_tokens=50, messages=[{"role": "user", "content": "[sdk 2]"}]
        )
    with (
        pytest.raises(anthropic.APIStatusError),
        claude.messages.stream(
            model="m", max_tokens=50, messages=[{"role": "user", "content": "[sdk 3]"}]
        ) as stream,
    ):
        stream.get_final_message()
    with pytest.raises(openai.InternalServerError):
        chat.responses.create(model="m", input="[sdk 4]")
    with chat.responses.stream(model="m", input="[sdk 5]") as events:
        last = list(events)[-1]
    assert last.type == "response.failed" and last.response.error is not None
    assert "broke off" in last.response.error.message
    assert time.monotonic() - started < 6 * ON_TIME
    assert engine.wait_faulted_closed(2.0) == 0


def test_a_50_mb_line_costs_no_more_than_the_line_limit(
    engine: FaultEngine, gateways: dict[str, Served]
) -> None:
    """One 50 MB SSE line from the engine: the client gets a 502 naming the limit, and the
    gateway's peak memory grows by less than 30 MB (the default limit is 8 MB)."""
    served = gateways["completions"]
    engine.mark("[long line]", Reply(text=TEXT, fault="huge_line", after=2))
    peak = served.memory_mb("VmHWM")
    got = ask(served.url, "chat", False, "[long line]")
    assert (got.status, got.error) == (502, "api_error")
    assert served.memory_mb("VmHWM") - peak < 30
    assert engine.wait_faulted_closed(2.0) == 0


def test_an_engine_that_closes_idle_connections_silently(engine: FaultEngine) -> None:
    """200 requests, 20 at a time, to an engine that closes each connection 50 ms after its
    answer without saying so: every one is answered (a request that meets a closed pooled
    connection before any answer is sent again on a new one), in both upstream modes."""
    engine.mark("[idle close]", Reply(text=TEXT, content=TEXT, fault="silent_close"))
    for mode in MODES:
        with gateway(engine, mode) as served, httpx.Client(timeout=30) as http:

            def twenty(_: int) -> list[int]:
                return [
                    http.post(
                        served.url + "/v1/chat/completions",
                        json={
                            "model": "m",
                            "messages": [{"role": "user", "content": "[idle close]"}],
                        },
                    ).status_code
                    for _ in range(10)
                ]

            with ThreadPoolExecutor(20) as pool:
                statuses = [status for batch in pool.map(twenty, range(20)) for status in batch]
            assert statuses.count(200) == 200, (mode, statuses)
            assert served.problems() == []


def test_a_client_that_does_not_read_stops_the_upstream(
    engine: FaultEngine, gateways: dict[str, Served]
) -> None:
    """Backpressure: a client that never reads a 400 MB stream holds the engine back (it
    sends a small part of it, what the socket buffers between them take) and the
    gateway's memory stays flat."""
    served = gateways["completions"]
    piece = "x" * 4000
    engine.mark("[unread]", Reply(text=piece, piece=4000, repeat=100_000))
    before, sent = served.memory_mb(), engine.events_sent
    host, port = served.url.removeprefix("http://").split(":")
    body = json.dumps({**_request("chat", "[unread]")[1], "stream": True}).encode()
    with socket.create_connection((host, int(port))) as client:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: gateway\r\n"
            b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
        )
        counts = [engine.events_sent]
        while len(counts) < 4 or counts[-1] != counts[-4]:  # until it stops moving
            time.sleep(0.25)
            counts.append(engine.events_sent)
            assert len(counts) < 120, "the engine never stopped sending"
        streamed = (counts[-1] - sent) * len(piece)
        assert streamed < 100 * MB  # of 400 MB
        assert served.memory_mb() - before < 30
