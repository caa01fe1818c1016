"""``dsmlkit serve`` as a real process: stop signals, timeouts, workers, a busy event loop."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from dsmlkit.server import ServerConfig, create_app
from tests.server.conftest import CLIENT_TIMEOUT
from tests.server.fake_engine import FakeEngine, Reply
from tests.server.loopback import serve_in_thread
from tests.server.mock_upstream import mock_upstream
from tests.server.process import serve_process

# Real processes (dsmlkit serve).
pytestmark = pytest.mark.slow


def _stopped(process: subprocess.Popen[str], sig: int | None) -> tuple[int, str, str]:
    """Send ``sig`` (None: it was sent already) and wait for the process to end."""
    if sig is not None:
        process.send_signal(sig)
    out, err = process.communicate(timeout=20)
    return process.returncode, out, err


def _response(sock: socket.socket) -> bytes:
    """One whole HTTP response (headers and a content-length body) read from ``sock``."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(4096)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += sock.recv(4096)
    return head + b"\r\n\r\n" + body


def _all_json(lines: str) -> None:
    for line in lines.splitlines():
        assert json.loads(line), line


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_ends_open_streams_with_an_error_event(
    engine_server: tuple[FakeEngine, str], engine: FakeEngine, v41_tokenizer: str, sig: int
) -> None:
    engine.push(Reply(text="Thinking slowly. " * 50, interval=0.2, chunk_size=1))
    flags = ("--upstream", engine_server[1], "--tokenizer", v41_tokenizer, "--shutdown-grace", "1")
    with serve_process(*flags) as (process, url):
        body = {
            "model": "m",
            "max_tokens": 500,
            "stream": True,
            "messages": [{"role": "user", "content": "go"}],
        }
        events: list[str] = []
        with httpx.stream("POST", url + "/v1/messages", json=body, timeout=CLIENT_TIMEOUT) as r:
            lines = r.iter_lines()
            for line in lines:
                events.append(line)
                if "content_block_delta" in line:
                    break
            stopped_at = time.monotonic()
            process.send_signal(sig)
            events += list(lines)
        ended_after = time.monotonic() - stopped_at
        code, out, err = _stopped(process, None)
    assert 0.8 < ended_after < 5, ended_after  # the grace period, then the error event
    written = [line for line in events if line]
    assert written[-2] == "event: error"
    error = json.loads(written[-1].removeprefix("data: "))["error"]
    assert "shutting down" in error["message"]
    assert code == 0
    assert "Traceback" not in err
    _all_json(err)
    assert "listening on" in out


def test_partial_headers_are_closed_after_the_header_timeout() -> None:
    with serve_process("--tokenizer", "none", "--header-timeout", "0.5") as (_, url):
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as slow:
            slow.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n")  # never finished
            slow.settimeout(5)
            started = time.monotonic()
            assert slow.recv(1024) == b""  # closed by the server
            assert time.monotonic() - started < 3
        with socket.create_connection(("127.0.0.1", port)) as kept:
            kept.settimeout(5)
            kept.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
            assert _response(kept).startswith(b"HTTP/1.1 200")
            kept.sendall(b"GET /health HTTP/1.1\r\n")  # the next request, cut short
            assert kept.recv(1024) == b""
        assert httpx.get(url + "/health").status_code == 200


def test_a_slow_body_is_a_408() -> None:
    with serve_process("--tokenizer", "none", "--body-timeout", "0.5") as (_, url):
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as slow:
            slow.settimeout(5)
            slow.sendall(
                b"POST /v1/parse HTTP/1.1\r\nHost: localhost\r\ncontent-type: application/json\r\n"
                b'content-length: 100\r\n\r\n{"text":'
            )
            answer = _response(slow)
        assert answer.startswith(b"HTTP/1.1 408")
        assert b"did not arrive within 0.5 seconds" in answer


def test_several_workers_serve_and_stop(
    engine_server: tuple[FakeEngine, str], tmp_path: Path
) -> None:
    flags = ("--tokenizer", "none", "--workers", "2", "--state", f"sqlite:{tmp_path}/state.db")
    with serve_process(*flags, "--upstream", engine_server[1]) as (process, url):
        for _ in range(4):
            assert httpx.get(url + "/health").json() == {"status": "ok"}
        assert httpx.get(url + "/ready").status_code == 200
        code, _, err = _stopped(process, signal.SIGTERM)
    assert code == 0 and "Traceback" not in err
    _all_json(err)


def test_health_answers_while_a_30_mb_render_runs() -> None:
    """Render runs in a worker thread: the event loop keeps answering."""
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": "word " * 2000}
        for i in range(3000)
    ]
    body = json.dumps({"model": "m", "messages": messages}).encode()
    assert len(body) > 30_000_000
    finished: list[float] = []
    with serve_in_thread(create_app(ServerConfig(tokenizer="none"))) as url:

        def render() -> None:
            response = httpx.post(
                url + "/v1/chat/completions/render",
                content=body,
                headers={"content-type": "application/json"},
                timeout=120,
            )
            assert response.status_code == 200
            finished.append(time.monotonic())

        worker = threading.Thread(target=render)
        worker.start()
        with httpx.Client(base_url=url, timeout=30) as client:
            # Poll from the start (the upload, the decode and the render all take place
            # now) and often, so that a fast machine's short render is still seen.
            time.sleep(0.05)
            answered: list[float] = []
            while not finished and len(answered) < 200:
                assert client.get("/health").status_code == 200
                answered.append(time.monotonic())
                time.sleep(0.01)
        worker.join(120)
    assert finished, "the render did not finish"
    assert len([t for t in answered if t < finished[0]]) >= 3  # answered during the render


def test_a_client_going_away_closes_the_upstream_request_and_the_stream_ends_cleanly(
    engine_server: tuple[FakeEngine, str], engine: FakeEngine, v41_tokenizer: str
) -> None:
    """Through a real process: a streamed answer ends with its last event and the end of
    the body; a client that hangs up, streamed or not, has its upstream request closed."""
    import openai

    # with a long upstream timeout, only the client's going away can end the hangs
    flags = (
        "--upstream",
        engine_server[1],
        "--tokenizer",
        v41_tokenizer,
        "--upstream-timeout",
        "300",
    )
    thinking_off = {"chat_template_kwargs": {"thinking": False}}
    chat = {"model": "m", "messages": [{"role": "user", "content": "go"}], **thinking_off}
    with serve_process(*flags) as (process, url):
        engine.push(Reply(text="Hello there."))
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
        chunks = list(
            client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": "go"}],
                stream=True,
                extra_body=thinking_off,
            )
        )
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
            "Hello there."
        )
        assert chunks[-1].choices[0].finish_reason == "stop"

        engine.push(Reply(text="x" * 200, hang_after=3), Reply(text="y" * 200, hang_after=0))
        with (
            httpx.Client(base_url=url, timeout=CLIENT_TIMEOUT) as http,
            http.stream("POST", "/v1/chat/completions", json={**chat, "stream": True}) as r,
        ):
            assert next(r.iter_lines())  # the stream runs; now hang up
        with httpx.Client(base_url=url, timeout=0.5) as http, pytest.raises(httpx.ReadTimeout):
            http.post("/v1/chat/completions", json=chat)
        deadline = time.monotonic() + 10
        while engine.disconnects < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert engine.disconnects == 2
        metrics = httpx.get(url + "/metrics", timeout=CLIENT_TIMEOUT).text
        route = "/v1/chat/completions"
        assert (
            f'dsmlkit_request_errors_total{{route="{route}",type="client_disconnected"}} 2.0'
            in (metrics)
        )
        code, _, err = _stopped(process, signal.SIGTERM)
    assert code == 0
    assert "Traceback" not in err


def test_a_lone_surrogate_from_the_upstream_reaches_sdk_clients_as_a_replacement() -> None:
    """Through a real process and the official SDKs: an upstream chunk whose JSON escapes a
    UTF-16 surrogate alone (not text) gives U+FFFD in a whole answer and a stream, where it
    was a 500 and a cut stream."""
    import anthropic
    import openai

    def chunk(text: str, finish: str | None = None) -> str:
        choice = {"index": 0, "text": text, "finish_reason": finish}
        return "data: " + json.dumps({"choices": [choice]}) + "\n\n"

    stream = (chunk("hi \ud800 there") + chunk("", "stop")).encode()  # json.dumps escapes it

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=stream)

    no_thinking = {"chat_template_kwargs": {"thinking": False}}
    with (
        mock_upstream(answer) as upstream,
        serve_process("--upstream", upstream, "--tokenizer", "none") as (process, url),
    ):
        chat = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
        whole = chat.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "go"}], extra_body=no_thinking
        )
        assert whole.choices[0].message.content == "hi \ufffd there"
        messages = anthropic.Anthropic(base_url=url, api_key="none", max_retries=0)
        with messages.messages.stream(
            model="m",
            max_tokens=50,
            messages=[{"role": "user", "content": "go"}],
            extra_body=no_thinking,
        ) as events:
            text = "".join(events.text_stream)
            final = events.get_final_message()
        assert text == "hi \ufffd there"
        assert final.stop_reason == "end_turn"
        code, _, err = _stopped(process, signal.SIGTERM)
    assert code == 0
    assert "Traceback" not in err
