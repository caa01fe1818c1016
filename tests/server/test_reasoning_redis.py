"""Two gateway processes share a real Redis; a dead Redis never fails a request."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from tests.server.conftest import Gateway
from tests.server.fake_engine import FakeEngine
from tests.server.process import free_port
from tests.server.redis_server import redis_server, redis_url
from tests.server.test_reasoning_roundtrip import REASONING, first_turn, follow_up, history

# Real processes (dsmlkit serve, Redis).
pytestmark = pytest.mark.slow

__all__ = ["redis_url"]  # the fixture


@contextmanager
def gateway_process(upstream: str, state: str) -> Iterator[tuple[str, Any]]:
    """``dsmlkit serve`` in its own process; yields its URL and its stderr file."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "dsmlkit",
        "serve",
        "--port",
        str(port),
        "--upstream",
        upstream,
        "--tokenizer",
        "none",
        "--upstream-timeout",
        "2",
        "--state",
        state,
    ]
    with tempfile.TemporaryFile(mode="w+") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            yield _started(f"http://127.0.0.1:{port}", process, stderr), stderr
        finally:
            process.terminate()
            process.wait(10)


def _started(url: str, process: subprocess.Popen[bytes], stderr: Any) -> str:
    """``url`` once its /health answers."""
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            stderr.seek(0)
            raise RuntimeError(f"the gateway did not start: {stderr.read()}")
        time.sleep(0.1)
    return url


@pytest.mark.parametrize(("api", "stream"), [("openai", True), ("anthropic", False)])
def test_a_follow_up_sent_to_another_replica_gets_the_reasoning(
    engine: FakeEngine, engine_server: Any, redis_url: str, api: str, stream: bool
) -> None:
    with (
        gateway_process(engine_server[1], redis_url) as (url_a, _),
        gateway_process(engine_server[1], redis_url) as (url_b, _),
    ):
        call_id = first_turn(Gateway(url_a, engine), api, stream).calls[0][0]
        prompt = follow_up(Gateway(url_b, engine), api, stream, history(api, call_id))
    assert REASONING + "</think>" in prompt


def test_with_redis_down_the_gateway_answers_without_restoring_and_logs_it(
    engine: FakeEngine, engine_server: Any
) -> None:
    redis = redis_server()
    url = redis.__enter__()
    with gateway_process(engine_server[1], url) as (gateway, stderr):
        try:
            call_id = first_turn(Gateway(gateway, engine), "openai", False).calls[0][0]
            restored = follow_up(
                Gateway(gateway, engine), "openai", False, history("openai", call_id)
            )
            assert REASONING in restored
        finally:
            redis.__exit__(None, None, None)
        prompt = follow_up(Gateway(gateway, engine), "openai", False, history("openai", call_id))
        assert REASONING not in prompt
        ready = httpx.get(gateway + "/ready", timeout=5)
        time.sleep(0.2)  # the log line is written after the last byte
        stderr.seek(0)
        log = stderr.read()
    assert '"event": "state_store_unavailable"' in log
    assert '"state_error"' in log
    # The store outage shows in /ready but does not take the replica out of rotation.
    assert ready.status_code == 200, ready.text
    assert ready.json()["status"] == "ready"
    state = ready.json()["state"]
    assert state["ok"] is False
    assert state["backend"].startswith("redis://") and state["error"]


def test_ready_reports_a_live_store(engine: FakeEngine, engine_server: Any, redis_url: str) -> None:
    with gateway_process(engine_server[1], redis_url) as (gateway, _):
        ready = httpx.get(gateway + "/ready", timeout=5)
    assert ready.status_code == 200, ready.text
    assert ready.json()["state"]["ok"] is True
