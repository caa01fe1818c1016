"""The field's spellings (lenient mode), each recovered with a diagnostic, and for each the
near-miss prose, HTML and XML that must stay text. Strict mode recovers none of them."""

from __future__ import annotations

import pytest

from dsmlkit.dialects import V4
from tests.test_parse_rules import both_modes, calls_of, kinds


def block(
    marker: str,
    *,
    name: str = "tool_calls",
    space: str = "",
    opener_end: str = ">",
    param_close: str | None = None,
) -> str:
    """A two-parameter call written with one spelling throughout."""
    closer = param_close or f"</{marker}{space}parameter>"
    return (
        f'\n\n<{marker}{space}{name}{opener_end}\n<{marker}{space}invoke name="f">\n'
        f'<{marker}{space}parameter name="a" string="true">x{closer}\n'
        f'<{marker}{space}parameter name="b" string="false">2{closer}\n'
        f"</{marker}{space}invoke>\n</{marker}{space}{name}>"
    )


CALL = [("f", {"a": "x", "b": 2})]


def assert_recovered(text: str, dialect: str = "v4", typo: str = "") -> None:
    message = both_modes("Checking." + text, dialect)
    assert message.content == "Checking."
    assert calls_of(message) == CALL
    assert message.finish_reason == "tool_calls"
    assert set(kinds(message)) == {"typo_markup"}
    assert all(typo in d.message for d in message.diagnostics)
    strict = both_modes("Checking." + text, dialect, strict=True)
    assert "typo_markup" not in kinds(strict)
    assert strict.calls == () or strict.content != "Checking."  # the spelling stays text


def assert_text(text: str, dialect: str = "v4", start_in: str = "content") -> None:
    message = both_modes(text, dialect, start_in=start_in)
    assert (message.content if start_in == "content" else message.reasoning) == text
    assert message.calls == ()
    assert message.diagnostics == ()


# ------------------------------------------------- U+2016 bars (GenericAgent#804)


def test_double_vertical_line_marker() -> None:
    assert_recovered(block("‖DSML‖"), typo="'‖DSML‖'")


def test_double_vertical_line_marker_with_v41_spacing() -> None:
    assert_recovered(block("‖DSML‖", name="calls", space=" "), "v4.1", typo="'‖DSML‖'")


def test_double_vertical_line_marker_split_across_deltas() -> None:
    from tests.helpers import parse_chunks

    text = "hello" + block("‖DSML‖")
    split = text.index("‖DS") + 3
    assert parse_chunks([text[:split], text[split:]], "v4") == parse_chunks([text], "v4")
    assert calls_of(parse_chunks([text[:split], text[split:]], "v4")) == CALL


@pytest.mark.parametrize(
    "prose",
    [
        "the norm ‖x‖ < ‖y‖ holds",
        "some models write <‖DSML‖ instead of the real marker",
        "a lone <‖DSML‖tool_calls> in prose is not a call",
        '<‖DSML‖invoke name="f"> quoted, then more prose',
        "<‖‖‖DSML‖ has three bars",
    ],
)
def test_double_vertical_line_near_misses_stay_text(prose: str) -> None:
    assert_text(prose)
    assert_text(prose, "v4.1", start_in="reasoning")


# ------------------------------------------------- spaced ASCII bars (flocks#687)


@pytest.mark.parametrize("marker", [" | DSML | ", "| DSML |", " |DSML| ", "|DSML | "])
def test_ascii_bars_with_spaces(marker: str) -> None:
    assert_recovered(block(marker), typo="marker spelled")


@pytest.mark.parametrize(
    "prose",
    [
        "cat a | grep DSML | wc -l < in.txt",
        "if a < | b | then",
        "x < | DSML | y is not a tag",
        "a <| DSML |b",
        "<   | DSML | tool_calls> has too many spaces",
        "<html><body>| DSML |</body></html>",
        "< | DSML | tool_calls> alone in prose",
    ],
)
def test_spaced_bar_near_misses_stay_text(prose: str) -> None:
    assert_text(prose)


# ------------------------------------------------- block names seen in the field


@pytest.mark.parametrize("name", ["tool_use", "tool_call", "function_call"])
def test_block_names_seen_in_the_field(name: str) -> None:
    assert_recovered(block("｜DSML｜", name=name), typo=f"'{name}'")


@pytest.mark.parametrize(
    "prose",
    [
        '<tool_use>\n<invoke name="f">\n</invoke>\n</tool_use>',
        "Claude's <｜DSML｜tool_use> blocks are mentioned here",
        "<｜DSML｜tool_user> is not a block",
        '<tool_use id="x">{"a": 1}</tool_use>',
    ],
)
def test_block_name_near_misses_stay_text(prose: str) -> None:
    message = both_modes(prose)
    assert message.content == prose
    assert message.calls == ()


# ------------------------------------------------- a block opener missing its '>'


@pytest.mark.parametrize(
    ("marker", "opener_end"), [("｜DSML｜", ""), ("|DSML|", "|"), ("｜DSML｜", " ")]
)
def test_block_opener_without_its_angle_bracket(marker: str, opener_end: str) -> None:
    assert_recovered(block(marker, opener_end=opener_end), typo="without '>'")


@pytest.mark.parametrize(
    "prose",
    [
        "write <｜DSML｜tool_calls then a newline",
        "<｜DSML｜tool_calls <b>bold</b>",
        "<｜DSML｜tool_calls\n<p>an HTML paragraph</p>",
        "ends with <｜DSML｜tool_calls",
        "<｜DSML｜tool_calls|",
    ],
)
def test_block_opener_without_angle_bracket_near_misses_stay_text(prose: str) -> None:
    assert_text(prose)
    assert_text(prose, start_in="reasoning")


# ------------------------------------------------- plain </parameter> closers (OmniRoute#13930)


def test_plain_parameter_closers_followed_by_dsml_tags() -> None:
    assert_recovered(block("｜DSML｜", param_close="</parameter>"), typo="plain '</parameter>'")


def test_plain_parameter_closer_in_v41_and_ascii() -> None:
    text = block("|DSML|", name="calls", space=" ", param_close="</parameter>")
    assert_recovered(text, "v4.1", typo="plain '</parameter>'")


@pytest.mark.parametrize(
    "value",
    [
        "<config></parameter> more text",  # B07: a value quoting a plain closer
        '<parameter name="x">v</parameter>\n<parameter name="y">w</parameter>',
        "</parameter>\n<parameter>",
        "x</parameter>",
        "</parameter>\n</invoke>",
    ],
)
def test_plain_parameter_closer_inside_a_value_stays_in_the_value(value: str) -> None:
    text = (
        f"\n\n{V4.block_open()}\n{V4.invoke_open('w')}\n{V4.parameter_open('body', True)}"
        f"{value}{V4.parameter_close()}\n{V4.parameter_open('n', False)}1"
        f"{V4.parameter_close()}\n{V4.invoke_close()}\n{V4.block_close()}"
    )
    message = both_modes(text)
    assert calls_of(message) == [("w", {"body": value, "n": 1})]
    assert message.diagnostics == ()


@pytest.mark.parametrize(
    "prose",
    [
        '<parameter name="x">v</parameter> in an XML example',
        "</parameter>\n<｜DSML｜parameter is text outside a call",
        "<param>a</param></parameter>",
    ],
)
def test_plain_parameter_closer_in_content_stays_text(prose: str) -> None:
    assert_text(prose)
