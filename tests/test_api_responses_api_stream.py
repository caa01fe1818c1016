"""Parser events → Responses ``response`` objects and stream events, checked with the SDK.

Every response is validated as the official ``openai`` SDK's ``Response``; every stream event
as its ``ResponseStreamEvent`` union, folded by the SDK's own ``ResponseStreamState`` (the
machinery behind ``client.responses.stream(...)``) and by :func:`accumulate_responses`, which
also checks the grammar: numbering, lifecycle, added/done pairs and delta sums.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from openai import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent
from openai.types.shared import ErrorObject
from pydantic import TypeAdapter

from dsmlkit.api import InvalidRequest, ResponsesRequest, Usage, call_id_factory
from dsmlkit.api.errors import openai_error_body
from dsmlkit.api.responses import ResponsesStream, parse_responses_request, responses_response
from dsmlkit.api.sse import sse_event
from dsmlkit.dialects import V4_1
from dsmlkit.errors import CallerError
from dsmlkit.parse import MessageCollector, ParsedMessage
from tests.helpers import MarkedSealer, random_chunks, write_block

STREAM_EVENT: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
TOOLS = ("get_weather", "Read", "note")
USAGE = Usage(prompt_tokens=30, completion_tokens=12, cached_tokens=8)
SEALER = MarkedSealer()
RESPONSE_ID = "resp_0123"
CREATED = 1700000000


def responses_request(**extra: Any) -> ResponsesRequest:
    tools: list[dict[str, Any]] = [
        {"type": "function", "name": name, "parameters": {"type": "object"}} for name in TOOLS
    ]
    tools.append(
        {
            "type": "namespace",
            "name": "mcp__docs__",
            "description": "docs",
            "tools": [{"type": "function", "name": "search", "parameters": {"type": "object"}}],
        }
    )
    body = {"model": "dsv4", "input": "x", "tools": tools, "stream": True, **extra}
    return parse_responses_request(body)


def model_output(reasoning: str, content: str, calls: list[tuple[str, dict[str, Any]]]) -> str:
    block = write_block(V4_1, calls) if calls else ""
    return f"{reasoning}</think>{content}{block}"


def new_parser(req: ResponsesRequest) -> Any:
    count = iter(range(1000))
    return req.new_parser(
        "reasoning", id_factory=call_id_factory(req.api, token=lambda: str(next(count)))
    )


def parse_whole(req: ResponsesRequest, text: str, finish: str | None = None) -> ParsedMessage:
    parser = new_parser(req)
    collector = MessageCollector()
    collector.add(parser.feed(text))
    collector.add(parser.close(finish))
    return collector.message()


def whole_response(req: ResponsesRequest, text: str, finish: str | None = None) -> dict[str, Any]:
    msg = parse_whole(req, text, finish)
    body = responses_response(
        msg, req, id=RESPONSE_ID, created_at=CREATED, usage=USAGE, sealer=SEALER
    )
    Response.model_validate(body)
    return body


def stream_events(
    req: ResponsesRequest, chunks: list[str], finish: str | None = None
) -> tuple[list[dict[str, Any]], ResponsesStream]:
    parser = new_parser(req)
    stream = ResponsesStream(req, id=RESPONSE_ID, created_at=CREATED, sealer=SEALER)
    out = stream.start()
    for chunk in chunks:
        out += stream.feed(parser.feed(chunk))
    out += stream.feed(parser.close(finish))
    out += stream.finish(USAGE)
    return out, stream


def accumulate_responses(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Check the grammar, fold with the SDK's state and by hand; return the final response.

    The hand fold rebuilds every item from its ``added`` event and the deltas; each must
    equal that item's ``done`` event, and the done items must be the final ``output``.
    """
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in ("response.completed", "response.incomplete", "response.failed")
    assert all(kind not in kinds[2:-1] for kind in kinds[:2] + kinds[-1:])
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
    items: dict[int, dict[str, Any]] = {}
    done: dict[int, dict[str, Any]] = {}
    open_index: int | None = None
    for event in events:
        typed = STREAM_EVENT.validate_python(event)
        state.handle_event(typed)
        kind = event["type"]
        index: int = event.get("output_index", -1)
        if kind == "response.output_item.added":
            assert open_index is None and index == len(items)  # one item at a time, in order
            open_index = index
            items[index] = json.loads(json.dumps(event["item"]))
        elif kind == "response.content_part.added":
            assert index == open_index and event["content_index"] == 0
            items[index]["content"] = [dict(event["part"])]
        elif kind in ("response.output_text.delta", "response.reasoning_text.delta"):
            assert index == open_index and event["item_id"] == items[index]["id"]
            items[index]["content"][0]["text"] += event["delta"]
        elif kind == "response.function_call_arguments.delta":
            assert index == open_index and event["item_id"] == items[index]["id"]
            items[index]["arguments"] += event["delta"]
        elif kind in ("response.output_text.done", "response.reasoning_text.done"):
            assert event["text"] == items[index]["content"][0]["text"]
        elif kind == "response.content_part.done":
            assert event["part"] == items[index]["content"][0]
        elif kind == "response.reasoning_summary_part.added":
            assert index == open_index and event["item_id"] == items[index]["id"]
            assert event["summary_index"] == len(items[index]["summary"])
            items[index]["summary"].append(dict(event["part"]))
        elif kind == "response.reasoning_summary_text.delta":
            assert index == open_index and event["item_id"] == items[index]["id"]
            items[index]["summary"][event["summary_index"]]["text"] += event["delta"]
        elif kind == "response.reasoning_summary_text.done":
            assert event["text"] == items[index]["summary"][event["summary_index"]]["text"]
        elif kind == "response.reasoning_summary_part.done":
            assert event["part"] == items[index]["summary"][event["summary_index"]]
        elif kind == "response.function_call_arguments.done":
            assert event["arguments"] == items[index]["arguments"]
        elif kind == "response.output_item.done":
            assert index == open_index
            folded = {**items[index], "status": event["item"]["status"]}
            if "encrypted_content" in event["item"]:
                folded["encrypted_content"] = event["item"]["encrypted_content"]
            assert folded == event["item"]
            done[index] = event["item"]
            open_index = None
    assert open_index is None
    final: dict[str, Any] = events[-1]["response"]
    assert final["output"] == [done[i] for i in sorted(done)]
    assert final["id"] == events[0]["response"]["id"]
    if kinds[-1] == "response.completed":
        sdk_final = state._completed_response
        assert sdk_final is not None
        assert sdk_final.model_dump(exclude_none=True) == Response.model_validate(final).model_dump(
            exclude_none=True
        )
    return final


WEATHER = model_output("Two cities.", "Checking.", [("get_weather", {"city": "Paris"})])


@pytest.mark.slow
def test_stream_adds_up_to_the_response() -> None:
    req = responses_request()
    text = model_output("Hmm <b>.", "Answer ünï.", [("Read", {"p": "a"}), ("note", {"t": [1]})])
    for seed in range(5):
        chunks = random_chunks(text, random.Random(seed), max_size=7)
        events, stream = stream_events(req, chunks)
        assert accumulate_responses(events) == whole_response(req, text)
        assert stream.diagnostics == ()


def test_response_object_shape() -> None:
    req = responses_request(
        instructions="Be brief.",
        metadata={"k": "v"},
        max_output_tokens=99,
        reasoning={"effort": "high", "summary": "auto"},
        store=False,
        previous_response_id="resp_prev",
    )
    body = whole_response(req, WEATHER)
    assert [item["type"] for item in body["output"]] == ["reasoning", "message", "function_call"]
    reasoning, message, call = body["output"]
    assert reasoning == {
        "type": "reasoning",
        "id": "rs_0123_0",
        "summary": [{"type": "summary_text", "text": "Two cities."}],
        "content": [{"type": "reasoning_text", "text": "Two cities."}],
        "status": "completed",
    }
    assert message["content"] == [
        {"type": "output_text", "text": "Checking.", "annotations": [], "logprobs": []}
    ]
    assert (message["id"], message["role"], message["status"]) == (
        "msg_0123_1",
        "assistant",
        "completed",
    )
    assert call == {
        "type": "function_call",
        "id": "fc_0123_2",
        "call_id": "call_0",
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
        "status": "completed",
    }
    assert body["status"] == "completed" and body["incomplete_details"] is None
    assert body["usage"] == {
        "input_tokens": 30,
        "input_tokens_details": {"cached_tokens": 8, "cache_write_tokens": 0},
        "output_tokens": 12,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 42,
    }
    assert (body["instructions"], body["metadata"], body["max_output_tokens"]) == (
        "Be brief.",
        {"k": "v"},
        99,
    )
    assert body["reasoning"] == {"effort": "high", "summary": "auto"}
    assert (body["store"], body["previous_response_id"]) == (False, "resp_prev")
    assert body["tool_choice"] == "auto" and len(body["tools"]) == 4
    assert (body["object"], body["model"], body["created_at"]) == ("response", "dsv4", CREATED)


def test_stream_event_grammar() -> None:
    events, _ = stream_events(responses_request(), [WEATHER])
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        *["response.function_call_arguments.delta"] * (len(events) - 18),
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert events[0]["response"]["status"] == "in_progress"
    assert events[0]["response"]["output"] == [] and events[0]["response"]["usage"] is None
    added_call = events[14]["item"]
    assert (added_call["status"], added_call["arguments"]) == ("in_progress", "")
    frame = sse_event(events[4]["type"], events[4])
    assert frame.startswith("event: response.reasoning_text.delta\ndata: {")
    assert json.loads(frame.split("data: ", 1)[1]) == events[4]


@pytest.mark.parametrize("summary", ["auto", "concise", "detailed"])
def test_asked_summary_is_the_reasoning(summary: str) -> None:
    """Codex asks ``reasoning.summary`` and shows only summaries: the reasoning comes as the
    item's summary too, streamed inside the item before its done; the content stays."""
    req = responses_request(reasoning={"effort": "high", "summary": summary})
    events, _ = stream_events(req, random_chunks(WEATHER, random.Random(1), max_size=5))
    kinds = [e["type"] for e in events]
    start = kinds.index("response.content_part.done") + 1
    assert kinds[start : start + 5] == [
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.output_item.done",
    ]
    assert {e["item_id"] for e in events[start : start + 4]} == {"rs_0123_0"}
    final = accumulate_responses(events)
    assert final == whole_response(req, WEATHER)
    assert final["output"][0]["summary"] == [{"type": "summary_text", "text": "Two cities."}]
    assert final["output"][0]["content"] == [{"type": "reasoning_text", "text": "Two cities."}]


@pytest.mark.parametrize("reasoning", [{"effort": "high"}, {"summary": "none"}])
def test_no_summary_unless_asked(reasoning: dict[str, str]) -> None:
    """Unasked (or ``none``, which the SDK's types cannot echo: no SDK check here), the
    reasoning items' ``summary`` stays empty."""
    req = responses_request(reasoning=reasoning)
    events, stream = stream_events(req, [WEATHER])
    assert not [e for e in events if "summary" in e["type"]]
    assert stream.response is not None and stream.response["output"][0]["summary"] == []
    msg = parse_whole(req, WEATHER)
    body = responses_response(msg, req, id=RESPONSE_ID, created_at=CREATED)
    assert body["output"][0]["summary"] == []


def test_namespaced_calls_come_back_split() -> None:
    req = responses_request()
    text = model_output("", "", [("mcp__docs__search", {"q": "x"})])
    call = whole_response(req, text)["output"][0]
    assert (call["namespace"], call["name"]) == ("mcp__docs__", "search")
    events, _ = stream_events(req, [text])
    added = next(e for e in events if e["type"] == "response.output_item.added")
    assert (added["item"]["namespace"], added["item"]["name"]) == ("mcp__docs__", "search")
    assert accumulate_responses(events)["output"] == [call]


def test_encrypted_reasoning_round_trips_through_the_next_request() -> None:
    req = responses_request(include=["reasoning.encrypted_content"], store=False)
    body = whole_response(req, WEATHER)
    reasoning = body["output"][0]
    assert SEALER.open(reasoning["encrypted_content"], "dsv4") == "Two cities."
    events, _ = stream_events(req, random_chunks(WEATHER, random.Random(3), max_size=5))
    assert accumulate_responses(events) == body
    added = next(e for e in events if e["type"] == "response.output_item.added")
    assert "encrypted_content" not in added["item"]  # known only once the reasoning ended

    # A stateless client sends the output back, reasoning text stripped, sealed text kept.
    returned = [
        {**item, "content": []} if item["type"] == "reasoning" else item for item in body["output"]
    ]
    history = [
        {"role": "user", "content": "x"},
        *returned,
        {"type": "function_call_output", "call_id": "call_0", "output": "sunny"},
    ]
    tools = [{"type": "function", "name": "get_weather"}]
    follow_up = parse_responses_request(
        {"model": "dsv4", "input": history, "tools": tools}, sealer=SEALER
    )
    turn = follow_up.conversation.chat_messages()[1]
    assert (turn["reasoning_content"], turn["content"]) == ("Two cities.", "Checking.")


def test_encrypted_reasoning_needs_the_key() -> None:
    req = responses_request(include=["reasoning.encrypted_content"])
    with pytest.raises(ValueError, match="sealer"):
        responses_response(parse_whole(req, WEATHER), req, id="resp_1", created_at=0)


def test_cut_off_output_is_incomplete() -> None:
    req = responses_request()
    text = model_output("", "a long answ", [])
    body = whole_response(req, text, "length")
    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    events, _ = stream_events(req, [text], "length")
    assert events[-1]["type"] == "response.incomplete"
    assert accumulate_responses(events) == body


def test_call_cut_off_is_an_incomplete_item_in_the_stream_only() -> None:
    req = responses_request()
    text = model_output("", "", [("note", {"text": "a long value"})])[:-40]
    events, stream = stream_events(req, [text], "length")
    final = accumulate_responses(events)
    assert [(i["type"], i["status"]) for i in final["output"]] == [("function_call", "incomplete")]
    assert "truncated_call" in {d.kind for d in stream.diagnostics}
    assert whole_response(req, text, "length")["output"] == []


def test_empty_output() -> None:
    req = responses_request()
    body = whole_response(req, "</think>")
    assert body["output"] == [] and body["status"] == "completed"
    events, _ = stream_events(req, ["</think>"])
    assert accumulate_responses(events) == body


def test_failed_stream() -> None:
    req = responses_request()
    parser = new_parser(req)
    stream = ResponsesStream(req, id=RESPONSE_ID, created_at=CREATED)
    events = stream.start() + stream.feed(parser.feed("thinking…"))
    events += stream.fail("the upstream stream ended before the output did")
    final = accumulate_responses(events)
    assert final["status"] == "failed"
    assert final["error"] == {
        "code": "server_error",
        "message": "the upstream stream ended before the output did",
    }
    assert [item["type"] for item in final["output"]] == ["reasoning"]


def test_tool_choice_reports() -> None:
    req = responses_request(tool_choice="none")
    _, stream = stream_events(req, [WEATHER])
    assert [d.kind for d in stream.diagnostics] == ["tool_choice_none_violated"]
    with pytest.raises(CallerError, match="call finish"):
        _ = ResponsesStream(req, id="resp_x", created_at=0).diagnostics


def test_error_body_is_openais() -> None:
    err = InvalidRequest("must be one of …", "input[2].role")
    body = openai_error_body(err)
    assert ErrorObject.model_validate(body["error"]).param == "input[2].role"
