"""The streams' SSE frames equal framing each chunk / event dict in full, byte for byte."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dsmlkit.api import (
    SSE_DONE,
    AnthropicStream,
    ChatRequest,
    OpenAIStream,
    Usage,
    call_id_factory,
    parse_anthropic_request,
    parse_openai_request,
    sse_anthropic,
    sse_openai,
)
from dsmlkit.api.sse import TextFrames, json_string
from dsmlkit.dialects import V4_1
from dsmlkit.parse import ContentDelta, Event, Parser
from tests.helpers import random_chunks, write_block

USAGE = Usage(prompt_tokens=30, completion_tokens=12, cached_tokens=8)
# Text that needs escaping: quotes, backslashes, control characters, non-ASCII, surrogates'
# neighbours, and the characters of DSML markup.
TEXT = st.text(
    st.sampled_from(['"', "\\", "\n", "\t", "\x00", "\x1f", "é", "🚀", "<", "/", "｜", "a", " "]),
    max_size=40,
)


def _tools() -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": "note"}}]


def _batches(req: ChatRequest, output: str, seed: int) -> list[list[Event]]:
    parser: Parser = req.new_parser("reasoning", id_factory=call_id_factory(req.api, lambda: "1"))
    batches = [parser.feed(chunk) for chunk in random_chunks(output, random.Random(seed))]
    return [*batches, parser.close()]


def _output(reasoning: str, content: str, value: str) -> str:
    return f"{reasoning}</think>{content}" + write_block(V4_1, [("note", {"text": value})])


@settings(max_examples=60, deadline=None)
@given(TEXT, TEXT, TEXT, TEXT, st.booleans(), st.integers(0, 99))
def test_openai_sse_equals_framed_chunks(
    model: str, reasoning: str, content: str, value: str, usage: bool, seed: int
) -> None:
    body = {"model": model or "m", "messages": [{"role": "user", "content": "x"}]}
    req = parse_openai_request(
        {**body, "tools": _tools(), "stream": True, "stream_options": {"include_usage": usage}}
    )
    batches = _batches(req, _output(reasoning, content, value), seed)
    dicts = OpenAIStream(req, id="chatcmpl-1", created=1)
    frames = OpenAIStream(req, id="chatcmpl-1", created=1)
    expected = [sse_openai(chunk) for chunk in dicts.start()]
    got = frames.start_sse()
    for batch in batches:
        expected += [sse_openai(chunk) for chunk in dicts.feed(batch)]
        got += frames.feed_sse(batch)
    expected += [sse_openai(chunk) for chunk in dicts.finish(USAGE)] + [SSE_DONE]
    got += frames.finish_sse(USAGE)
    assert got == expected
    assert frames.diagnostics == dicts.diagnostics


@settings(max_examples=60, deadline=None)
@given(TEXT, TEXT, TEXT, TEXT, st.booleans(), st.integers(0, 99))
def test_anthropic_sse_equals_framed_events(
    model: str, reasoning: str, content: str, value: str, signed: bool, seed: int
) -> None:
    body = {"model": model or "m", "max_tokens": 9, "messages": [{"role": "user", "content": "x"}]}
    tools = [{"name": "note", "input_schema": {"type": "object"}}]
    req = parse_anthropic_request({**body, "tools": tools, "stream": True})
    batches = _batches(req, _output(reasoning, content, value), seed)
    sign = (lambda text: f"signed {text!r}") if signed else None
    dicts = AnthropicStream(req, id="msg_1", usage=USAGE, sign_thinking=sign)
    frames = AnthropicStream(req, id="msg_1", usage=USAGE, sign_thinking=sign)
    expected = [sse_anthropic(name, data) for name, data in dicts.start()]
    got = frames.start_sse()
    for batch in batches:
        expected += [sse_anthropic(name, data) for name, data in dicts.feed(batch)]
        got += frames.feed_sse(batch)
    expected += [sse_anthropic(name, data) for name, data in dicts.finish(USAGE, "stop")]
    got += frames.finish_sse(USAGE, "stop")
    assert got == expected
    assert frames.diagnostics == dicts.diagnostics


def test_empty_text_deltas_make_no_frame() -> None:
    req = parse_openai_request({"model": "m", "messages": [{"role": "user", "content": "x"}]})
    assert OpenAIStream(req, id="c", created=0).feed_sse([ContentDelta("")]) == []
    areq = parse_anthropic_request(
        {"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "x"}]}
    )
    assert AnthropicStream(areq, id="m").feed_sse([ContentDelta("")]) == []


def test_text_frames_survive_a_frame_that_quotes_the_text() -> None:
    """The text's place is found even when the rest of the frame could hold the same string."""
    built: list[str] = []

    def build(key: str, text: str) -> str:
        built.append(text)
        return f'{{"model":{json_string(key)},"text":{json_string(text)}}}'

    frames = TextFrames(build)
    assert frames.frame("x", 'a"b') == '{"model":"x","text":"a\\"b"}'
    assert frames.frame("x", "") == '{"model":"x","text":""}'
    assert len(built) == 1  # serialised once per shape
