"""ChatRepair: a hosted chat stream with leaked DSML → one well-formed event stream."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from typing import Any

import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsmlkit.dialects import DEFAULT_DIALECT, V4, V4_1
from dsmlkit.parse import (
    ArgumentsDelta,
    Diagnostic,
    Event,
    MessageCollector,
    OutputEnd,
    ParsedMessage,
    Parser,
    ReasoningDelta,
    ReasoningEnd,
    ToolCallEnd,
    ToolCallStart,
    UpstreamBlock,
)
from dsmlkit.parse.chat_repair import ChatRepair
from dsmlkit.server.call_ids import AnswerIds
from dsmlkit.server.readers import MessagesReader
from tests.helpers import write_block
from tests.server.mock_upstream import ScriptedChat, chat_stream, mock_upstream
from tests.server.process import serve_process

BLOCK = write_block(V4_1, [("get_weather", {"city": "Paris"})])


def _client_id(upstream_id: str) -> str:
    """The upstream's id as it is; a call it gave none gets ``call_minted``."""
    return upstream_id or "call_minted"


def _repair() -> ChatRepair:
    ids = itertools.count()
    return ChatRepair(
        lambda: Parser(DEFAULT_DIALECT, start_in="content", id_factory=lambda: f"call_{next(ids)}"),
        _client_id,
    )


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def run(deltas: Sequence[dict[str, Any]], finish: str = "stop") -> list[Event]:
    repair = _repair()
    events: list[Event] = []
    for delta in deltas:
        events += repair.feed(delta)
    return events + repair.close(finish)


def collect(events: list[Event]) -> ParsedMessage:
    collector = MessageCollector()
    collector.add(events)
    return collector.message()


def check_stream_shape(events: list[Event]) -> None:
    """The event contract: calls numbered in order, never interleaved, fragments add up,
    and nothing but the open call's fragments (and diagnostics) while a call is open."""
    open_index: int | None = None
    fragments: dict[int, list[str]] = {}
    next_index = 0
    assert sum(isinstance(e, ReasoningEnd) for e in events) <= 1
    for event in events:
        if isinstance(event, ToolCallStart):
            assert open_index is None and event.index == next_index
            open_index, next_index = event.index, next_index + 1
            fragments[event.index] = []
        elif isinstance(event, ArgumentsDelta):
            assert event.index == open_index
            fragments[event.index].append(event.text)
        elif isinstance(event, ToolCallEnd):
            assert event.index == open_index
            assert "".join(fragments[event.index]) == event.arguments_json
            open_index = None
        elif not isinstance(event, Diagnostic | OutputEnd):
            assert open_index is None, f"{event} inside call {open_index}"


def calls_of(message: ParsedMessage) -> list[tuple[str, str, dict[str, Any]]]:
    return [(call.id, call.name, call.arguments) for call in message.calls]


def test_dsml_leaked_into_content_becomes_a_call() -> None:
    deltas = [{"content": piece} for piece in _pieces("Let me check." + BLOCK, 4)]
    events = run(deltas)
    check_stream_shape(events)
    message = collect(events)
    assert message.content == "Let me check."
    assert calls_of(message) == [("call_0", "get_weather", {"city": "Paris"})]
    assert message.finish_reason == "tool_calls"


def test_dsml_leaked_into_reasoning_becomes_a_call_after_the_reasoning() -> None:
    text = "I need the weather." + write_block(V4, [("get_weather", {"city": "Rome"})])
    deltas = [{"reasoning_content": piece} for piece in _pieces(text, 5)]
    events = run(deltas)
    check_stream_shape(events)
    message = collect(events)
    assert message.reasoning == "I need the weather."
    assert message.content == ""
    assert calls_of(message) == [("call_0", "get_weather", {"city": "Rome"})]
    first_call = next(i for i, e in enumerate(events) if isinstance(e, ToolCallStart))
    assert isinstance(events[first_call - 1], ReasoningEnd)


def test_reasoning_alias_and_think_tags_in_content_are_reasoning() -> None:
    message = collect(run([{"reasoning": "a"}, {"content": "b"}]))
    assert (message.reasoning, message.content) == ("a", "b")
    message = collect(run([{"content": "<think>plan</think>"}, {"content": "answer"}]))
    assert (message.reasoning, message.content) == ("plan", "answer")


def _upstream_call(index: int, call_id: str, name: str, arguments: str) -> list[dict[str, Any]]:
    head = {"index": index, "id": call_id, "type": "function", "function": {"name": name}}
    pieces = [{"index": index, "function": {"arguments": p}} for p in _pieces(arguments, 3)]
    return [{"tool_calls": [head]}, *({"tool_calls": [piece]} for piece in pieces)]


def test_proper_tool_calls_pass_through_with_their_ids() -> None:
    deltas = [
        {"content": "Two calls."},
        *_upstream_call(0, "call_up0", "get_weather", '{"city": "Oslo"}'),
        *_upstream_call(1, "call_up1", "get_time", '{"tz": "UTC"}'),
    ]
    events = run(deltas, "tool_calls")
    check_stream_shape(events)
    message = collect(events)
    assert message.content == "Two calls."
    assert calls_of(message) == [
        ("call_up0", "get_weather", {"city": "Oslo"}),
        ("call_up1", "get_time", {"tz": "UTC"}),
    ]


def test_upstream_call_waits_while_a_leaked_call_is_open() -> None:
    leaked = "Both." + BLOCK
    split = leaked.index("Paris")
    deltas = [
        {"content": leaked[:split]},
        *_upstream_call(0, "call_up", "get_time", '{"tz": "UTC"}'),
        {"content": leaked[split:]},
    ]
    events = run(deltas, "tool_calls")
    check_stream_shape(events)
    assert calls_of(collect(events)) == [
        ("call_0", "get_weather", {"city": "Paris"}),
        ("call_up", "get_time", {"tz": "UTC"}),
    ]


def test_cut_off_leaked_call_is_reported_not_returned() -> None:
    leaked = "Checking." + BLOCK
    events = run([{"content": leaked[: leaked.index("Paris") + 2]}], "length")
    check_stream_shape(events)
    message = collect(events)
    assert message.calls == ()
    assert message.finish_reason == "length"
    assert [d.kind for d in message.diagnostics] == ["truncated_call"]


def test_odd_upstream_arguments_are_reported_and_kept_as_objects() -> None:
    deltas = [
        *_upstream_call(0, "call_a", "f", "not json"),
        *_upstream_call(1, "call_b", "g", ""),
        {"tool_calls": [{"index": 2, "function": {"arguments": '{"x": 1}'}}]},
    ]
    events = run(deltas, "tool_calls")
    check_stream_shape(events)
    message = collect(events)
    assert [(c.name, c.arguments, c.arguments_json) for c in message.calls] == [
        ("f", {}, "not json"),
        ("g", {}, "{}"),
    ]
    kinds = sorted(d.kind for d in message.diagnostics)
    assert kinds == ["upstream_arguments_not_object", "upstream_call_without_name"]


def test_upstream_call_without_id_gets_one() -> None:
    deltas = [{"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "{}"}}]}]
    assert calls_of(collect(run(deltas, "tool_calls"))) == [("call_minted", "f", {})]


CHUNKINGS = st.lists(st.integers(min_value=1, max_value=9), min_size=1)


@pytest.mark.slow
@settings(derandomize=True, max_examples=60, deadline=None)
@given(sizes=CHUNKINGS, reasoning=st.text(max_size=20), content=st.text(max_size=20))
def test_result_does_not_depend_on_chunking(sizes: list[int], reasoning: str, content: str) -> None:
    """Any split of the leaked texts gives the same message as one delta each."""
    leaked_reasoning = reasoning.replace("<", "")
    leaked_content = content.replace("<", "") + write_block(
        V4_1, [("write", {"text": "a </｜DSML｜ parameter> b", "n": 3})]
    )
    whole = collect(run([{"reasoning_content": leaked_reasoning}, {"content": leaked_content}]))
    deltas: list[dict[str, Any]] = []
    for key, text in (("reasoning_content", leaked_reasoning), ("content", leaked_content)):
        start, sizes_cycle = 0, itertools.cycle(sizes)
        while start < len(text):
            size = next(sizes_cycle)
            deltas.append({key: text[start : start + size]})
            start += size
    events = run(deltas)
    check_stream_shape(events)
    chunked = collect(events)
    assert (chunked.reasoning, chunked.content) == (whole.reasoning, whole.content)
    assert (
        calls_of(chunked)
        == calls_of(whole)
        == [("call_0", "write", {"text": "a </｜DSML｜ parameter> b", "n": 3})]
    )
    assert not any(isinstance(e, ReasoningDelta) and not e.text for e in events)
    assert json.loads(chunked.calls[0].arguments_json) == chunked.calls[0].arguments


def test_reasoning_after_a_leaked_call_waits_for_the_call() -> None:
    """An endpoint that sends reasoning after content whose leaked call is still open (the
    parser holds its end until it knows the closer is no quoted text): the reasoning comes
    after the call, whose arguments are complete."""
    cut = ("Checking." + BLOCK).index("DSML") + 2
    leak = "Checking." + BLOCK
    events = run(
        [
            {"content": leak[:cut]},
            {"content": leak[cut:]},
            {"reasoning_content": "Paris"},
            {"reasoning_content": " it is."},
        ]
    )
    check_stream_shape(events)
    message = collect(events)
    assert (message.content, message.reasoning) == ("Checking.", "Paris it is.")
    assert calls_of(message) == [("call_0", "get_weather", {"city": "Paris"})]


@pytest.mark.slow
def test_reasoning_after_a_leaked_call_through_a_gateway_process() -> None:
    """The same through ``dsmlkit serve --upstream-api chat`` and the openai SDK, streamed:
    the client's call arguments are complete JSON (they stopped at ``{"city": "Paris``)."""
    leak = "Checking." + BLOCK
    cut = leak.index("DSML") + 2
    upstream = ScriptedChat()
    upstream.play(
        chat_stream(
            {"role": "assistant", "content": leak[:cut]},
            {"content": leak[cut:]},
            {"reasoning_content": "Paris"},
            {"reasoning_content": " it is."},
        )
    )
    tool: Any = {
        "type": "function",
        "function": {"name": "get_weather", "parameters": {"type": "object"}},
    }
    with (
        mock_upstream(upstream) as upstream_url,
        serve_process("--upstream", upstream_url, "--upstream-api", "chat") as (_, url),
    ):
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=10)
        chunks = client.chat.completions.create(
            model="deepseek-v4.1",
            messages=[{"role": "user", "content": "Weather?"}],
            tools=[tool],
            stream=True,
        )
        arguments, finish = "", None
        for chunk in chunks:
            for choice in chunk.choices:
                for call in choice.delta.tool_calls or ():
                    arguments += call.function.arguments or "" if call.function else ""
                finish = choice.finish_reason or finish
    assert json.loads(arguments) == {"city": "Paris"}
    assert finish == "tool_calls"


# --- a Messages upstream's own blocks ------------------------------------------------------


def _messages_reader(pass_blocks: bool) -> MessagesReader:
    return MessagesReader(_repair(), AnswerIds(lambda: "toolu_minted", ()), pass_blocks=pass_blocks)


def _read(reader: MessagesReader, chunks: Sequence[dict[str, Any]]) -> list[Event]:
    events: list[Event] = []
    for chunk in chunks:
        for choice in reader.choices(chunk):
            events += reader.feed(choice)
    return events + reader.close("stop")


def _started(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def _json_delta(index: int, text: str) -> dict[str, Any]:
    delta = {"type": "input_json_delta", "partial_json": text}
    return {"type": "content_block_delta", "index": index, "delta": delta}


USE = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "deepseek_web_search", "input": {}}


def test_a_block_the_reader_does_not_read_is_passed_on_whole_in_its_place() -> None:
    """Text, then a server_tool_use (input streamed), then text: the block comes between
    the two texts, whole, with its start and deltas as they came."""
    events = _read(
        _messages_reader(True),
        [
            _started(0, {"type": "text", "text": ""}),
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "A "},
            },
            {"type": "content_block_stop", "index": 0},
            _started(1, USE),
            _json_delta(1, '{"q": '),
            _json_delta(1, '"ä"}'),
            {"type": "content_block_stop", "index": 1},
            _started(2, {"type": "text", "text": "B"}),
            {"type": "content_block_stop", "index": 2},
        ],
    )
    blocks = [event for event in events if isinstance(event, UpstreamBlock)]
    assert [type(event).__name__ for event in events] == [
        "ContentDelta",
        "UpstreamBlock",
        "ContentDelta",
        "OutputEnd",
    ]
    assert blocks[0].start == USE
    assert [delta["partial_json"] for delta in blocks[0].deltas] == ['{"q": ', '"ä"}']
    assert blocks[0].block == {**USE, "input": {"q": "ä"}}
    collected = MessageCollector()
    collected.add(events)
    assert [
        (placed.at, placed.block["type"]) for placed in collected.message().upstream_blocks
    ] == [(2, "server_tool_use")]


def test_a_block_cut_off_or_with_broken_input_still_goes_on_and_is_reported() -> None:
    """A block whose input is not JSON keeps the input it started with (a diagnostic holds
    the text); one the stream never stopped goes on at the close."""
    events = _read(
        _messages_reader(True),
        [
            _started(0, USE),
            _json_delta(0, '{"q": '),
            {"type": "content_block_stop", "index": 0},
            _started(1, {"type": "web_search_tool_result", "content": []}),
        ],
    )
    blocks = [event.block for event in events if isinstance(event, UpstreamBlock)]
    assert blocks == [USE, {"type": "web_search_tool_result", "content": []}]
    [broken] = [event for event in events if isinstance(event, Diagnostic)]
    assert (broken.kind, broken.text) == ("upstream_block_input", '{"q": ')


def test_a_block_a_chat_answer_cannot_hold_is_a_diagnostic_not_a_silent_drop() -> None:
    events = _read(
        _messages_reader(False),
        [_started(0, USE), _json_delta(0, '{"q": 1}'), {"type": "content_block_stop", "index": 0}],
    )
    [dropped] = [event for event in events if isinstance(event, Diagnostic)]
    assert dropped.kind == "upstream_block_dropped"
    assert json.loads(dropped.text) == {**USE, "input": {"q": 1}}
    assert not any(isinstance(event, UpstreamBlock) for event in events)
