"""Round trip (rendering.md §4): the parser reads back the assistant turn the renderer wrote."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from dsmlkit.dialects import DIALECTS, EOS, MARKER
from dsmlkit.parse import parse
from dsmlkit.render import render

QUESTION = {"role": "user", "content": "Go."}

# Prose: unicode, whitespace, angle brackets and quotes, but no special-token text (which
# no text format can carry inside content or reasoning).
_PROSE_CHARS = st.characters(
    codec="utf-8", exclude_categories=["Cs"], exclude_characters="｜▁"
) | st.sampled_from(list("<>\"'/ \n\t="))
_PROSE = st.text(_PROSE_CHARS, max_size=40).filter(lambda text: "think>" not in text)


def _closing_tags(dialect: str) -> list[str]:
    spelling = DIALECTS[dialect]
    return [
        spelling.parameter_close(),
        spelling.invoke_close(),
        spelling.block_close(),
        spelling.parameter_open("k", True),
        spelling.invoke_open("f"),
        spelling.parameter_close("|DSML|"),
        f"<{MARKER}",
        "</think>",
        EOS[:5],
    ]


def _values(dialect: str) -> st.SearchStrategy[Any]:
    fragments = st.sampled_from(_closing_tags(dialect))
    strings = st.lists(_PROSE | fragments, max_size=4).map("".join)
    scalars = (
        strings
        | st.integers(-(10**12), 10**12)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.booleans()
        | st.none()
    )
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
        ),
        max_leaves=6,
    )


_NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.:\-]{0,15}", fullmatch=True)
_KEYS = st.from_regex(r"[A-Za-z_][A-Za-z0-9_ \-]{0,12}", fullmatch=True)


@st.composite
def _assistant_turns(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    dialect = draw(st.sampled_from(sorted(DIALECTS)))
    mode = draw(st.sampled_from(["thinking", "chat"]))
    calls = draw(
        st.lists(
            st.tuples(_NAMES, st.dictionaries(_KEYS, _values(dialect), max_size=4)), max_size=3
        )
    )
    message: dict[str, Any] = {
        "role": "assistant",
        "content": draw(_PROSE),
        "reasoning_content": draw(_PROSE),
        "tool_calls": [
            {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(calls)
        ],
    }
    return dialect, mode, message


def _same(left: Any, right: Any) -> bool:
    """Equal values of equal JSON types (so 1 != 1.0 != True)."""
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(_same(left[k], right[k]) for k in left)
    if isinstance(left, list):
        return len(left) == len(right) and all(map(_same, left, right))
    if isinstance(left, float):
        return math.isclose(left, right, rel_tol=0, abs_tol=0) or left == right
    return bool(left == right)


@pytest.mark.slow
@settings(derandomize=True, max_examples=200, deadline=None)
@given(_assistant_turns())
def test_parser_reads_back_the_rendered_assistant_turn(
    case: tuple[str, str, dict[str, Any]],
) -> None:
    dialect, mode, message = case
    prefix = render([QUESTION], dialect=dialect, mode=mode)
    full = render([QUESTION, message], dialect=dialect, mode=mode, add_generation_prompt=False)
    assume(not full.notes)  # reported: a value the format cannot carry

    assert full.prompt.startswith(prefix.prompt)
    output = full.prompt[len(prefix.prompt) :]
    assert output.endswith(EOS)
    parsed = parse(output[: -len(EOS)], dialect, start_in=prefix.output_starts_in)

    expected_reasoning = message["reasoning_content"] if mode == "thinking" else ""
    assert parsed.reasoning == expected_reasoning
    assert parsed.content == message["content"]
    assert [call.name for call in parsed.calls] == [
        call["function"]["name"] for call in message["tool_calls"]
    ]
    for got, sent in zip(parsed.calls, message["tool_calls"], strict=True):
        assert _same(got.arguments, sent["function"]["arguments"]), (got, sent)
