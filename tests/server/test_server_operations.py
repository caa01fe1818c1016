"""Operations: metrics under several workers and JSON log lines (through a real ``dsmlkit
serve`` process), and what an operator or a client gets wrong."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from dsmlkit.cli import main
from dsmlkit.server import ServerConfig
from dsmlkit.server.config import ConfigError
from dsmlkit.server.reqlog import ACCESS_LOGGER, FIELDS
from tests.server.conftest import CLIENT_TIMEOUT, Gateway
from tests.server.fake_engine import FakeEngine, Reply
from tests.server.process import free_port, serve_process
from tests.server.test_server_cli import _exit_code
from tests.server.test_server_local import _samples
from tests.server.test_server_process import _response, _stopped

# Real processes (dsmlkit serve).
pytestmark = pytest.mark.slow

CHAT = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


def _workers(parent: int) -> list[int]:
    """The pids of the worker processes uvicorn runs under ``parent``."""
    children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    return [
        int(pid) for pid in children if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]


def _totals(url: str) -> dict[str, float]:
    """One scrape (on a new connection, so any worker may answer): requests by route."""
    text = httpx.get(url + "/metrics", timeout=CLIENT_TIMEOUT).text
    totals: dict[str, float] = {}
    for name, value in _samples(text).items():
        if name.startswith("dsmlkit_requests_total{"):
            route = name.split('route="')[1].split('"')[0]
            totals[route] = totals.get(route, 0) + value
        elif name.startswith("dsmlkit_gateway_"):
            totals[name] = value
    return totals


def test_metrics_add_up_every_worker(engine_server: tuple[FakeEngine, str], tmp_path: Path) -> None:
    engine, engine_url = engine_server
    state = f"sqlite:{tmp_path / 'state.db'}"  # workers share no memory store
    flags = ("--tokenizer", "none", "--workers", "2", "--upstream", engine_url, "--state", state)
    with serve_process(*flags) as (process, url):
        deadline = time.monotonic() + 20
        while len(_workers(process.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        workers = _workers(process.pid)
        assert len(workers) == 2
        environ = Path(f"/proc/{workers[0]}/environ").read_bytes().split(b"\0")
        directory = next(v for v in environ if v.startswith(b"PROMETHEUS_MULTIPROC_DIR="))
        metrics_dir = Path(os.fsdecode(directory.split(b"=", 1)[1]))
        assert metrics_dir.is_dir()
        for _ in range(20):
            engine.push(Reply(text="Hello there, how are you?", chunk_size=2))
            with httpx.stream(
                "POST", url + "/v1/chat/completions", json=CHAT, timeout=CLIENT_TIMEOUT
            ) as r:
                assert r.status_code == 200 and list(r.iter_lines())
            assert httpx.post(url + "/v1/parse", json={"text": "hi"}).status_code == 200
        expected = {"/v1/chat/completions": 20, "/v1/parse": 20}

        def scrapes(count: int) -> list[dict[str, float]]:
            # the last answers' records are written just after their last byte
            deadline = time.monotonic() + 5
            while _totals(url).get("/v1/parse") != 20 and time.monotonic() < deadline:
                time.sleep(0.05)
            return [_totals(url) for _ in range(count)]

        seen = scrapes(6)
        os.kill(workers[1], signal.SIGKILL)  # its counts must stay in the totals
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            alive = _workers(process.pid)
            if len(alive) == 2 and workers[1] not in alive:
                break
            time.sleep(0.1)
        assert httpx.get(url + "/ready", timeout=CLIENT_TIMEOUT).status_code == 200
        seen += scrapes(6)
        code, _, err = _stopped(process, signal.SIGTERM)
    for totals in seen:
        assert {route: totals.get(route) for route in expected} == expected, totals
        chunks = 'dsmlkit_gateway_chunk_overhead_seconds_count{route="/v1/chat/completions"}'
        overhead = 'dsmlkit_gateway_overhead_seconds_count{route="/v1/chat/completions"}'
        assert totals[overhead] == 20 and totals[chunks] >= 20
    assert code == 0
    assert not metrics_dir.exists()  # removed when the server stopped
    assert "Traceback" not in err


def test_a_metrics_directory_the_operator_set_is_used_and_kept(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    (tmp_path / "notes.txt").write_text("the operator's own")
    for _ in range(2):  # the second run starts afresh: the first run's files are deleted
        with serve_process("--tokenizer", "none") as (process, url):
            assert httpx.post(url + "/v1/parse", json={"text": "hi"}).status_code == 200
            deadline = time.monotonic() + 5
            while (totals := _totals(url)).get("/v1/parse") != 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            code, _, _ = _stopped(process, signal.SIGTERM)
        assert totals["/v1/parse"] == 1 and code == 0
        kinds = {path.name.split("_")[0] for path in tmp_path.iterdir()}
        assert kinds == {"counter", "gauge", "histogram", "notes.txt"}


def test_a_metrics_directory_that_is_none_cannot_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "missing"))
    assert main(["serve", "--tokenizer", "none", "--port", str(free_port())]) == 4
    error = capsys.readouterr().err
    assert error.startswith("dsmlkit serve: PROMETHEUS_MULTIPROC_DIR=")
    assert error.rstrip().endswith("is not a directory")


def test_the_overhead_leaves_out_the_wait_on_the_upstream(
    completions_gateway: Gateway, caplog: pytest.LogCaptureFixture
) -> None:
    """An engine that takes 0.5 s: the request takes that long, the gateway's own share
    of it is small."""
    completions_gateway.engine.push(Reply(text="word " * 20, chunk_size=2, interval=0.05))
    with caplog.at_level("INFO", logger=ACCESS_LOGGER.name):
        with (
            completions_gateway.http() as http,
            http.stream("POST", "/v1/chat/completions", json=CHAT) as r,
        ):
            assert r.status_code == 200 and list(r.iter_lines())
        deadline = time.monotonic() + 2  # the line is written just after the last byte
        while not caplog.records and time.monotonic() < deadline:
            time.sleep(0.05)
    line = getattr(caplog.records[0], FIELDS)
    assert line["ms"] >= 450 and line["upstream_ms"] >= 450
    assert line["overhead_ms"] < line["ms"] / 2, line


def test_log_lines_are_json_with_the_request_fields(
    engine_server: tuple[FakeEngine, str],
) -> None:
    engine, engine_url = engine_server
    engine.push(Reply(text="Hello there.", chunk_size=2))
    with serve_process("--tokenizer", "none", "--upstream", engine_url) as (process, url):
        with httpx.stream(
            "POST", url + "/v1/chat/completions", json=CHAT, timeout=CLIENT_TIMEOUT
        ) as r:
            assert r.status_code == 200 and list(r.iter_lines())
        assert httpx.post(url + "/v1/parse", json={}).status_code == 400
        code, _, err = _stopped(process, signal.SIGTERM)
    assert code == 0
    lines = [json.loads(line) for line in err.splitlines()]
    assert all(isinstance(line, dict) for line in lines)
    requests = [line for line in lines if line["event"] == "request"]
    chat = next(line for line in requests if line["route"] == "/v1/chat/completions")
    assert chat["id"].startswith("req_") and chat["method"] == "POST"
    assert (chat["status"], chat["stream"], chat["finish_reason"]) == (200, True, "stop")
    assert chat["logger"] == "dsmlkit.server.access" and chat["level"] == "info"
    for key in ("ms", "upstream_ms", "overhead_ms", "parse_ms", "completion_tokens"):
        assert isinstance(chat[key], (int, float)), key
    refused = next(line for line in requests if line["route"] == "/v1/parse")
    assert (refused["status"], refused["error"]) == (400, "invalid_request_error")
    assert refused["level"] == "warning"
    plain = [line for line in lines if line["event"] == "log"]  # uvicorn's own lines
    assert plain and all({"message", "time", "level", "logger"} <= line.keys() for line in plain)


@pytest.mark.parametrize(
    "value",
    ["models = " + "[" * 2000 + "]" * 2000, "a = " + "{b = " * 2000 + "1" + "}" * 2000],
    ids=["arrays", "tables"],
)
def test_a_2000_deep_config_file_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    path = tmp_path / "deep.toml"
    path.write_text(value)
    assert main(["serve", "--config", str(path)]) == 5
    error = capsys.readouterr().err
    assert error == f"dsmlkit serve: {path}: is nested too deeply to be a models file\n"


DURATIONS = (
    "upstream-timeout",
    "upstream-deadline",
    "header-timeout",
    "body-timeout",
    "shutdown-grace",
    "max-body-mb",
)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "0"])
@pytest.mark.parametrize("flag", DURATIONS)
def test_every_duration_is_positive_and_finite(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["serve", f"--{flag}={value}"])
    assert stop.value.code == 2
    assert f"--{flag}: {value} must be positive and finite" in capsys.readouterr().err
    variable = "DSMLKIT_" + flag.upper().replace("-", "_")
    monkeypatch.setenv(variable, value)
    with pytest.raises(SystemExit) as stop:
        main(["serve"])
    assert stop.value.code == 2
    assert f"{variable}={value!r}: {value} must be positive and finite" in capsys.readouterr().err


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 0.0])
def test_the_library_refuses_durations_that_are_not_finite(value: float) -> None:
    with pytest.raises(ConfigError, match="upstream_timeout: must be positive and finite"):
        ServerConfig(upstream_timeout=value)


def test_a_nan_timeout_in_the_environment_stops_the_process_at_once() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "dsmlkit", "serve", "--port", str(free_port())],
        capture_output=True,
        text=True,
        env={**os.environ, "DSMLKIT_UPSTREAM_TIMEOUT": "nan"},
        timeout=60,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "DSMLKIT_UPSTREAM_TIMEOUT='nan': nan must be positive and finite" in done.stderr


SECRET = "s3cret-pw"


def test_credentials_in_the_upstream_url_are_never_shown(
    engine_server: tuple[FakeEngine, str], engine: FakeEngine
) -> None:
    """Banner, /ready, logs and error bodies; and the /tokenize probe's 504 comes after
    --upstream-timeout and does not name the URL."""
    port = int(engine_server[1].rsplit(":", 1)[1])
    upstream = f"http://user:{SECRET}@127.0.0.1:{port}/v1"
    flags = ("--tokenizer", "none", "--upstream", upstream, "--upstream-timeout", "1")
    with serve_process(*flags) as (process, url):
        ready = httpx.get(url + "/ready", timeout=CLIENT_TIMEOUT)
        assert ready.json()["models"]["deepseek-v4.1"]["upstream"] == (
            f"http://***@127.0.0.1:{port}/v1/completions"
        )
        # max_tokens close to the context: the prompt's bytes cannot show that it fits, so
        # the gateway asks the engine's /tokenize
        body = {**CHAT, "stream": False, "max_tokens": engine.max_model_len - 64}
        assert httpx.post(url + "/v1/chat/completions", json=body).status_code == 200
        engine.tokenize_delay = 3.0
        started = time.monotonic()
        slow = httpx.post(url + "/v1/chat/completions", json=body, timeout=CLIENT_TIMEOUT)
        waited = time.monotonic() - started
        code, out, err = _stopped(process, signal.SIGTERM)
    assert slow.status_code == 504 and 1 <= waited < 2.5, waited
    assert slow.json()["error"]["message"] == "the engine's /tokenize did not answer in time"
    assert f"-> http://***@127.0.0.1:{port}/v1/completions" in out
    assert f"http://***@127.0.0.1:{port}/tokenize: the engine's /tokenize did not" in err
    for shown in (out, err, ready.text, slow.text):
        assert SECRET not in shown
    assert code == 0


def test_a_wrong_upstream_url_is_refused_without_its_credentials(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _exit_code(["serve", "--upstream", f"ftp://user:{SECRET}@h/v1"]) == 2
    error = capsys.readouterr().err
    assert "--upstream: must be an http(s) URL" in error and "'ftp://***@h/v1'" in error
    assert SECRET not in error


def test_credentials_stay_hidden_when_the_upstream_is_down() -> None:
    upstream = f"http://user:{SECRET}@127.0.0.1:{free_port()}/v1"
    with serve_process("--tokenizer", "none", "--upstream", upstream) as (process, url):
        ready = httpx.get(url + "/ready", timeout=CLIENT_TIMEOUT)
        failed = httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=CLIENT_TIMEOUT)
        code, out, err = _stopped(process, signal.SIGTERM)
    assert ready.status_code == 503 and failed.status_code == 502
    assert "NOT READY: model deepseek-v4.1: cannot reach the engine's /v1/models" in out
    assert f"http://***@{upstream.rpartition('@')[2]}/models" in err
    for shown in (out, err, ready.text, failed.text):
        assert SECRET not in shown
    assert code == 0


#: A /v1/parse body of 50 MB, over the default limit of 32 MB.
BIG_PARSE = json.dumps({"text": "a" * 50_000_000}).encode()


def test_a_50_mb_parse_is_a_413_in_the_error_shape() -> None:
    with serve_process("--tokenizer", "none") as (process, url), httpx.Client(timeout=60) as client:
        for content in (BIG_PARSE, iter([BIG_PARSE[:20_000_000], BIG_PARSE[20_000_000:]])):
            answer = client.post(
                url + "/v1/parse", content=content, headers={"content-type": "application/json"}
            )
            assert answer.status_code == 413
            assert answer.json()["error"]["type"] == "request_too_large"
        assert client.get(url + "/health").status_code == 200  # the connection still serves
        _stopped(process, signal.SIGTERM)


@pytest.mark.parametrize(
    ("flags", "status", "kind"),
    [((), 413, "request_too_large"), (("--api-key", "k"), 401, "authentication_error")],
    ids=["too-large", "no-key"],
)
def test_a_slow_client_still_sending_gets_the_answer_not_a_reset(
    flags: tuple[str, ...], status: int, kind: str
) -> None:
    """The body keeps coming for longer than the header timeout after the server knew
    its answer: it is read to its end, then answered."""
    with serve_process("--tokenizer", "none", "--header-timeout", "1", *flags) as (process, url):
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(
                b"POST /v1/parse HTTP/1.1\r\nHost: localhost\r\ncontent-type: application/json\r\n"
                + f"content-length: {len(BIG_PARSE)}\r\n\r\n".encode()
            )
            step = len(BIG_PARSE) // 25
            for start in range(0, len(BIG_PARSE), step):
                sock.sendall(BIG_PARSE[start : start + step])
                time.sleep(0.1)  # 2.5 s in all
            answer = _response(sock)
        _stopped(process, signal.SIGTERM)
    assert answer.startswith(f"HTTP/1.1 {status}".encode())
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["type"] == kind
