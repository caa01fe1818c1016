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
import uvicorn

from dsmlkit.cli import main, serve_cmd
from dsmlkit.server import ServerConfig


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _banner(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> str:
    """What ``dsmlkit serve ARGV`` reports it serves (no socket, no loop, no log handler)."""
    bound: list[tuple[str, int]] = []

    def no_socket(host: str, port: int) -> socket.socket:
        bound.append((host, port))
        return socket.socket()

    monkeypatch.setattr(serve_cmd, "listening_socket", no_socket)
    monkeypatch.setattr(serve_cmd, "_log_requests_to_stderr", lambda: None)  # process-wide
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: None)
    assert main(argv) == 0
    banner = capsys.readouterr().out
    host, port = bound[0]
    assert banner.startswith(f"dsmlkit serve: listening on http://{host}:{port}\n")
    return banner


def test_serve_defaults(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    banner = _banner(["serve", "--tokenizer", "none"], monkeypatch, capsys)
    assert banner.startswith("dsmlkit serve: listening on http://127.0.0.1:8000\n")
    assert "  dialect v4.1, model " in banner
    assert "  gateway: off (no --upstream)" in banner
    assert "  API key: not required" in banner


def test_serve_flags_reach_the_server(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["serve", "--host", "0.0.0.0", "--port", "9", "--dialect", "v3.2", "--model", "ds"]
    argv += ["--upstream", "http://h:1/v1", "--upstream-api", "chat", "--tokenizer", "none"]
    banner = _banner([*argv, "--api-key", "k"], monkeypatch, capsys)
    assert banner.startswith("dsmlkit serve: listening on http://0.0.0.0:9\n")
    assert "  dialect v3.2, model ds\n" in banner
    assert " -> http://h:1/v1/chat/completions (chat)\n" in banner
    assert "  API key: required" in banner


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
    "argv",
    [
        ["serve", "--upstream", "ftp://x"],
        ["serve", "--upstream-timeout", "0"],
    ],
)
def test_bad_settings_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert "dsmlkit serve:" in capsys.readouterr().err


def test_unloadable_tokenizer_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--tokenizer", "/nonexistent/tokenizer.json"]) == 1
    assert "not found" in capsys.readouterr().err


def test_missing_server_extra_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real_import = builtins.__import__

    def without_uvicorn(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "uvicorn":
            raise ImportError("No module named 'uvicorn'", name="uvicorn")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_uvicorn)
    assert main(["serve"]) == 2
    assert "pip install 'dsmlkit[server]'" in capsys.readouterr().err


def test_help_works_without_the_server_extra() -> None:
    blocked = "; ".join(f"sys.modules[{name!r}] = None" for name in ("fastapi", "uvicorn", "httpx"))
    code = f"import sys; {blocked}; from dsmlkit.cli import main; main(['serve', '--help'])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "--upstream-api {completions,chat}" in done.stdout


def test_port_in_use_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        assert main(["serve", "--tokenizer", "none", "--port", str(busy)]) == 1
    assert f"cannot listen on 127.0.0.1:{busy}" in capsys.readouterr().err


def test_serve_runs_and_reports_what_it_serves() -> None:
    port = _free_port()
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
