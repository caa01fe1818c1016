"""Parser events → responses and streams, checked against the official SDK types and helpers.

The stream = response property below covers all three APIs; the Responses API's own
checks are in ``test_api_responses_api_stream.py``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import pytest
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import ErrorResponse, Message, RawMessageStreamEvent
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.shared import ErrorObject
from pydantic import TypeAdapter

from dsmlkit.api import ApiError, ChatRequest, InvalidRequest, Usage, call_id_factory
from dsmlkit.api.anthropic import AnthropicStream, anthropic_response, parse_anthropic_request
from dsmlkit.api.common import check_tool_choice
from dsmlkit.api.errors import anthropic_error_body, openai_error_body
from dsmlkit.api.openai import OpenAIStream, openai_response, parse_openai_request
from dsmlkit.api.sse import sse_anthropic, sse_openai
from dsmlkit.dialects import V4_1
from dsmlkit.errors import CallerError
from dsmlkit.parse import MessageCollector, ParsedMessage, ToolCall
from tests.helpers import random_chunks, write_block
from tests.test_api_responses_api_stream import (
    accumulate_responses,
    responses_request,
    stream_events,
    whole_response,
)

STREAM_EVENT: TypeAdapter[RawMessageStreamEvent] = TypeAdapter(RawMessageStreamEvent)
TOOLS = ("get_weather", "Read", "note")
USAGE = Usage(prompt_tokens=30, completion_tokens=12, cached_tokens=8)


def openai_request(**extra: Any) -> ChatRequest:
    tools = [{"type": "function", "function": {"name": name}} for name in TOOLS]
    body = {"model": "dsv4", "messages": [{"role": "user", "content": "x"}], "tools": tools}
    return parse_openai_request({**body, "stream": True, **extra})


def anthropic_request(**extra: Any) -> ChatRequest:
    tools = [{"name": name, "input_schema": {"type": "object"}} for name in TOOLS]
    body = {"model": "dsv4", "max_tokens": 99, "messages": [{"role": "user", "content": "x"}]}
    return parse_anthropic_request({**body, "tools": tools, "stream": True, **extra})


def model_output(reasoning: str, content: str, calls: list[tuple[str, dict[str, Any]]]) -> str:
    block = write_block(V4_1, calls) if calls else ""
    return f"{reasoning}</think>{content}{block}"


def ids(req: ChatRequest) -> Callable[[], str]:
    count = iter(range(1000))
    return call_id_factory(req.api, token=lambda: str(next(count)))


def parse_whole(req: ChatRequest, text: str, finish_reason: str | None = None) -> ParsedMessage:
    parser = req.new_parser("reasoning", id_factory=ids(req))
    collector = MessageCollector()
    collector.add(parser.feed(text))
    collector.add(parser.close(finish_reason))
    return collector.message()


def openai_stream(
    req: ChatRequest, chunks: list[str], finish_reason: str | None = None
) -> tuple[list[dict[str, Any]], OpenAIStream]:
    parser = req.new_parser("reasoning", id_factory=ids(req))
    stream = OpenAIStream(req, id="chatcmpl-1", created=1700000000)
    out = stream.start()
    for chunk in chunks:
        out += stream.feed(parser.feed(chunk))
    out += stream.feed(parser.close(finish_reason))
    out += stream.finish(USAGE)
    return out, stream


def anthropic_stream(
    req: ChatRequest,
    chunks: list[str],
    finish_reason: str | None = None,
    stop_sequence: str | None = None,
) -> tuple[list[tuple[str, dict[str, Any]]], AnthropicStream]:
    parser = req.new_parser("reasoning", id_factory=ids(req))
    stream = AnthropicStream(req, id="msg_1", usage=Usage(USAGE.prompt_tokens, 0, 8))
    out = stream.start()
    for chunk in chunks:
        out += stream.feed(parser.feed(chunk))
    out += stream.feed(parser.close(finish_reason))
    out += stream.finish(USAGE, stop_sequence=stop_sequence)
    return out, stream


def accumulate_openai(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """Validate every chunk, check the grammar of api.md §1.3, fold with the SDK's helper."""
    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    started: list[int] = []
    for chunk in chunks:
        for choice in chunk["choices"]:
            for call in choice["delta"].get("tool_calls", ()):
                if "id" in call:  # a call's first delta: id, type and name, empty arguments
                    assert call["function"]["arguments"] == ""
                    assert call["type"] == "function"
                    started.append(call["index"])
                else:
                    assert set(call) == {"index", "function"}
                    assert call["index"] == started[-1]
        state.handle_chunk(ChatCompletionChunk.model_validate(chunk))
    assert started == list(range(len(started)))
    final = state.get_final_completion().model_dump(exclude_none=True)
    for call in final["choices"][0]["message"].get("tool_calls", ()):
        del call["index"]
    return final


def accumulate_anthropic(events: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Validate every event, check the grammar of api.md §2.4, fold with the SDK's helper."""
    snapshot = None
    buffers: dict[int, bytes] = {}
    names = [name for name, _ in events]
    assert names[0] == "message_start"
    assert names[-2:] == ["message_delta", "message_stop"]
    assert events[0][1]["message"]["type"] == "message"
    assert events[0][1]["message"]["role"] == "assistant"
    open_index = None
    next_index = 0
    previous: tuple[str, dict[str, Any]] = events[0]
    for name, data in events:
        assert data["type"] == name
        if name == "content_block_start":
            assert open_index is None and data["index"] == next_index
            open_index = next_index
            next_index += 1
        elif name == "content_block_delta":
            assert data["index"] == open_index
        elif name == "content_block_stop":
            assert data["index"] == open_index
            if snapshot is not None and snapshot.content[data["index"]].type == "thinking":
                assert previous[1]["delta"]["type"] == "signature_delta"
            open_index = None
        previous = (name, data)
        event = STREAM_EVENT.validate_python(data)
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=buffers)
    assert open_index is None
    assert snapshot is not None
    return snapshot.model_dump(exclude_none=True)


# --- the property: streams add up to the non-streaming response ----------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**9), 10**9) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
prose = st.text(st.characters(blacklist_characters="<", blacklist_categories=["Cs"]), max_size=40)
calls = st.lists(
    st.tuples(
        st.sampled_from(TOOLS),
        st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), json_values, max_size=4),
    ),
    max_size=3,
)


@pytest.mark.slow
@settings(max_examples=60, derandomize=True, deadline=None)
@given(reasoning=prose, content=prose, tool_calls=calls, seed=st.integers(0, 2**16))
def test_accumulated_streams_equal_the_responses(
    reasoning: str, content: str, tool_calls: list[tuple[str, dict[str, Any]]], seed: int
) -> None:
    text = model_output(reasoning, content, tool_calls)
    chunks = random_chunks(text, random.Random(seed), max_size=9)

    req = openai_request(stream_options={"include_usage": True})
    whole = parse_whole(req, text)
    expected = openai_response(whole, req.model, id="chatcmpl-1", created=1700000000, usage=USAGE)
    streamed, _ = openai_stream(req, chunks)
    assert accumulate_openai(streamed) == ChatCompletion.model_validate(expected).model_dump(
        exclude_none=True
    )

    areq = anthropic_request()
    awhole = parse_whole(areq, text)
    aexpected = anthropic_response(awhole, areq.model, id="msg_1", usage=USAGE)
    aevents, _ = anthropic_stream(areq, chunks)
    assert accumulate_anthropic(aevents) == Message.model_validate(aexpected).model_dump(
        exclude_none=True
    )

    rreq = responses_request(include=["reasoning.encrypted_content"])
    revents, _ = stream_events(rreq, chunks)
    assert accumulate_responses(revents) == whole_response(rreq, text)


# --- exact shapes ----------------------------------------------------------------------

WEATHER = model_output("Two cities.", "", [("get_weather", {"city": "Paris"})])


def test_openai_chunks_follow_the_documented_shape() -> None:
    req = openai_request()
    chunks, stream = openai_stream(req, [WEATHER])
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[:3] == [
        {"role": "assistant", "content": None},
        {"reasoning_content": "Two cities."},
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": ""},
                }
            ]
        },
    ]
    fragments = [d["tool_calls"][0]["function"]["arguments"] for d in deltas[3:-1]]
    assert "".join(fragments) == '{"city": "Paris"}'
    assert deltas[-1] == {}
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "tool_calls"
    assert all("usage" not in c for c in chunks)  # the client did not ask for usage
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert stream.diagnostics == ()


def test_openai_usage_chunk_comes_last_when_asked() -> None:
    chunks, _ = openai_stream(openai_request(stream_options={"include_usage": True}), ["Hi"])
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {
        "prompt_tokens": 30,
        "completion_tokens": 12,
        "total_tokens": 42,
        "prompt_tokens_details": {"cached_tokens": 8},
    }


def test_openai_usage_chunk_needs_usage() -> None:
    stream = OpenAIStream(openai_request(stream_options={"include_usage": True}), id="c", created=0)
    parser = openai_request().new_parser("content")
    stream.feed(parser.close())
    with pytest.raises(CallerError, match="usage"):
        stream.finish()


def test_anthropic_events_follow_the_documented_grammar() -> None:
    events, stream = anthropic_stream(anthropic_request(), [WEATHER])
    shape = [(name, data.get("index")) for name, data in events]
    assert shape[:6] == [
        ("message_start", None),
        ("content_block_start", 0),
        ("content_block_delta", 0),  # thinking_delta
        ("content_block_delta", 0),  # signature_delta
        ("content_block_stop", 0),
        ("content_block_start", 1),
    ]
    assert set(shape[6:-3]) == {("content_block_delta", 1)}
    assert shape[-3:] == [
        ("content_block_stop", 1),
        ("message_delta", None),
        ("message_stop", None),
    ]
    assert events[3][1]["delta"] == {"type": "signature_delta", "signature": "dsmlkit-unsigned"}
    assert events[5][1]["content_block"] == {
        "type": "tool_use",
        "id": "toolu_0",
        "name": "get_weather",
        "input": {},
    }
    assert events[-2][1]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert events[-2][1]["usage"]["output_tokens"] == 12
    assert stream.diagnostics == ()
    frames = "".join(sse_anthropic(name, data) for name, data in events)
    assert "[DONE]" not in frames
    assert frames.startswith("event: message_start\ndata: {")


def test_empty_completion() -> None:
    req, areq = openai_request(), anthropic_request()
    body = openai_response(parse_whole(req, "</think>"), req.model, id="c", created=0)
    ChatCompletion.model_validate(body)
    assert body["choices"][0]["message"] == {"role": "assistant", "content": None}
    assert body["choices"][0]["finish_reason"] == "stop"
    message = anthropic_response(parse_whole(areq, "</think>"), areq.model, id="m")
    Message.model_validate(message)
    assert message["content"] == [{"type": "text", "text": ""}]
    assert message["stop_reason"] == "end_turn"
    events, _ = anthropic_stream(areq, ["</think>"])
    assert accumulate_anthropic(events)["content"] == [{"type": "text", "text": ""}]


def test_stop_sequence_and_length() -> None:
    areq = anthropic_request(stop_sequences=["END"])
    message = anthropic_response(
        parse_whole(areq, "</think>ok"), areq.model, id="m", stop_sequence="END"
    )
    Message.model_validate(message)
    assert (message["stop_reason"], message["stop_sequence"]) == ("stop_sequence", "END")
    events, _ = anthropic_stream(areq, ["</think>ok"], stop_sequence="END")
    assert events[-2][1]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}

    cut = parse_whole(areq, "</think>a long answ", finish_reason="length")
    assert anthropic_response(cut, areq.model, id="m")["stop_reason"] == "max_tokens"
    req = openai_request()
    assert (
        openai_response(cut, req.model, id="c", created=0)["choices"][0]["finish_reason"]
        == "length"
    )


def test_call_cut_off_by_the_length_limit() -> None:
    text = model_output("", "", [("note", {"text": "a long value"})])[:-40]
    areq = anthropic_request()
    events, stream = anthropic_stream(areq, random_chunks(text, random.Random(1)), "length")
    accumulated = accumulate_anthropic(events)
    assert accumulated["stop_reason"] == "max_tokens"
    assert "truncated_call" in {d.kind for d in stream.diagnostics}
    whole = anthropic_response(parse_whole(areq, text, "length"), areq.model, id="m")
    assert [block["type"] for block in whole["content"]] == ["text"]
    chunks, _ = openai_stream(openai_request(), [text], "length")
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


# --- tool_choice and parallel_tool_calls ------------------------------------------------


def call(name: str) -> ToolCall:
    return ToolCall(id="call_x", name=name, arguments={}, arguments_json="{}")


@pytest.mark.parametrize(
    ("extra", "made", "kinds"),
    [
        ({"tool_choice": "auto"}, ["Read", "note"], []),
        ({"tool_choice": "none"}, ["Read"], ["tool_choice_none_violated"]),
        ({"tool_choice": "required"}, [], ["tool_call_required_missing"]),
        ({"tool_choice": "required"}, ["Read"], []),
        (
            {"tool_choice": {"type": "function", "function": {"name": "Read"}}},
            ["note"],
            ["tool_choice_name_mismatch"],
        ),
        ({"parallel_tool_calls": False}, ["Read", "Read"], ["parallel_tool_calls_violated"]),
    ],
)
def test_check_tool_choice(extra: dict[str, Any], made: list[str], kinds: list[str]) -> None:
    req = openai_request(**extra)
    assert [d.kind for d in check_tool_choice(req, [call(n) for n in made])] == kinds


def test_stream_reports_but_keeps_calls_beyond_disable_parallel_tool_use() -> None:
    areq = anthropic_request(tool_choice={"type": "any", "disable_parallel_tool_use": True})
    text = model_output("", "", [("Read", {"p": "a"}), ("Read", {"p": "b"})])
    events, stream = anthropic_stream(areq, [text])
    accumulated = accumulate_anthropic(events)
    assert [block["input"] for block in accumulated["content"]] == [{"p": "a"}, {"p": "b"}]
    assert [d.kind for d in stream.diagnostics] == ["parallel_tool_calls_violated"]


def test_diagnostics_before_finish_is_a_mistake() -> None:
    with pytest.raises(CallerError, match="finish"):
        _ = OpenAIStream(openai_request(), id="c", created=0).diagnostics


# --- ids, framing, errors --------------------------------------------------------------


def test_call_ids() -> None:
    openai_ids, anthropic_ids = call_id_factory("openai"), call_id_factory("anthropic")
    made = {openai_ids() for _ in range(50)}
    assert len(made) == 50 and all(i.startswith("call_") and len(i) == 29 for i in made)
    assert anthropic_ids().startswith("toolu_")


def test_sse_frames() -> None:
    assert sse_openai({"a": "é"}) == 'data: {"a":"é"}\n\n'
    # The stream's last frame is the literal sentinel OpenAI clients stop reading at.
    req = openai_request()
    stream = OpenAIStream(req, id="c", created=0)
    stream.feed(req.new_parser("content").close())
    assert stream.finish_sse(USAGE)[-1] == "data: [DONE]\n\n"
    assert sse_anthropic("ping", {"type": "ping"}) == 'event: ping\ndata: {"type":"ping"}\n\n'


def test_error_bodies_match_the_sdk_types() -> None:
    err = InvalidRequest("is required; give a string", "messages[0].role")
    body = openai_error_body(err)
    ErrorObject.model_validate(body["error"])
    assert body["error"]["param"] == "messages[0].role"
    anthropic_body = anthropic_error_body(ApiError.for_status(529, "busy"))
    assert ErrorResponse.model_validate(anthropic_body).error.type == "overloaded_error"
    frame = sse_anthropic("error", anthropic_body)
    assert json.loads(frame.split("data: ", 1)[1])["type"] == "error"
