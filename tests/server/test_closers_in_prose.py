"""A DSML closer quoted in an answer reaches the client verbatim (issue 26 item 12), through
a real ``dsmlkit serve`` process and the official SDKs, streamed and not, with and without
tools; the trailing run of closers some models emit after an answer (vllm#56184) still
never does.

The engine streams one token per chunk, so the closers arrive split across chunks.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from tests.server.fake_engine import FakeEngine, Reply
from tests.server.process import serve_process

# Real processes (dsmlkit serve).
pytestmark = pytest.mark.slow

PARAM = "</｜DSML｜ parameter>"
QUOTED = f"Each value ends with {PARAM}, so the file now reads:\n{PARAM}\n</｜DSML｜ invoke> done."
ANSWER = "The file has 3 lines."
TRAILING = ANSWER + "</｜DSML｜ invoke></｜DSML｜ calls>"
NO_THINKING = {"chat_template_kwargs": {"thinking": False}}
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "write",
            "parameters": {"type": "object", "properties": {"content": {"type": "string"}}},
        },
    }
]


@pytest.fixture(scope="module")
def gateway(engine_server: tuple[FakeEngine, str]) -> Iterator[str]:
    with serve_process("--upstream", engine_server[1], "--tokenizer", "none") as (_, url):
        yield url


def chat(url: str, stream: bool, tools: bool) -> str:
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=10)
    extra: dict[str, Any] = {"tools": TOOLS} if tools else {}
    messages: list[Any] = [{"role": "user", "content": "go"}]
    if not stream:
        answer = client.chat.completions.create(
            model="deepseek-v4.1", messages=messages, extra_body=NO_THINKING, **extra
        )
        assert answer.choices[0].finish_reason == "stop"
        return answer.choices[0].message.content or ""
    chunks = client.chat.completions.create(
        model="deepseek-v4.1", messages=messages, extra_body=NO_THINKING, stream=True, **extra
    )
    return "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)


def messages(url: str, stream: bool, tools: bool) -> str:
    client = anthropic.Anthropic(base_url=url, api_key="none", max_retries=0, timeout=10)
    extra: dict[str, Any] = {}
    if tools:
        extra["tools"] = [{"name": "write", "input_schema": TOOLS[0]["function"]["parameters"]}]
    request: dict[str, Any] = {
        "model": "deepseek-v4.1",
        "max_tokens": 200,
        "messages": [{"role": "user", "content": "go"}],
        **extra,
    }
    if not stream:
        answer = client.messages.create(**request)
        assert answer.stop_reason == "end_turn"
        return "".join(block.text for block in answer.content if block.type == "text")
    with client.messages.stream(**request) as events:
        return "".join(events.text_stream)


@pytest.mark.parametrize("tools", [False, True], ids=["no-tools", "tools"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("api", [chat, messages], ids=["chat", "messages"])
def test_a_closer_quoted_in_prose_reaches_the_client_verbatim(
    gateway: str, engine: FakeEngine, api: Any, stream: bool, tools: bool
) -> None:
    engine.push(Reply(text=QUOTED, chunk_size=1))
    assert api(gateway, stream, tools) == QUOTED


@pytest.mark.parametrize("tools", [False, True], ids=["no-tools", "tools"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("api", [chat, messages], ids=["chat", "messages"])
def test_the_trailing_run_of_closers_never_reaches_the_client(
    gateway: str, engine: FakeEngine, api: Any, stream: bool, tools: bool
) -> None:
    engine.push(Reply(text=QUOTED + " " + TRAILING, chunk_size=1))
    assert api(gateway, stream, tools) == QUOTED + " " + ANSWER
