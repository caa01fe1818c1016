"""``dsmlkit serve``: flags, start-up report, a real process on a loopback port."""

from __future__ import annotations

import builtins
import socket
import subprocess
import sys
import time
from typing import Any

import httpx
import pytest

from dsmlkit.cli import build_parser, main
from dsmlkit.server import ServerConfig
from tests.server.process import free_port


def _exit_code(argv: list[str]) -> int:
    """What ``dsmlkit ARGV`` exits with (argparse's own errors included)."""
    try:
        return main(argv)
    except SystemExit as stop:
        return int(stop.code or 0)


def test_flags_are_read() -> None:
    given = build_parser().parse_args(
        [
            "serve",
            "--host",
            "0.0.0.0",
            "--port",
            "9",
            "--dialect",
            "v3.2",
            "--model",
            "ds",
            "--upstream",
            "http://h:1/v1",
            "--upstream-api",
            "chat",
            "--tokenizer",
            "t.json",
            "--api-key",
            "k",
            "--workers",
            "3",
        ]
    )
    assert (given.dialect, given.model, given.upstream, given.upstream_api) == (
        "v3.2",
        "ds",
        "http://h:1/v1",
        "chat",
    )
    assert (given.tokenizer, given.api_key, given.port, given.workers) == ("t.json", "k", 9, 3)


def test_flags_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSMLKIT_PORT", "8123")
    monkeypatch.setenv("DSMLKIT_UPSTREAM", "http://e:1/v1")
    monkeypatch.setenv("DSMLKIT_UPSTREAM_TIMEOUT", "2.5")
    monkeypatch.setenv("DSMLKIT_LOG_LEVEL", "debug")
    args = build_parser().parse_args(["serve", "--port", "9000"])
    assert (args.port, args.upstream, args.upstream_timeout, args.log_level) == (
        9000,  # the command line wins
        "http://e:1/v1",
        2.5,
        "debug",
    )


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("DSMLKIT_PORT", "99999", "DSMLKIT_PORT='99999': 99999 is not a port (1-65535)"),
        ("DSMLKIT_DIALECT", "v9", "DSMLKIT_DIALECT='v9': unknown dialect 'v9'"),
    ],
)
def test_bad_environment_values_are_usage_errors(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    name: str,
    value: str,
    words: str,
) -> None:
    monkeypatch.setenv(name, value)
    assert _exit_code(["serve"]) == 2
    assert words in capsys.readouterr().err


@pytest.mark.parametrize(
    ("upstream", "api", "endpoint"),
    [
        ("http://127.0.0.1:8001", "completions", "http://127.0.0.1:8001/v1/completions"),
        ("http://127.0.0.1:8001/v1/", "chat", "http://127.0.0.1:8001/v1/chat/completions"),
        ("https://openrouter.ai/api/v1", "chat", "https://openrouter.ai/api/v1/chat/completions"),
        ("http://h/custom/completions", "completions", "http://h/custom/completions"),
    ],
)
def test_upstream_endpoint(upstream: str, api: Any, endpoint: str) -> None:
    assert ServerConfig(upstream=upstream, upstream_api=api).upstream_endpoint == endpoint


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["serve", "--upstream", "ftp://x"], "--upstream: must be an http(s) URL"),
        (["serve", "--upstream-timeout", "0"], "--upstream-timeout: 0 must be positive"),
        (["serve", "--port", "99999"], "--port: 99999 is not a port (1-65535)"),
        (["serve", "--port", "0"], "--port: 0 is not a port (1-65535)"),
        (["serve", "--state-max-mb", "0"], "--state-max-mb: 0 must be positive"),
        # positive, but under one byte: refused by the settings, named by the flag given
        (["serve", "--state-max-mb", "0.0000001"], "--state-max-mb: must be positive"),
        (["serve", "--max-body-mb", "0.0000001"], "--max-body-mb: must be positive"),
        (["serve", "--config", "x.toml", "--dialect", "v4"], "drop --dialect"),
    ],
)
def test_bad_settings_exit_2(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _exit_code(argv) == 2
    assert words in capsys.readouterr().err


def test_unloadable_tokenizer_is_an_input_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--tokenizer", "/nonexistent/tokenizer.json"]) == 3
    error = capsys.readouterr().err
    assert error.startswith("dsmlkit serve: --tokenizer: ") and "not found" in error


@pytest.mark.parametrize(
    ("state", "words"),
    [
        ("memcached://x", "--state must be memory, sqlite:PATH, redis://HOST:PORT/DB, redis+"),
        ("sqlite:", "--state sqlite:PATH needs a file path"),
        ("sqlite:/nonexistent/dir/state.db", "--state sqlite:/nonexistent/dir/state.db: cannot"),
    ],
)
def test_a_bad_state_is_a_usage_error_naming_state(
    state: str, words: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--tokenizer", "none", "--state", state]) == 2
    assert capsys.readouterr().err.startswith(f"dsmlkit serve: {words}")
    monkeypatch.setenv("DSMLKIT_STATE", state)
    assert main(["serve", "--tokenizer", "none"]) == 2
    assert "--tokenizer" not in capsys.readouterr().err


def test_missing_server_extra_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real_import = builtins.__import__

    def without_uvicorn(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "uvicorn":
            raise ImportError("No module named 'uvicorn'", name="uvicorn")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_uvicorn)
    assert main(["serve"]) == 4
    assert "pip install '.[server]' in a dsmlkit checkout" in capsys.readouterr().err


@pytest.mark.slow
def test_help_works_without_the_server_extra() -> None:
    server_extra = ("fastapi", "uvicorn", "aiohttp", "httpx")
    blocked = "; ".join(f"sys.modules[{name!r}] = None" for name in server_extra)
    code = f"import sys; {blocked}; from dsmlkit.cli import main; main(['serve', '--help'])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "--upstream-api {completions,chat,messages}" in done.stdout


def test_port_in_use_cannot_start(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        assert main(["serve", "--tokenizer", "none", "--port", str(busy)]) == 4
    assert f"cannot listen on 127.0.0.1:{busy}" in capsys.readouterr().err


@pytest.mark.slow
def test_serve_runs_and_reports_what_it_serves() -> None:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "dsmlkit", "serve", "--port", str(port), "--tokenizer", "none"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        banner = [process.stdout.readline() for _ in range(6)]
        assert banner[0].strip() == f"dsmlkit serve: listening on http://127.0.0.1:{port}"
        assert "POST /v1/chat/completions/render" in "".join(banner)
        assert "gateway: off" in "".join(banner)
        deadline = time.monotonic() + 20
        while True:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "dsmlkit serve did not come up"
                time.sleep(0.1)
        assert health.json() == {"status": "ok"}
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        rendered = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions/render", json=body)
        assert rendered.json()["prompt"].endswith("<｜User｜>hi<｜Assistant｜><think>")
    finally:
        process.terminate()
        _, errors = process.communicate(timeout=10)
    assert '"route": "/v1/chat/completions/render"' in errors  # the request log line
