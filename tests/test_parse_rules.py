"""parsing.md rules one by one: structural closers (§2), spellings (§3), recovery (§4),
values (§5), events (§6), reasoning (§7) and API misuse."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from dsmlkit.dialects import EOS, V4, Dialect
from dsmlkit.errors import CallerError, InternalError
from dsmlkit.parse import (
    ArgumentsDelta,
    OutputEnd,
    ParsedMessage,
    Parser,
    ToolCallEnd,
    ToolCallStart,
    parse,
)
from dsmlkit.parse.parser import State
from tests.helpers import ALL_DIALECTS, MARKERS, parse_chunks, random_chunks, write_block

SPELLINGS = [(d, m) for d in ALL_DIALECTS for m in MARKERS]
SPELLING_IDS = [f"{d.name}-{'fullwidth' if m == MARKERS[0] else 'ascii'}" for d, m in SPELLINGS]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "f",
            "parameters": {"type": "object", "properties": {"a": {}, "b": {}}},
        },
    }
]


def both_modes(text: str, dialect: str | Dialect = "v4", **options: Any) -> ParsedMessage:
    """Parse whole and one character at a time; assert they agree; return the result."""
    whole = parse_chunks([text], dialect, **options)
    assert parse_chunks(list(text), dialect, **options) == whole
    assert parse_chunks(random_chunks(text, random.Random(7), 6), dialect, **options) == whole
    return whole


def calls_of(message: ParsedMessage) -> list[tuple[str, dict[str, Any]]]:
    return [(c.name, c.arguments) for c in message.calls]


def kinds(message: ParsedMessage) -> list[str]:
    return [d.kind for d in message.diagnostics]


# -------------------------------------------------------------- §2 structural closing tags


@pytest.mark.parametrize(("dialect", "marker"), SPELLINGS, ids=SPELLING_IDS)
def test_trtllm_21014_parameter_closer_inside_value(dialect: Dialect, marker: str) -> None:
    value = f"tag is </{marker} parameter> ok"
    text = write_block(
        dialect, [("Write", {"content": value}), ("Bash", {"command": "ls"})], marker
    )
    message = both_modes(text, dialect)
    assert calls_of(message) == [("Write", {"content": value}), ("Bash", {"command": "ls"})]


@pytest.mark.parametrize(("dialect", "marker"), SPELLINGS, ids=SPELLING_IDS)
def test_trtllm_21014_invoke_and_block_closers_inside_value(dialect: Dialect, marker: str) -> None:
    value = f"tag is </{marker} invoke> and </{marker} calls> ok"
    text = write_block(
        dialect, [("Write", {"content": value}), ("Bash", {"command": "ls"})], marker
    )
    message = both_modes(text, dialect)
    assert calls_of(message) == [("Write", {"content": value}), ("Bash", {"command": "ls"})]


@pytest.mark.parametrize(("dialect", "marker"), SPELLINGS, ids=SPELLING_IDS)
def test_own_dialect_closers_inside_value(dialect: Dialect, marker: str) -> None:
    opener_prefix = dialect.parameter_open("is the tag", True, marker)[:-1]
    value = (
        f"a{dialect.parameter_close(marker)}\n{opener_prefix}"
        f" {dialect.invoke_close(marker)} x {dialect.block_close(marker)}"
    )
    text = write_block(dialect, [("w", {"v": value, "n": 2})], marker)
    assert calls_of(both_modes(text, dialect)) == [("w", {"v": value, "n": 2})]


def test_whole_closing_sequence_inside_value_is_kept_when_more_text_follows() -> None:
    sequence = f"{V4.parameter_close()}\n{V4.invoke_close()}\n{V4.block_close()}"
    value = f"A{sequence}\nmore text"
    text = write_block(V4, [("Write", {"content": value, "path": "p"})])
    message = both_modes(text)
    assert calls_of(message) == [("Write", {"content": value, "path": "p"})]
    assert kinds(message) == ["closing_sequence_in_value"]


def test_tentative_block_close_withholds_the_call_until_close() -> None:
    text = write_block(V4, [("f", {"a": "x"})])
    parser = Parser("v4")
    events = parser.feed(text)
    assert not [e for e in events if isinstance(e, ToolCallEnd)]
    fragments = "".join(e.text for e in events if isinstance(e, ArgumentsDelta))
    assert fragments == '{"a": "x'
    closing = parser.close()
    assert [type(e) for e in closing] == [ArgumentsDelta, ArgumentsDelta, ToolCallEnd, OutputEnd]


def test_length_discards_a_tentative_close() -> None:
    text = write_block(V4, [("f", {"a": "x"})])
    message = both_modes(text, finish_reason="length")
    assert message.calls == ()
    assert message.finish_reason == "length"
    assert kinds(message) == ["truncated_call"]


def test_earlier_calls_decided_by_an_invoke_opener_stream_before_close() -> None:
    text = write_block(V4, [("f", {"a": "x"}), ("g", {"b": "y"})])
    events = Parser("v4").feed(text)
    ended = [e.name for e in events if isinstance(e, ToolCallEnd)]
    assert ended == ["f"]


def test_direct_invoke_closes_at_its_closer_and_returns_to_content() -> None:
    text = (
        'Hi\n\n<｜DSML｜invoke name="f">\n<｜DSML｜parameter name="a" string="true">x'
        "</｜DSML｜parameter>\n</｜DSML｜invoke>\nafter"
    )
    message = both_modes(text)
    assert calls_of(message) == [("f", {"a": "x"})]
    assert message.content == "Hi\nafter"  # the newline before text stays with it
    assert kinds(message) == []


# -------------------------------------------------------------- §3 spellings and wrappers


def test_strict_rejects_other_dialects_but_accepts_both_markers() -> None:
    v4_text = write_block(V4, [("f", {"a": "x"})])
    assert both_modes(v4_text, "v4.1", strict=True).calls == ()
    assert both_modes(v4_text, "v4.1").calls != ()
    ascii_text = write_block(V4, [("f", {"a": "x"})], "|DSML|")
    assert calls_of(both_modes(ascii_text, "v4", strict=True)) == [("f", {"a": "x"})]


def test_strict_refuses_typos() -> None:
    text = (
        '\n\n<｜DSML｜toolcalls>\n<｜DSML｜invoke name="f">\n</｜DSML｜invoke>\n'
        "</｜DSML｜toolcalls>"
    )
    strict = both_modes(text, strict=True)
    # The invoke is direct; the text after it keeps the newline before it.
    assert strict.content == "\n\n<｜DSML｜toolcalls>\n</｜DSML｜toolcalls>"
    assert "typo_markup" not in kinds(strict)
    lenient = both_modes(text)
    assert calls_of(lenient) == [("f", {})]
    assert "typo_markup" in kinds(lenient)


def test_typos_seen_in_the_field_are_recovered_with_diagnostics() -> None:
    text = (
        '\n\n<｜｜DSML｜｜tool_calls>\n<｜DSML｜invoke name="f">\n'
        '<｜DSML｜parameter name="a" string="true">x</｜DSML｜param>\n'
        "</｜DSML｜inv>\n</｜DSML｜tool_calls>"
    )
    message = both_modes(text)
    assert calls_of(message) == [("f", {"a": "x"})]
    assert set(kinds(message)) == {"typo_markup"}


def test_block_opener_in_prose_is_text() -> None:
    text = "I'll emit <｜DSML｜tool_calls> next</think>ok"
    message = both_modes(text, start_in="reasoning")
    assert message.reasoning == "I'll emit <｜DSML｜tool_calls> next"
    assert message.content == "ok"


def test_invoke_opener_in_prose_is_text() -> None:
    text = 'Write <｜DSML｜invoke name="x"> to call x'
    assert both_modes(text).content == text


@pytest.mark.parametrize("text", ["a <｜DS", "a <｜DSx b", "<|DSML|inv", "x </｜DSML｜ para", "<"])
def test_marker_fragments_are_released_as_text(text: str) -> None:
    assert both_modes(text).content == text


def test_parallel_calls_keep_their_order() -> None:
    calls: list[tuple[str, dict[str, Any]]] = [("a", {"x": 1}), ("b", {}), ("c", {"y": "z"})]
    assert calls_of(both_modes(write_block(V4, calls))) == calls


# -------------------------------------------------------------- §4 recovery


def test_unclosed_block_keeps_complete_invokes() -> None:
    text = write_block(V4, [("f", {"a": "1"})])[: -len(V4.block_close())]
    message = both_modes(text)
    assert calls_of(message) == [("f", {"a": "1"})]
    assert kinds(message) == ["missing_block_close"]


def test_missing_parameter_closer_needs_a_declared_property() -> None:
    text = (
        '\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="f">\n'
        '<｜DSML｜parameter name="a" string="true">x\n'
        '<｜DSML｜parameter name="b" string="true">y</｜DSML｜parameter>\n'
        "</｜DSML｜invoke>\n</｜DSML｜tool_calls>"
    )
    with_tools = both_modes(text, tools=TOOLS)
    assert calls_of(with_tools) == [("f", {"a": "x\n", "b": "y"})]
    assert kinds(with_tools) == ["missing_parameter_close"]
    without = both_modes(text)
    assert calls_of(without) == [("f", {"a": 'x\n<｜DSML｜parameter name="b" string="true">y'})]


def test_missing_invoke_closer_before_next_invoke() -> None:
    text = (
        '\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="f">\n'
        '<｜DSML｜parameter name="a" string="true">x</｜DSML｜parameter>\n'
        '<｜DSML｜invoke name="g">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>'
    )
    message = both_modes(text)
    assert calls_of(message) == [("f", {"a": "x"}), ("g", {})]
    assert kinds(message) == ["missing_invoke_close"]


def test_block_inside_reasoning_ends_reasoning() -> None:
    text = "thinking\n\n" + write_block(V4, [("f", {})]).lstrip("\n")
    message = both_modes(text, start_in="reasoning")
    assert message.reasoning == "thinking"
    assert calls_of(message) == [("f", {})]


def test_missing_block_opener_vllm_48931_shape() -> None:
    text = (
        'x\n\n<｜DSML｜invoke name="f">\n<｜DSML｜parameter name="a" string="true">x'
        "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"
    )
    message = both_modes(text)
    assert message.content == "x"
    assert calls_of(message) == [("f", {"a": "x"})]
    assert kinds(message) == ["stray_closer"]


def test_empty_block_is_dropped_and_a_closer_in_prose_kept() -> None:
    # Until issue 26 the closer was dropped too; quoted in prose it is text (§4).
    message = both_modes(
        "hi\n\n<｜DSML｜tool_calls>\n</｜DSML｜tool_calls> there </｜DSML｜invoke>!"
    )
    assert message.content == "hi there </｜DSML｜invoke>!"
    assert kinds(message) == ["empty_block", "closer_in_text"]
    assert message.finish_reason == "stop"


@pytest.mark.parametrize("cut", [10, 40, 60, 90, 120])
def test_cut_off_inside_a_call_returns_no_call_and_no_markup(cut: int) -> None:
    text = "Answer.\n" + write_block(V4, [("f", {"a": "a long value " * 5})])
    message = both_modes(text[: cut + 10], finish_reason="length")
    assert message.calls == ()
    # The text is "Answer.\n" + "\n\n" + block: the "\n\n" before the opener belongs to
    # the markup (parsing.md §3), so the content's own newline stays, at every cut.
    assert message.content == "Answer.\n"
    assert message.finish_reason == "length"


def test_cut_off_direct_invoke_opener_is_not_content() -> None:
    message = both_modes('x\n\n<｜DSML｜invoke name="f">', finish_reason="length")
    assert message.content == "x"
    assert kinds(message) == ["truncated_call"]
    assert message.finish_reason == "length"


def test_wrapped_arguments_are_unwrapped_only_for_declared_properties() -> None:
    def text(inner: str) -> str:
        return (
            '\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="f">\n'
            f'<｜DSML｜parameter name="arguments" string="false">{inner}</｜DSML｜parameter>\n'
            "</｜DSML｜invoke>\n</｜DSML｜tool_calls>"
        )

    unwrapped = both_modes(text('{"a": 1, "b": "x"}'), tools=TOOLS)
    assert calls_of(unwrapped) == [("f", {"a": 1, "b": "x"})]
    assert unwrapped.calls[0].arguments_json == '{"a": 1, "b": "x"}'
    kept = both_modes(text('{"a": 1, "zzz": 2}'), tools=TOOLS)
    assert calls_of(kept) == [("f", {"arguments": {"a": 1, "zzz": 2}})]
    assert calls_of(both_modes(text('{"a": 1}'))) == [("f", {"arguments": {"a": 1}})]


def test_text_after_the_block_is_content_after_the_calls() -> None:
    message = both_modes("Let me check." + write_block(V4, [("f", {})]) + "\nDone.")
    assert message.content == "Let me check.\nDone."
    assert [(d.kind, d.text) for d in message.diagnostics] == [("text_after_block", "")]


# -------------------------------------------------------------- §5 values


def test_string_values_are_exact() -> None:
    value = "  42\n null \t"
    assert calls_of(both_modes(write_block(V4, [("f", {"v": value})]))) == [("f", {"v": value})]


def test_invalid_json_under_string_false_is_kept_as_text() -> None:
    text = write_block(V4, [("f", {})]).replace(
        '"f">\n', '"f">\n<｜DSML｜parameter name="x" string="false">[1, 2,</｜DSML｜parameter>'
    )
    message = both_modes(text)
    assert calls_of(message) == [("f", {"x": "[1, 2,"})]
    assert kinds(message) == ["invalid_json_value"]


def test_duplicate_parameters_first_wins_and_the_later_value_is_recorded() -> None:
    text = (
        '\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="f">\n'
        '<｜DSML｜parameter name="a" string="true">x</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="a" string="true">y</｜DSML｜parameter>\n'
        "</｜DSML｜invoke>\n</｜DSML｜tool_calls>"
    )
    message = both_modes(text)
    assert calls_of(message) == [("f", {"a": "x"})]
    assert message.calls[0].arguments_json == '{"a": "x"}'
    [diagnostic] = message.diagnostics
    assert (diagnostic.kind, diagnostic.text) == ("duplicate_parameter", "y")
    assert "dropped" in diagnostic.message


def test_json_object_body_with_closer_inside_a_string() -> None:
    text = (
        '\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="f">{"a": "</｜DSML｜invoke>", '
        '"b": [1, {"c": "\\"}"}]}</｜DSML｜invoke>\n</｜DSML｜tool_calls>'
    )
    assert calls_of(both_modes(text)) == [("f", {"a": "</｜DSML｜invoke>", "b": [1, {"c": '"}'}]})]


# -------------------------------------------------------------- §6 events


def test_long_string_values_stream_as_they_arrive() -> None:
    parser = Parser("v4")
    parser.feed('\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="w">\n')
    opened = parser.feed('<｜DSML｜parameter name="body" string="true">')
    streamed = "".join(e.text for e in opened if isinstance(e, ArgumentsDelta))
    for _ in range(100):
        events = parser.feed("x" * 1000)
        streamed += "".join(e.text for e in events if isinstance(e, ArgumentsDelta))
    assert streamed == '{"body": "' + "x" * 100_000


def test_call_start_carries_id_and_name_before_arguments() -> None:
    parser = Parser("v4", id_factory=lambda: "call_fixed")
    events = parser.feed(write_block(V4, [("get", {"q": "x"})])) + parser.close()
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    assert starts == [ToolCallStart(0, "call_fixed", "get")]
    assert events.index(starts[0]) < min(
        i for i, e in enumerate(events) if isinstance(e, ArgumentsDelta)
    )
    assert isinstance(events[-1], OutputEnd)


def test_default_ids_are_unique_call_ids() -> None:
    message = parse(write_block(V4, [("a", {}), ("b", {})]), "v4")
    ids = [c.id for c in message.calls]
    assert len(set(ids)) == 2 and all(i.startswith("call_") for i in ids)


# -------------------------------------------------------------- §7 reasoning


def test_think_at_the_start_of_content_opens_reasoning() -> None:
    message = both_modes("<think>hmm</think>answer")
    assert (message.reasoning, message.content) == ("hmm", "answer")


def test_eos_ends_the_output() -> None:
    message = both_modes(f"done{EOS}junk")
    assert message.content == "done"
    assert [(d.kind, d.text) for d in message.diagnostics] == [("text_after_eos", "junk")]


def test_stray_think_close_in_content_is_dropped() -> None:
    message = both_modes("a</think>b")
    assert message.content == "ab"
    assert kinds(message) == ["stray_think_close"]


# -------------------------------------------------------------- misuse raises at once


def test_feeding_after_close_raises() -> None:
    parser = Parser("v4")
    parser.close()
    with pytest.raises(CallerError, match="after close"):
        parser.feed("x")
    with pytest.raises(CallerError, match="twice"):
        parser.close()


def test_bad_options_raise() -> None:
    with pytest.raises(CallerError, match="unknown dialect"):
        Parser("v5")
    with pytest.raises(CallerError, match="start_in"):
        Parser("v4", start_in="thinking")  # type: ignore[arg-type]
    with pytest.raises(CallerError, match="tools\\[0\\]"):
        Parser("v4", tools=["not a tool"])  # type: ignore[list-item]
    with pytest.raises(CallerError, match="takes str"):
        Parser("v4").feed(b"bytes")  # type: ignore[arg-type]


def test_a_parser_that_raised_refuses_further_input() -> None:
    parser = Parser("v4")
    parser.feed("Hello ")
    with pytest.raises(CallerError):
        parser.feed(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(CallerError, match=r"earlier.*make a new Parser"):
        parser.feed("world")
    with pytest.raises(CallerError, match=r"earlier.*make a new Parser"):
        parser.close()


def test_arguments_json_is_valid_json_for_every_call() -> None:
    message = both_modes(write_block(V4, [("f", {"a": 'é\n"', "b": [1, None], "c": 1.5})]))
    assert json.loads(message.calls[0].arguments_json) == {"a": 'é\n"', "b": [1, None], "c": 1.5}


def test_missing_or_odd_string_attribute_means_a_string_value() -> None:
    text = (
        '\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="f">\n'
        '<｜DSML｜parameter name="a">x</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="b" string="invalid">2</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="c" string="false">2</｜DSML｜parameter>\n'
        "</｜DSML｜invoke>\n</｜DSML｜tool_calls>"
    )
    lenient = both_modes(text)
    assert calls_of(lenient) == [("f", {"a": "x", "b": "2", "c": 2})]
    assert kinds(lenient) == ["typo_markup", "typo_markup"]
    strict = both_modes(text, strict=True)
    assert calls_of(strict) == [("f", {"c": 2})]
    assert kinds(strict) == ["stray_text"]


def test_a_state_change_outside_the_transition_table_raises() -> None:
    parser = Parser("v4")
    parser.feed("Hi" + EOS)
    with pytest.raises(InternalError, match="no transition DONE -> TEXT"):
        parser._go(State.TEXT)  # the machine's own check, reached on purpose
