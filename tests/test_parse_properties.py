"""Property tests: generated calls written as DSML in every dialect and spelling.

Streaming equals non-streaming equals the generated message, for random chunkings; argument
fragments add up to the final JSON; marker fragments are never lost.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dsmlkit.dialects import EOS, THINK_CLOSE, THINK_OPEN
from dsmlkit.parse import ArgumentsDelta, Parser, ToolCallEnd
from tests.helpers import (
    ALL_DIALECTS,
    MARKERS,
    counter_ids,
    parse_chunks,
    random_chunks,
    write_block,
    write_invoke,
)

PROPERTY_SETTINGS = settings(
    max_examples=300,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# Pieces that make values hard: markup fragments and closers of every dialect and spelling.
TRICKY = [
    f"{opening}{marker}{name}"
    for marker in MARKERS
    for opening in ("<", "</")
    for name in ("parameter", " parameter", "invoke", " invoke", "tool_calls", " calls", "")
] + [
    "<｜DS",
    "<|DSML",
    "｜DSML｜",
    "<",
    ">",
    "</",
    '"',
    "'",
    "\\",
    "\n",
    "\n\n",
    " ",
    "\t",
    ">",
    '">',
    'name="x"',
    "杭州",
    "é",
    "\u2028",
    "</think>",
    "<think>",
    "{}",
    "[1,",
]

plain_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="｜|", exclude_categories=["Cs"]),
    max_size=30,
)
value_text = st.lists(st.one_of(plain_text, st.sampled_from(TRICKY)), max_size=8).map("".join)
attribute_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters='"\n', exclude_categories=["Cs"]),
    max_size=12,
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | plain_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(plain_text, inner, max_size=3),
    max_leaves=6,
)
arguments = st.dictionaries(attribute_text, st.one_of(value_text, json_values), max_size=4)
calls = st.lists(st.tuples(attribute_text, arguments), min_size=1, max_size=3)


def _closer_pattern() -> re.Pattern[str]:
    markers = "|".join(re.escape(m) for m in MARKERS)
    return re.compile(rf"</(?:{markers}) ?parameter>\s*(?:<|\Z)")


CLOSER_THEN_TAG = _closer_pattern()


def representable(call_list: list[tuple[str, dict[str, Any]]]) -> bool:
    """Values the text format can carry: no parameter closer right before another tag."""
    for _, args in call_list:
        for value in args.values():
            if isinstance(value, str) and (CLOSER_THEN_TAG.search(value) or EOS in value):
                return False
    return True


def safe_prose(text: str) -> bool:
    return THINK_CLOSE not in text and THINK_OPEN not in text and EOS not in text


@pytest.mark.slow
@PROPERTY_SETTINGS
@given(
    dialect=st.sampled_from(ALL_DIALECTS),
    marker=st.sampled_from(MARKERS),
    content=plain_text,
    reasoning=st.none() | plain_text,
    call_list=calls,
    direct=st.booleans(),
    seed=st.integers(0, 2**32),
)
def test_generated_calls_round_trip_in_any_chunking(
    dialect: Any,
    marker: str,
    content: str,
    reasoning: str | None,
    call_list: list[tuple[str, dict[str, Any]]],
    direct: bool,
    seed: int,
) -> None:
    assume(representable(call_list) and safe_prose(content) and safe_prose(reasoning or ""))
    if direct:
        markup = "\n\n" + "\n".join(write_invoke(dialect, n, a, marker) for n, a in call_list)
    else:
        markup = write_block(dialect, call_list, marker)
    prefix = "" if reasoning is None else reasoning + THINK_CLOSE
    text = prefix + content + markup
    start_in = "content" if reasoning is None else "reasoning"
    whole = parse_chunks([text], dialect, start_in=start_in)
    assert whole.content == content
    assert whole.reasoning == (reasoning or "")
    assert [(c.name, c.arguments) for c in whole.calls] == call_list
    assert whole.finish_reason == "tool_calls"
    assert not whole.diagnostics
    rng = random.Random(seed)
    for max_size in (1, 3, 17):
        assert parse_chunks(random_chunks(text, rng, max_size), dialect, start_in=start_in) == whole


@pytest.mark.slow
@PROPERTY_SETTINGS
@given(
    dialect=st.sampled_from(ALL_DIALECTS),
    call_list=calls,
    seed=st.integers(0, 2**32),
)
def test_argument_fragments_add_up_to_the_final_json(
    dialect: Any, call_list: list[tuple[str, dict[str, Any]]], seed: int
) -> None:
    assume(representable(call_list))
    text = write_block(dialect, call_list)
    parser = Parser(dialect, id_factory=counter_ids())
    fragments: dict[int, str] = {}
    ends: dict[int, ToolCallEnd] = {}
    for chunk in random_chunks(text, random.Random(seed), 9):
        for event in parser.feed(chunk):
            if isinstance(event, ArgumentsDelta):
                fragments[event.index] = fragments.get(event.index, "") + event.text
                assert event.text, "no empty fragments"
            elif isinstance(event, ToolCallEnd):
                ends[event.index] = event
        for index, streamed in fragments.items():
            final = ends[index].arguments_json if index in ends else None
            if final is not None:
                assert streamed == final
    for event in parser.close():
        if isinstance(event, ArgumentsDelta):
            fragments[event.index] = fragments.get(event.index, "") + event.text
        elif isinstance(event, ToolCallEnd):
            ends[event.index] = event
    assert sorted(ends) == list(range(len(call_list)))
    for index, end in ends.items():
        assert fragments[index] == end.arguments_json
        assert json.loads(end.arguments_json) == end.arguments == call_list[index][1]


@pytest.mark.slow
@PROPERTY_SETTINGS
@given(
    pieces=st.lists(
        st.one_of(
            plain_text, st.sampled_from(["<｜DS", "<|DSML|inv", "</｜DSML｜ para", "<", "</"])
        ),
        max_size=10,
    ),
    seed=st.integers(0, 2**32),
)
def test_marker_fragments_are_never_lost(pieces: list[str], seed: int) -> None:
    text = "".join(pieces)
    assume(safe_prose(text))
    whole = parse_chunks([text], "v4")
    assert whole.content == text
    assert parse_chunks(random_chunks(text, random.Random(seed), 4), "v4") == whole


@pytest.mark.slow
@PROPERTY_SETTINGS
@given(
    pieces=st.lists(
        st.one_of(plain_text, st.sampled_from([*TRICKY, EOS, '<｜DSML｜invoke name="f">'])),
        max_size=25,
    ),
    dialect=st.sampled_from(ALL_DIALECTS),
    start_in=st.sampled_from(["content", "reasoning"]),
    finish=st.sampled_from([None, "stop", "length"]),
    seed=st.integers(0, 2**32),
)
def test_any_output_parses_the_same_in_any_chunking(
    pieces: list[str], dialect: Any, start_in: Any, finish: str | None, seed: int
) -> None:
    text = "".join(pieces)
    whole = parse_chunks([text], dialect, start_in=start_in, finish_reason=finish)
    chunks = random_chunks(text, random.Random(seed), 5)
    assert parse_chunks(chunks, dialect, start_in=start_in, finish_reason=finish) == whole
    for call in whole.calls:
        assert json.loads(call.arguments_json) == call.arguments
