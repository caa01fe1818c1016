"""Operating the gateway, through real ``dsmlkit serve`` processes: request ids and W3C
trace context passed on to the engine, the metrics operators chart (also under
``--workers``), and the log formats."""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import httpx
import openai
import pytest

from dsmlkit import __version__
from dsmlkit.server.tracing import trace_headers
from tests.server.conftest import CLIENT_TIMEOUT
from tests.server.fake_engine import FakeEngine, Reply
from tests.server.process import free_port, serve_process
from tests.server.test_server_local import _samples
from tests.server.test_server_operations import _workers
from tests.server.test_server_process import _stopped

# Real processes (dsmlkit serve).
pytestmark = pytest.mark.slow

CHAT = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
STATE = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


def _json_lines(err: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in err.splitlines()]


def test_a_clients_request_id_and_trace_context_reach_the_engine_and_the_log(
    engine_server: tuple[FakeEngine, str],
) -> None:
    engine, engine_url = engine_server
    engine.headers.clear()
    engine.push(Reply(text="Hello there."), Reply(text="Hi."), Reply(status=500))
    with serve_process("--tokenizer", "none", "--upstream", engine_url) as (process, url):
        client = openai.OpenAI(base_url=url + "/v1", api_key="-", max_retries=0)
        sent = {"x-request-id": "agent-7.turn_3", "traceparent": PARENT, "tracestate": STATE}
        raw = client.chat.completions.with_raw_response.create(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=10**7,  # clamped: a log line written during the request
            extra_headers=sent,
        )
        assert raw.headers["x-request-id"] == "agent-7.turn_3"
        unusable = {"x-request-id": "has space" + "x" * 200, "traceparent": "00-" + "0" * 32}
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": "hi"}], extra_headers=unusable
        )
        made = raw.headers["x-request-id"]
        assert made.startswith("req_")
        with pytest.raises(openai.InternalServerError):
            client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": "hi"}],
                extra_headers={"x-request-id": "failing-1"},
            )
        code, _, err = _stopped(process, signal.SIGTERM)
    assert code == 0
    first, second, third = engine.headers
    assert (first["x-request-id"], first["traceparent"], first["tracestate"]) == (
        "agent-7.turn_3",
        PARENT,
        STATE,
    )
    assert second["x-request-id"] == made and "traceparent" not in second
    assert third["x-request-id"] == "failing-1"
    lines = _json_lines(err)
    chats = [line for line in lines if line.get("route") == "/v1/chat/completions"]
    ids = [line["id"] for line in chats]
    assert ids == ["agent-7.turn_3", made, "failing-1"]
    during = [line for line in lines if line.get("request_id") == "agent-7.turn_3"]
    assert [line["event"] for line in during] == ["max_tokens_clamped"]


def _in_flight(url: str) -> float:
    text = httpx.get(url + "/metrics", timeout=CLIENT_TIMEOUT).text
    assert "_created" not in text
    return _in_flight_after(_samples(text))


@pytest.mark.parametrize("workers", ["1", "2"])
def test_metrics_count_requests_in_flight_and_chunk_times(
    engine_server: tuple[FakeEngine, str], workers: str, tmp_path: Path
) -> None:
    engine, engine_url = engine_server
    state = f"sqlite:{tmp_path / 'state.db'}"  # workers share no memory store
    flags = (
        "--tokenizer",
        "none",
        "--upstream",
        engine_url,
        "--workers",
        workers,
        "--state",
        state,
    )
    with serve_process(*flags) as (process, url):
        deadline = time.monotonic() + 20
        while workers == "2" and len(_workers(process.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        for _ in range(3):
            # long enough for chunks of text past the 20 characters held back for the EOS
            # stop string (as vLLM holds them back)
            engine.push(Reply(text="Hello there, how are you? " * 2, chunk_size=2, interval=0.02))
            with httpx.stream(
                "POST", url + "/v1/chat/completions", json=CHAT, timeout=CLIENT_TIMEOUT
            ) as r:
                assert r.status_code == 200 and list(r.iter_lines())
        engine.push(Reply(text="Hello there.", hang_after=1))
        held = httpx.stream("POST", url + "/v1/chat/completions", json=CHAT, timeout=10)
        with held as r:
            lines = r.iter_lines()  # kept: a dropped iterator closes the stream
            next(lines)
            seen = [_in_flight(url) for _ in range(4)]  # any worker may answer
        deadline = time.monotonic() + 5
        while _in_flight(url) != 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        samples = _samples(httpx.get(url + "/metrics", timeout=CLIENT_TIMEOUT).text)
    assert seen == [1.0] * 4
    assert _in_flight_after(samples) == 0
    assert samples[f'dsmlkit_build_info{{version="{__version__}"}}'] == 1
    route = '{route="/v1/chat/completions"}'
    assert samples[f"dsmlkit_time_to_first_chunk_seconds_count{route}"] == 4
    # each answer's chunks came 20 ms apart or more; all but the first
    between = samples[f"dsmlkit_time_between_chunks_seconds_count{route}"]
    assert between >= 3 * 5
    fast = 'dsmlkit_time_between_chunks_seconds_bucket{le="0.01",route="/v1/chat/completions"}'
    assert samples[fast] < between


def _in_flight_after(samples: dict[str, float]) -> float:
    """Gateway requests in flight, summed over the served models."""
    gauge = 'dsmlkit_requests_in_flight{api="chat",'
    return sum(value for name, value in samples.items() if name.startswith(gauge))


@pytest.mark.parametrize("how", ["flag", "env"])
def test_text_logs_with_iso_times_and_levels_by_status(how: str) -> None:
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens: a 502
    flags = ("--tokenizer", "none", "--upstream", down)
    extra = ("--log-format", "text") if how == "flag" else ()
    env = {"DSMLKIT_LOG_FORMAT": "text"} if how == "env" else {}
    with serve_process(*flags, *extra, env=env) as (process, url):
        assert httpx.post(url + "/v1/parse", json={"text": "hi"}).status_code == 200
        assert httpx.post(url + "/v1/parse", json={}).status_code == 400
        headers = {"x-request-id": "down-1"}
        response = httpx.post(url + "/v1/chat/completions", json=CHAT, headers=headers)
        assert response.status_code == 502
        code, _, err = _stopped(process, signal.SIGTERM)
    assert code == 0
    lines = err.splitlines()
    assert lines and all(
        re.match(ISO + r" (DEBUG|INFO|WARNING|ERROR|CRITICAL) \S+ ", line)
        for line in lines
        if not line.startswith((" ", "Traceback"))
    )
    access = [line for line in lines if " dsmlkit.server.access " in line]
    levels = {line.split()[1]: line for line in access}
    assert " POST /v1/parse 200 " in levels["INFO"]
    assert (
        " POST /v1/parse 400 " in levels["WARNING"]
        and "error=invalid_request_error" in levels["WARNING"]
    )
    assert " POST /v1/chat/completions 502 down-1" in levels["ERROR"]


def test_json_logs_have_iso_times_and_levels_by_status() -> None:
    down = f"http://127.0.0.1:{free_port()}"
    with serve_process("--tokenizer", "none", "--upstream", down) as (process, url):
        assert httpx.post(url + "/v1/parse", json={}).status_code == 400
        assert httpx.post(url + "/v1/chat/completions", json=CHAT).status_code == 502
        code, _, err = _stopped(process, signal.SIGTERM)
    assert code == 0
    lines = _json_lines(err)
    assert all(re.fullmatch(ISO, str(line["time"])) for line in lines)
    levels = {line["status"]: line["level"] for line in lines if line["event"] == "request"}
    assert levels == {200: "info", 400: "warning", 502: "error"}  # 200: /health


@pytest.mark.parametrize(
    ("parent", "kept"),
    [
        (PARENT, True),
        ("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-later", True),  # a later version
        (PARENT.upper(), False),
        ("ff" + PARENT[2:], False),
        (PARENT + "-more", False),  # version 00 has four fields
        (f"00-{'0' * 32}-b7ad6b7169203331-01", False),
        (f"00-0af7651916cd43dd8448eb211c80319c-{'0' * 16}-01", False),
        (PARENT[:-1], False),
    ],
)
def test_a_traceparent_is_forwarded_only_when_well_formed(parent: str, kept: bool) -> None:
    found = trace_headers({"traceparent": parent, "tracestate": STATE})
    assert found == ({"traceparent": parent, "tracestate": STATE} if kept else {})


@pytest.mark.parametrize(
    ("state", "kept"),
    [(STATE, True), ("a=1,tenant@vendor=x", True), ("A=1", False), ("a=1," * 33, False)],
)
def test_a_tracestate_is_forwarded_only_when_well_formed(state: str, kept: bool) -> None:
    found = trace_headers({"traceparent": PARENT, "tracestate": state})
    assert ("tracestate" in found) is kept and found["traceparent"] == PARENT
