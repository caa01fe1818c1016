"""A ``max_tokens`` past what the engine's context leaves (Claude Code sends 128000 whatever
the model): clamped with a note by default, a 400 with ``--max-tokens-policy reject``;
a prompt that alone overflows the context is a 400 either way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import openai
import pytest

from dsmlkit.cli import build_parser
from dsmlkit.dialects import V4_1
from dsmlkit.server.reqlog import FIELDS
from tests.helpers import write_block
from tests.server.conftest import CLIENT_TIMEOUT, Gateway
from tests.server.fake_engine import FakeEngine, Reply
from tests.server.process import serve_process
from tests.server.test_reasoning_roundtrip import TOOLS

# Real processes (dsmlkit serve).
pytestmark = pytest.mark.slow

CONTEXT = 300
CLAUDE_CODE_MAX_TOKENS = 128000
MESSAGES: Any = [{"role": "user", "content": "hello there"}]


@pytest.fixture
def short_context(start_gateway: Callable[..., str], engine: FakeEngine) -> Gateway:
    """A gateway (default policy) that read an engine with a 300-token context."""
    engine.max_model_len = CONTEXT
    return Gateway(start_gateway(upstream_deadline=311.0), engine)


@pytest.fixture
def rejecting(start_gateway: Callable[..., str], engine: FakeEngine) -> Gateway:
    engine.max_model_len = CONTEXT
    return Gateway(start_gateway(upstream_deadline=312.0, max_tokens_policy="reject"), engine)


def ask_raw(gateway: Gateway, api: str, stream: bool, max_tokens: int) -> tuple[str, Any]:
    """(the clamped header, the answer's text) through the SDK's raw-response access."""
    if api == "anthropic":
        messages = gateway.anthropic().messages.with_raw_response
        raw: Any = messages.create(
            model="m", max_tokens=max_tokens, messages=MESSAGES, stream=stream
        )
        parsed = raw.parse()
        text = (
            "".join(e.delta.text for e in parsed if e.type == "content_block_delta")
            if stream
            else parsed.content[0].text
        )
    elif api == "responses":
        raw = gateway.openai().responses.with_raw_response.create(
            model="m",
            input="hello there",
            max_output_tokens=max_tokens,
            stream=stream,
            reasoning={"effort": "none"},
        )
        parsed = raw.parse()
        text = (
            "".join(e.delta for e in parsed if e.type == "response.output_text.delta")
            if stream
            else parsed.output_text
        )
    else:
        raw = gateway.openai().chat.completions.with_raw_response.create(
            model="m",
            max_tokens=max_tokens,
            messages=MESSAGES,
            stream=stream,
            extra_body={"chat_template_kwargs": {"thinking": False}},
        )
        parsed = raw.parse()
        text = (
            "".join(c.choices[0].delta.content or "" for c in parsed if c.choices)
            if stream
            else parsed.choices[0].message.content
        )
    return raw.headers.get("x-dsmlkit-max-tokens-clamped"), text


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("api", ["anthropic", "openai", "responses"])
def test_a_max_tokens_past_the_context_is_clamped_with_a_note(
    short_context: Gateway, api: str, stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    short_context.engine.push(Reply(text="fits"))
    with caplog.at_level("WARNING", logger="dsmlkit.server"):
        header, text = ask_raw(short_context, api, stream, CLAUDE_CODE_MAX_TOKENS)
    sent = short_context.engine.requests[-1]
    room = CONTEXT - len(sent["prompt"])
    assert text == "fits"
    assert sent["max_tokens"] == room and header == str(room)
    [note] = [getattr(r, FIELDS) for r in caplog.records if "clamped" in r.getMessage()]
    assert note["event"] == "max_tokens_clamped"
    assert (note["requested"], note["sent"], note["max_model_len"]) == (
        CLAUDE_CODE_MAX_TOKENS,
        room,
        CONTEXT,
    )


def test_a_max_tokens_that_fits_has_no_note(short_context: Gateway) -> None:
    short_context.engine.push(Reply(text="fits"))
    header, _ = ask_raw(short_context, "anthropic", False, 10)
    assert header is None and short_context.engine.requests[-1]["max_tokens"] == 10


def test_reject_keeps_the_400(rejecting: Gateway) -> None:
    with pytest.raises(anthropic.BadRequestError) as no_room:
        rejecting.anthropic().messages.create(
            model="m",
            max_tokens=CLAUDE_CODE_MAX_TOKENS,
            messages=MESSAGES,
        )
    assert f"max_tokens {CLAUDE_CODE_MAX_TOKENS} does not fit" in str(no_room.value)
    assert rejecting.engine.requests == []


@pytest.mark.parametrize("policy", ["clamp", "reject"])
def test_a_prompt_past_the_context_is_a_400_either_way(
    start_gateway: Callable[..., str], engine: FakeEngine, policy: str
) -> None:
    engine.max_model_len = CONTEXT
    gateway = Gateway(start_gateway(upstream_deadline=313.0, max_tokens_policy=policy), engine)
    with pytest.raises(openai.BadRequestError) as too_long:
        gateway.openai().chat.completions.create(
            model="m",
            max_tokens=CLAUDE_CODE_MAX_TOKENS,
            messages=[{"role": "user", "content": "word " * 400}],
        )
    assert "300" in too_long.value.body["message"]  # type: ignore[index]
    assert engine.requests == []


def test_the_policy_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert build_parser().parse_args(["serve"]).max_tokens_policy == "clamp"
    monkeypatch.setenv("DSMLKIT_MAX_TOKENS_POLICY", "reject")
    assert build_parser().parse_args(["serve"]).max_tokens_policy == "reject"


def test_a_real_process_with_the_reject_flag(
    engine_server: tuple[FakeEngine, str], engine: FakeEngine, v41_tokenizer: str
) -> None:
    engine.max_model_len = CONTEXT
    flags = ("--upstream", engine_server[1], "--tokenizer", v41_tokenizer)
    body = {"model": "m", "max_tokens": CLAUDE_CODE_MAX_TOKENS, "messages": MESSAGES}
    with serve_process(*flags, "--max-tokens-policy", "reject") as (_, url):
        refused = httpx.post(url + "/v1/messages", json=body, timeout=CLIENT_TIMEOUT)
    assert refused.status_code == 400
    assert refused.json()["error"]["type"] == "invalid_request_error"
    engine.push(Reply(text="fits"))
    with serve_process(*flags) as (_, url):  # the default: clamp
        client = anthropic.Anthropic(base_url=url, api_key="k", timeout=CLIENT_TIMEOUT)
        answer = client.messages.with_raw_response.create(
            model="m",
            max_tokens=CLAUDE_CODE_MAX_TOKENS,
            messages=MESSAGES,
        )
    assert answer.parse().content[0].text == "fits"  # type: ignore[union-attr]
    assert answer.headers["x-dsmlkit-max-tokens-clamped"] == str(engine.requests[-1]["max_tokens"])


def test_the_second_request_of_a_forced_call_fits_under_either_policy(rejecting: Gateway) -> None:
    """Thinking mode with a forced call: the gateway's own second request (the prompt plus
    the reasoning and the call opener) is fitted to the context, never refused mid-answer."""
    engine = rejecting.engine
    block = write_block(V4_1, [("get_weather", {"city": "Paris"})]).split("calls>\n", 1)[1]
    engine.push(Reply(text="I need the weather.", stop_reason="</think>"), Reply(text=block))
    tools: Any = TOOLS
    body = {"model": "m", "messages": MESSAGES, "tools": tools, "tool_choice": "required"}
    with rejecting.http() as http:
        room = CONTEXT - len(
            http.post("/v1/chat/completions/render", json=body).json()["token_ids"]
        )
    completion = rejecting.openai().chat.completions.create(**body, max_tokens=room)
    assert completion.choices[0].message.reasoning_content == "I need the weather."
    first, second = engine.requests[-2:]
    assert first["max_tokens"] == room
    assert len(second["prompt"]) + second["max_tokens"] <= CONTEXT
