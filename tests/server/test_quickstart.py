"""docs/quickstart.md's gateway blocks run as written, against the fake engine.

The blocks the generic doc test skips because they need an engine or a hosted endpoint
(their skip reason names this file) run here with only the engine's address, the model
folder and the gateway's port replaced: the fake engine (tests/server/fake_engine.py)
stands in for vLLM and for a hosted API that leaks DSML into ``content``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from dsmlkit.dialects import V4_1
from tests.helpers import write_block
from tests.server.fake_engine import FakeEngine, Reply
from tests.server.loopback import serve_in_thread
from tests.test_doc_examples import ROOT, examples

# Real processes (dsmlkit serve).
pytestmark = pytest.mark.slow

QUICKSTART = ROOT / "docs" / "quickstart.md"
BLOCKS = [e.code for e in examples(QUICKSTART) if e.skip and "test_quickstart.py" in e.skip]
#: What the blocks name and this test replaces.
ENGINE_URL = "http://127.0.0.1:8001/v1"
HOSTED_URL = "https://api.deepseek.com/v1"
MODEL_FOLDER = "/models/DeepSeek-V4.1-Flash"
GATEWAY = "http://127.0.0.1:8000"
GENERATED_KEY = "$(python3 -c 'import secrets; print(secrets.token_urlsafe())')"
CALL = write_block(V4_1, [("get_weather", {"city": "Paris"})])


def test_the_quickstart_has_the_three_gateway_blocks() -> None:
    gateway, check, hosted = BLOCKS
    assert gateway.startswith(f"dsmlkit serve --upstream {ENGINE_URL} --upstream-api completions")
    assert "--dialect v4.1 --model deepseek-v4.1 --tokenizer" in gateway
    assert check.startswith(f"curl -sf {GATEWAY}/ready")
    assert "--upstream-api chat" in hosted and "DSMLKIT_UPSTREAM_API_KEY" in hosted


@contextmanager
def running(script: str, tmp_path: Path, env: dict[str, str]) -> Iterator[str]:
    """Run a gateway block in the background on a free port; yield the gateway's URL."""
    port = _free_port()
    shim = tmp_path / "bin" / "dsmlkit"
    shim.parent.mkdir(exist_ok=True)
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m dsmlkit "$@"\n')
    shim.chmod(0o755)
    full_env = {**os.environ, **env, "PATH": f"{shim.parent}{os.pathsep}{os.environ['PATH']}"}
    script = script.replace("dsmlkit serve ", f"dsmlkit serve --port {port} ")
    log = (tmp_path / "gateway.log").open("w")
    process = subprocess.Popen(
        ["bash", "-e", "-c", script],
        cwd=tmp_path,
        env=full_env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    pytest.fail((tmp_path / "gateway.log").read_text())
                time.sleep(0.1)
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)
        log.close()


def _free_port() -> int:
    from dsmlkit.cli.serve_cmd import listening_socket

    with listening_socket("127.0.0.1", 0) as sock:
        port: int = sock.getsockname()[1]
    return port


def _run(script: str, tmp_path: Path) -> str:
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_gateway_in_front_of_vllm_is_ready_and_answers_with_a_call(
    tmp_path: Path, v41_tokenizer: str
) -> None:
    gateway, check, _ = BLOCKS
    folder = tmp_path / "DeepSeek-V4.1-Flash"
    folder.mkdir()
    shutil.copyfile(v41_tokenizer, folder / "tokenizer.json")
    engine = FakeEngine()
    engine.push(Reply(text="The user wants the weather.</think>" + CALL))
    with serve_in_thread(engine.app) as engine_url:
        script = gateway.replace(ENGINE_URL, f"{engine_url}/v1").replace(MODEL_FOLDER, str(folder))
        with running(script, tmp_path, {}) as url:
            out = _run(check.replace(GATEWAY, url), tmp_path)
    ready, answer = (json.loads(part) for part in _documents(out))
    assert ready["status"] == "ready", ready
    (model,) = ready["models"].values()
    assert model["prompts"].startswith("token ids from") and "checks agree" in model["prompts"]
    (call,) = answer["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert isinstance(engine.requests[0]["prompt"], list)  # token ids went upstream


def test_the_gateway_in_front_of_a_leaky_hosted_endpoint_repairs_the_call(
    tmp_path: Path,
) -> None:
    _, check, hosted = BLOCKS
    engine = FakeEngine(served=("deepseek-chat",))
    engine.push(Reply(content="Let me look that up." + CALL))
    with serve_in_thread(engine.app) as engine_url:
        script = hosted.replace(HOSTED_URL, f"{engine_url}/v1").replace(GENERATED_KEY, "client-k")
        with running(script, tmp_path, {"DEEPSEEK_API_KEY": "provider-k"}) as url:
            request = check.splitlines()[1:]  # the chat request, with the client's key
            curl = (
                "\n".join(request)
                .replace(GATEWAY, url)
                .replace("curl -s ", "curl -s -H 'Authorization: Bearer client-k' ", 1)
            )
            answer = json.loads(_run(curl, tmp_path))
    message = answer["choices"][0]["message"]
    (call,) = message["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert "DSML" not in (message["content"] or "")
    assert engine.requests[0]["model"] == "deepseek-chat"
    assert engine.authorizations[0] == "Bearer provider-k"


def _documents(text: str) -> list[str]:
    """The JSON documents curl printed one after another (no newline between them)."""
    decoder = json.JSONDecoder()
    found, at = [], 0
    while at < len(text.rstrip()):
        _, end = decoder.raw_decode(text, at)
        found.append(text[at:end])
        at = end
        while at < len(text) and text[at].isspace():
            at += 1
    return found
