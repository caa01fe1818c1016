"""dsmlkit's callback in a real LiteLLM proxy in front of a leaking chat endpoint.

Runs in the venv of ``.ci/litellm`` (litellm[proxy] pinned by hash); skipped where
litellm is not importable. The proxy is started with and without the callback: alone it
hands the leaked DSML to the client as text; with it the client gets ``tool_calls``. The
third column is ``dsmlkit serve --upstream-api chat`` in front of the same endpoint, run by
the Python that has dsmlkit's ``[server]`` extra (``DSMLKIT_GATEWAY_PYTHON``, which
``.ci/litellm`` sets; the LiteLLM venv lacks some of that extra): each row prints what the
client got, so one run gives the whole table.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("DSMLKIT_REQUIRE_LITELLM") != "1":
    pytest.importorskip("litellm")

import httpx
from openai import OpenAI

from dsmlkit.dialects import V4_1
from tests.helpers import write_block
from tests.server.fake_engine import FakeEngine, Reply
from tests.server.loopback import serve_in_thread
from tests.server.process import free_port, serve_process

# A real LiteLLM proxy process.
pytestmark = pytest.mark.slow

CALL = [("get_weather", {"city": "Paris"})]
FULL = write_block(V4_1, CALL)
#: The leak shapes the gateway's tests replay (tests/test_parse_recoveries.py).
LEAKS = {
    "full-width": FULL,
    "ascii": FULL.replace("｜DSML｜", "|DSML|"),
    "doubled-bars": FULL.replace("｜DSML｜", "‖DSML‖"),
    "spaced": FULL.replace("｜DSML｜", " | DSML | "),
}
KEY = "sk-dsmlkit-" + os.urandom(16).hex()
#: The tool the leaked call calls, declared (the gateway passes no undeclared call on).
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


@pytest.fixture(scope="module")
def engine() -> Iterator[tuple[FakeEngine, str]]:
    fake = FakeEngine()
    with serve_in_thread(fake.app) as url:
        yield fake, url


def _proxy(tmp: Path, upstream: str, callback: bool) -> Iterator[str]:
    config = tmp / ("with.yaml" if callback else "alone.yaml")
    lines = [
        "model_list:",
        "  - model_name: deepseek-v4.1",
        "    litellm_params:",
        "      model: openai/deepseek-v4.1",
        f"      api_base: {upstream}/v1",
        "      api_key: none",
        "    model_info:",
        '      dsmlkit_dialect: "v4.1"',
    ]
    if callback:
        lines += ["litellm_settings:", "  callbacks: dsmlkit.integrations.litellm.repair"]
    config.write_text("\n".join(lines) + "\n")
    port = free_port()
    # The local model cost map: no fetch from the network at start.
    env = {**os.environ, "LITELLM_MASTER_KEY": KEY, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    env.pop("DATABASE_URL", None)
    process = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "litellm"),
            "--config",
            str(config),
            "--port",
            str(port),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp / "proxy.log", "ab"),  # noqa: SIM115
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(url + "/health/liveliness", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((tmp / "proxy.log").read_text()[-3000:])
            time.sleep(0.3)
        yield url
    finally:
        process.terminate()
        process.wait(10)


def _gateway(upstream: str) -> Iterator[str]:
    """``dsmlkit serve --upstream-api chat`` in front of ``upstream``, as a user starts it."""
    python = os.environ.get("DSMLKIT_GATEWAY_PYTHON")
    if python is None:
        pytest.skip("DSMLKIT_GATEWAY_PYTHON names no Python with dsmlkit[server]")
    env = {"DSMLKIT_UPSTREAM": upstream, "DSMLKIT_UPSTREAM_API": "chat"}
    with serve_process("--model", "deepseek-v4.1", python=python, env=env) as (_, url):
        yield url


#: The columns of the table: the proxy alone, the proxy with dsmlkit's callback, and
#: dsmlkit's gateway.
COLUMNS = ("litellm-alone", "litellm+callback", "dsmlkit-gateway")


@pytest.fixture(scope="module", params=COLUMNS)
def proxy(
    request: pytest.FixtureRequest,
    engine: tuple[FakeEngine, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, str]]:
    if request.param == "dsmlkit-gateway":
        for url in _gateway(engine[1]):
            yield request.param, url
        return
    tmp = tmp_path_factory.mktemp("litellm")
    for url in _proxy(tmp, engine[1], request.param == "litellm+callback"):
        yield request.param, url


def _ask(url: str, stream: bool) -> tuple[str, str, list[tuple[str, dict[str, object]]], str]:
    client = OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0, timeout=60)
    body = {
        "model": "deepseek-v4.1",
        "messages": [{"role": "user", "content": "Weather?"}],
        "tools": [TOOL],
    }
    if not stream:
        answer = client.chat.completions.create(**body)  # type: ignore[call-overload]
        message = answer.choices[0].message
        calls = [
            (c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or ()
        ]
        reasoning = getattr(message, "reasoning_content", None) or ""
        return message.content or "", reasoning, calls, answer.choices[0].finish_reason
    content, reasoning, finish = [], [], ""
    parts: dict[int, list[str]] = {}
    names: dict[int, str] = {}
    for chunk in client.chat.completions.create(stream=True, **body):  # type: ignore[call-overload]
        for choice in chunk.choices:
            delta = choice.delta
            content.append(delta.content or "")
            reasoning.append(getattr(delta, "reasoning_content", None) or "")
            for call in delta.tool_calls or ():
                if call.function and call.function.name:
                    names[call.index] = call.function.name
                parts.setdefault(call.index, []).append(
                    (call.function.arguments or "") if call.function else ""
                )
            finish = choice.finish_reason or finish
    calls = [(names[i], json.loads("".join(parts[i]))) for i in sorted(parts)]
    return "".join(content), "".join(reasoning), calls, finish


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("split", [False, True], ids=["one-piece", "split"])
@pytest.mark.parametrize("shape", list(LEAKS))
def test_leak_through_proxy(
    proxy: tuple[str, str], engine: tuple[FakeEngine, str], shape: str, split: bool, stream: bool
) -> None:
    column, url = proxy
    leak = "Checking." + LEAKS[shape]
    if split:  # cut inside the first marker, as the field sees it
        cut = leak.index("DSML") + 2
        engine[0].push(Reply(pieces=(leak[:cut], leak[cut:]), reasoning="Paris it is."))
    else:
        engine[0].push(Reply(content=leak, reasoning="Paris it is."))
    content, reasoning, calls, finish = _ask(url, stream)
    print(
        f"ROW {shape} split={split} stream={stream} {column}: "
        f"content={content!r} calls={calls} finish={finish}"
    )
    assert "Paris it is." in reasoning
    if column != "litellm-alone":
        assert (content, calls, finish) == ("Checking.", CALL, "tool_calls")
    else:
        assert "DSML" in content and calls == []


def test_stream_without_finish_reason_keeps_held_back_text() -> None:
    """An upstream stream that ends with no ``finish_reason``: the text the repair held
    back (it might have begun markup) comes in one more chunk, with the finish."""
    from litellm.types.utils import ModelResponseStream

    from dsmlkit.integrations.litellm import repair

    async def upstream() -> AsyncIterator[ModelResponseStream]:
        for text in ("Use a pipe: ", "<｜DS"):
            choices = [{"delta": {"content": text}, "index": 0}]
            yield ModelResponseStream(id="chatcmpl-1", choices=choices)

    async def hooked() -> list[Any]:
        hook = repair.async_post_call_streaming_iterator_hook(None, upstream(), {})
        return [chunk async for chunk in hook]

    chunks = asyncio.run(hooked())
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks) == "Use a pipe: <｜DS"
    assert [chunk.choices[0].finish_reason for chunk in chunks] == [None, None, "stop"]
    assert {chunk.id for chunk in chunks} == {"chatcmpl-1"}
