"""The streams' SSE frames equal framing each chunk / event dict in full, byte for byte."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsmlkit.api import ChatRequest, ResponsesRequest, Usage, call_id_factory
from dsmlkit.api.anthropic import AnthropicStream, parse_anthropic_request
from dsmlkit.api.openai import OpenAIStream, parse_openai_request
from dsmlkit.api.responses import ResponsesStream, parse_responses_request
from dsmlkit.api.sse import SSE_DONE, TextFrames, json_string, sse_anthropic, sse_event, sse_openai
from dsmlkit.dialects import V4_1
from dsmlkit.parse import ContentDelta, Event, Parser, StartIn
from tests.helpers import MarkedSealer, random_chunks, write_block
from tests.test_api_responses_api_stream import accumulate_responses

DATA = Path(__file__).parent / "data" / "parse.json"
#: The recorded outputs read with the default options (as a gateway reads them).
VECTORS = [v for v in json.loads(DATA.read_text("utf-8"))["vectors"] if not v.get("options")]
SEALER = MarkedSealer()

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
    count = iter(range(99))
    ids = call_id_factory(req.api, lambda: str(next(count)))
    parser: Parser = req.new_parser("reasoning", id_factory=ids)
    batches = [parser.feed(chunk) for chunk in random_chunks(output, random.Random(seed))]
    return [*batches, parser.close()]


def _output(reasoning: str, content: str, value: str) -> str:
    return f"{reasoning}</think>{content}" + write_block(V4_1, [("note", {"text": value})])


@pytest.mark.slow
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


def _responses_frames(
    req: ResponsesRequest, batches: list[list[Event]], fail: bool = False
) -> tuple[list[dict[str, Any]], list[str], list[str], ResponsesStream]:
    """One output through two streams: ``(events, framed events, SSE frames, SSE stream)``;
    with ``fail`` both break off after the batches instead of finishing."""
    dicts = ResponsesStream(req, id="resp_0123", created_at=1, sealer=SEALER)
    frames = ResponsesStream(req, id="resp_0123", created_at=1, sealer=SEALER)
    events = dicts.start()
    got = frames.start_sse()
    for batch in batches:
        events += dicts.feed(batch)
        got += frames.feed_sse(batch)
    if fail:
        events += dicts.fail("the engine went away")
        got += frames.fail_sse("the engine went away")
    else:
        events += dicts.finish(USAGE)
        got += frames.finish_sse(USAGE)
        assert frames.diagnostics == dicts.diagnostics
        assert frames.response == dicts.response == events[-1]["response"]
    return events, [sse_event(event["type"], event) for event in events], got, frames


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(TEXT, TEXT, TEXT, TEXT, st.booleans(), st.booleans(), st.integers(0, 99))
def test_responses_sse_equals_framed_events(
    model: str, reasoning: str, content: str, value: str, sealed: bool, fail: bool, seed: int
) -> None:
    tools = [
        {"type": "function", "name": "note"},
        {
            "type": "namespace",
            "name": "crm",
            "description": "crm",
            "tools": [{"type": "function", "name": "note"}],
        },
    ]
    body: dict[str, Any] = {"model": model or "m", "input": "x", "tools": tools, "stream": True}
    if sealed:
        body["include"] = ["reasoning.encrypted_content"]
    req = parse_responses_request(body)
    output = f"{reasoning}</think>{content}" + write_block(
        V4_1, [("note", {"text": value}), ("crm.note", {"text": content})]
    )
    batches = _batches(req, output, seed)
    events, expected, got, _ = _responses_frames(req, batches[:-2] if fail else batches, fail)
    assert got == expected
    accumulate_responses(events)


@pytest.mark.parametrize("vector", VECTORS, ids=[v["id"] for v in VECTORS])
def test_recorded_outputs_frame_alike_in_every_api(vector: dict[str, Any]) -> None:
    """Each recorded output, in random chunks, through all three streams: the SSE path
    writes what framing the events does (and the Responses events hold for the SDK)."""
    names = sorted({call["name"] for call in vector["expected"]["calls"]})
    start_in: StartIn = "reasoning" if vector["mode"] == "thinking" else "content"
    chunks = random_chunks(vector["text"], random.Random(vector["id"]), max_size=5)

    def batches(req: ChatRequest) -> list[list[Event]]:
        count = iter(range(99))
        parser = req.new_parser(start_in, call_id_factory(req.api, lambda: str(next(count))))
        return [*(parser.feed(chunk) for chunk in chunks), parser.close()]

    responses = parse_responses_request(
        {"model": "m", "input": "x", "tools": [{"type": "function", "name": n} for n in names]},
        dialect=vector["version"],
    )
    events, expected, got, stream = _responses_frames(responses, batches(responses))
    assert got == expected
    final = accumulate_responses(events)
    assert stream.response == final
    assert "".join(
        part["text"]
        for item in final["output"]
        if item["type"] == "message"
        for part in item["content"]
    ) == (vector["expected"].get("content") or "")

    chat = parse_openai_request(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "x"}],
            "tools": [{"type": "function", "function": {"name": n}} for n in names],
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        dialect=vector["version"],
    )
    chat_dicts = OpenAIStream(chat, id="chatcmpl-1", created=1)
    chat_frames = OpenAIStream(chat, id="chatcmpl-1", created=1)
    chat_expected = [sse_openai(chunk) for chunk in chat_dicts.start()]
    chat_got = chat_frames.start_sse()
    for batch in batches(chat):
        chat_expected += [sse_openai(chunk) for chunk in chat_dicts.feed(batch)]
        chat_got += chat_frames.feed_sse(batch)
    chat_expected += [sse_openai(chunk) for chunk in chat_dicts.finish(USAGE)] + [SSE_DONE]
    chat_got += chat_frames.finish_sse(USAGE)
    assert chat_got == chat_expected

    tools = [{"name": n, "input_schema": {"type": "object"}} for n in names]
    messages = parse_anthropic_request(
        {
            "model": "m",
            "max_tokens": 9,
            "messages": [{"role": "user", "content": "x"}],
            "tools": tools,
            "stream": True,
        },
        dialect=vector["version"],
    )
    msg_dicts = AnthropicStream(messages, id="msg_1", usage=USAGE)
    msg_frames = AnthropicStream(messages, id="msg_1", usage=USAGE)
    msg_expected = [sse_anthropic(name, data) for name, data in msg_dicts.start()]
    msg_got = msg_frames.start_sse()
    for batch in batches(messages):
        msg_expected += [sse_anthropic(name, data) for name, data in msg_dicts.feed(batch)]
        msg_got += msg_frames.feed_sse(batch)
    msg_expected += [sse_anthropic(name, data) for name, data in msg_dicts.finish(USAGE)]
    msg_got += msg_frames.finish_sse(USAGE)
    assert msg_got == msg_expected


def test_numbered_frames_fill_both_gaps() -> None:
    built: list[tuple[str, str]] = []

    def build(key: str, number: str, text: str) -> str:
        built.append((number, text))
        return sse_event(key, {"type": key, "sequence_number": number, "delta": text})

    frames: TextFrames[str] = TextFrames(build)
    for number, text in [(0, 'a"b'), (17, "é\n"), (123456, "")]:
        event = {"type": "t", "sequence_number": number, "delta": text}
        assert frames.numbered("t", number, text) == sse_event("t", event)
    assert len(built) == 1


def test_text_frames_refuse_a_frame_without_the_value() -> None:
    frames: TextFrames[str] = TextFrames(lambda key, text: f"{{{json_string(key)}:1}}")
    with pytest.raises(ValueError, match="does not hold"):
        frames.frame("x", "text")
