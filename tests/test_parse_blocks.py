"""Turns with several call blocks, text around them and ``<think>`` in content (issue 16).

Every case is parsed whole, one character at a time and in random chunks, in every dialect
and with both marker spellings: the event streams agree, argument fragments join to
``arguments_json`` (``tests.parse_checks.check_output``) and no DSML reaches content.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from dsmlkit.dialects import EOS, MARKER, V4, Dialect
from dsmlkit.parse import (
    ContentDelta,
    Diagnostic,
    Event,
    MessageCollector,
    Parser,
    ReasoningDelta,
    ToolCallEnd,
    ToolCallStart,
)
from dsmlkit.parse.parser import MAX_FOLLOWER_GAP
from tests.helpers import ALL_DIALECTS, MARKERS, counter_ids, random_chunks, write_block
from tests.parse_checks import check_output

SPELLINGS = [(d, m) for d in ALL_DIALECTS for m in MARKERS]
SPELLING_IDS = [f"{d.name}-{'fullwidth' if m == MARKER else 'ascii'}" for d, m in SPELLINGS]


def agreed(
    text: str, dialect: Dialect, *, quoted: bool = False, **options: Any
) -> tuple[list[Event], Any]:
    """Events and message of ``text``, checked whole, per character and in random chunks
    (and for DSML in content and arguments unless the model ``quoted`` it as text)."""
    rng = random.Random(text)
    chunkings = [list(text)] + [random_chunks(text, rng, size) for size in (2, 5, 13, 40)]
    events = check_output(text, chunkings, dialect.name, **options)
    collector = MessageCollector()
    collector.add(events)
    message = collector.message()
    for piece in (message.content, message.reasoning):
        assert quoted or "DSML" not in piece, piece
    for call in message.calls:
        assert quoted or "DSML" not in call.arguments_json, call
    return events, message


def calls_of(message: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(c.name, c.arguments) for c in message.calls]


def kinds(message: Any) -> list[str]:
    return [d.kind for d in message.diagnostics]


# -------------------------------------------------------------- several blocks per turn


@pytest.mark.parametrize(("dialect", "marker"), SPELLINGS, ids=SPELLING_IDS)
@pytest.mark.parametrize("between", ["\n\nthen", "\n\n", "", " then "])
def test_two_blocks_give_both_calls_and_the_text_between(
    dialect: Dialect, marker: str, between: str
) -> None:
    first = write_block(dialect, [("f", {"a": "x"})], marker)
    second = write_block(dialect, [("g", {"b": "y"}), ("h", {"c": 1})], marker)
    _, message = agreed("Sure." + first + between + second, dialect)
    assert calls_of(message) == [("f", {"a": "x"}), ("g", {"b": "y"}), ("h", {"c": 1})]
    assert message.content == "Sure." + between.rstrip("\n")
    assert message.finish_reason == "tool_calls"
    assert "closing_sequence_in_value" not in kinds(message)


@pytest.mark.parametrize(("dialect", "marker"), SPELLINGS, ids=SPELLING_IDS)
def test_three_blocks_and_text_after_the_last(dialect: Dialect, marker: str) -> None:
    blocks = [write_block(dialect, [(name, {"v": name * 2})], marker) for name in "fgh"]
    text = "A" + blocks[0] + "\nB" + blocks[1] + blocks[2] + "\nDone."
    _, message = agreed(text, dialect)
    assert calls_of(message) == [("f", {"v": "ff"}), ("g", {"v": "gg"}), ("h", {"v": "hh"})]
    assert message.content == "A\nB\nDone."


def test_the_second_block_streams_as_soon_as_its_invoke_opener_is_seen() -> None:
    first = write_block(V4, [("f", {"a": "x"})])
    second = write_block(V4, [("g", {"b": "y"})])
    opener_end = second.index('name="g">') + len('name="g">')
    parser = Parser("v4", id_factory=counter_ids())
    events = parser.feed("Sure." + first + " then" + second[:opener_end])
    assert [e.name for e in events if isinstance(e, ToolCallEnd)] == ["f"]
    assert [e.name for e in events if isinstance(e, ToolCallStart)] == ["f", "g"]
    assert "".join(e.text for e in events if isinstance(e, ContentDelta)) == "Sure. then"


@pytest.mark.parametrize(("dialect", "marker"), SPELLINGS, ids=SPELLING_IDS)
def test_a_quoted_closing_sequence_without_a_new_block_stays_value_text(
    dialect: Dialect, marker: str
) -> None:
    sequence = (
        f"{dialect.parameter_close(marker)}\n{dialect.invoke_close(marker)}\n"
        f"{dialect.block_close(marker)}"
    )
    value = f"A{sequence}\nmore text, and a <{marker}{dialect.block.strip()}> mention"
    text = write_block(dialect, [("Write", {"content": value})], marker)
    _, message = agreed(text, dialect, quoted=True)
    assert calls_of(message) == [("Write", {"content": value})]
    assert kinds(message) == ["closing_sequence_in_value"]


@pytest.mark.parametrize(("dialect", "marker"), SPELLINGS, ids=SPELLING_IDS)
def test_a_block_opener_that_no_invoke_follows_does_not_end_the_first_block(
    dialect: Dialect, marker: str
) -> None:
    first = write_block(dialect, [("f", {"a": "x"})], marker)
    text = first + "\nsee " + dialect.block_open(marker) + " here"
    _, message = agreed(text, dialect, quoted=True)
    assert calls_of(message) == [("f", {"a": "x"})]
    assert message.content == "\nsee " + dialect.block_open(marker) + " here"


def test_a_cut_off_output_after_a_second_block_keeps_the_first_call() -> None:
    first = write_block(V4, [("f", {"a": "x"})])
    second = write_block(V4, [("g", {"b": "y"})])
    cut = second[: second.index(">y") + 1]
    _, message = agreed(first + cut, V4, finish_reason="length")
    assert calls_of(message) == [("f", {"a": "x"})]
    assert message.finish_reason == "length"
    assert kinds(message) == ["truncated_call"]


def test_arguments_fragments_join_in_the_second_block_with_tools() -> None:
    tools = [{"name": "g", "input_schema": {"properties": {"a": {}}}}]
    invoke = (
        V4.invoke_open("g")
        + "{}"
        + V4.parameter_open("arguments", True)
        + "x"
        + V4.parameter_close()
        + "\n"
        + V4.invoke_close()
    )
    second = f"\n\n{V4.block_open()}\n{invoke}\n{V4.block_close()}"
    _, message = agreed(write_block(V4, [("f", {})]) + second, V4, tools=tools)
    assert calls_of(message) == [("f", {}), ("g", {"arguments": "x"})]


# -------------------------------------------------------------- text after the calls


@pytest.mark.parametrize(("dialect", "marker"), SPELLINGS, ids=SPELLING_IDS)
def test_text_after_a_block_is_content_after_the_calls(dialect: Dialect, marker: str) -> None:
    events, message = agreed(
        "Let me check." + write_block(dialect, [("f", {"a": "x"})], marker) + "\n\nDone.", dialect
    )
    assert message.content == "Let me check.\n\nDone."
    assert kinds(message) == ["text_after_block"]
    last_call = max(i for i, e in enumerate(events) if isinstance(e, ToolCallEnd))
    after = "".join(e.text for e in events[last_call:] if isinstance(e, ContentDelta))
    assert after == "\n\nDone."


@pytest.mark.parametrize(("dialect", "marker"), SPELLINGS, ids=SPELLING_IDS)
def test_whitespace_then_the_end_after_a_block_is_markup(dialect: Dialect, marker: str) -> None:
    text = "Hi" + write_block(dialect, [("f", {})], marker) + "\n\n" + EOS + "junk"
    _, message = agreed(text, dialect)
    assert message.content == "Hi"
    assert kinds(message) == ["text_after_eos"]
    assert [d.text for d in message.diagnostics] == ["junk"]


# -------------------------------------------------------------- <think> in content


@pytest.mark.parametrize(("dialect", "marker"), SPELLINGS, ids=SPELLING_IDS)
def test_a_think_span_in_content_is_kept_whole_as_text(dialect: Dialect, marker: str) -> None:
    tail = write_block(dialect, [("f", {"a": "x"})], marker)
    _, message = agreed("Hi <think>r</think>ok" + tail, dialect)
    assert message.content == "Hi <think>r</think>ok"
    assert message.reasoning == ""
    assert calls_of(message) == [("f", {"a": "x"})]


def test_a_lone_think_closer_in_content_is_still_dropped() -> None:
    _, message = agreed("a</think>b", V4)
    assert message.content == "ab"
    assert kinds(message) == ["stray_think_close"]


@pytest.mark.parametrize("dialect", ALL_DIALECTS, ids=[d.name for d in ALL_DIALECTS])
def test_an_echoed_think_opener_at_the_start_of_reasoning_is_dropped(dialect: Dialect) -> None:
    events, message = agreed("<think>r</think>ok", dialect, start_in="reasoning")
    assert (message.reasoning, message.content) == ("r", "ok")
    assert not [e for e in events if isinstance(e, Diagnostic)]
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "r"


def test_a_think_opener_later_in_reasoning_is_reasoning_text() -> None:
    _, message = agreed("a<think>b</think>c", V4, start_in="reasoning")
    assert (message.reasoning, message.content) == ("a<think>b", "c")


def test_a_whitespace_run_after_the_calls_longer_than_the_gap_is_content() -> None:
    run = " " * (MAX_FOLLOWER_GAP + 1)
    _, message = agreed("Hi" + write_block(V4, [("f", {})]) + run + EOS, V4)
    assert message.content == "Hi" + run
    _, short = agreed("Hi" + write_block(V4, [("f", {})]) + run[1:] + EOS, V4)
    assert short.content == "Hi"


def test_a_think_span_in_the_answer_after_reasoning_is_kept_whole_as_text() -> None:
    _, message = agreed("r</think>Hi <think>x</think>ok", V4, start_in="reasoning")
    assert (message.reasoning, message.content) == ("r", "Hi <think>x</think>ok")
    assert kinds(message) == []
