"""Invariants as properties, with chunk boundaries drawn by hypothesis (so a failure shrinks
to the split): the whole event stream is the same under every chunking, no character is
lost in any dialect or channel, and the parser's own events keep the rules of
``parse/events.py``."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dsmlkit.dialects import THINK_CLOSE
from dsmlkit.parse import ArgumentsDelta, ContentDelta, OutputEnd, ToolCallStart
from tests.helpers import ALL_DIALECTS, MARKERS, write_block, write_invoke
from tests.parse_checks import check_event_order, check_output, split_at
from tests.test_parse_properties import TRICKY, calls, plain_text, representable, safe_prose

INVARIANT_SETTINGS = settings(
    max_examples=250,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
splits = st.lists(st.integers(0, 10**6), max_size=8)
# Near misses of every spelling the lenient grammar accepts: none of them is markup.
NEAR_MISSES = [
    "<‖DSML‖",
    "‖x‖ < ‖y‖",
    "< | DSML | ",
    "a <| DSML |b",
    "<｜DSML｜tool_use> ",
    "<tool_use>",
    "<｜DSML｜tool_calls ",
    "<｜DSML｜tool_calls|",
    "</parameter>",
    '<parameter name="x">',
    "</p>",
    "<div>",
    "x < y > z",
    "<!-- c -->",
    "<?xml?>",
    "<<<",
    "｜｜｜｜",
    "||||",
]


@pytest.mark.slow
@INVARIANT_SETTINGS
@given(
    dialect=st.sampled_from(ALL_DIALECTS),
    marker=st.sampled_from(MARKERS),
    content=plain_text,
    reasoning=st.none() | plain_text,
    call_list=calls,
    direct=st.booleans(),
    points=splits,
)
def test_event_stream_is_identical_under_every_chunking(
    dialect: Any,
    marker: str,
    content: str,
    reasoning: str | None,
    call_list: list[tuple[str, dict[str, Any]]],
    direct: bool,
    points: list[int],
) -> None:
    assume(representable(call_list) and safe_prose(content) and safe_prose(reasoning or ""))
    if direct:
        markup = "\n\n" + "\n".join(write_invoke(dialect, n, a, marker) for n, a in call_list)
    else:
        markup = write_block(dialect, call_list, marker)
    text = ("" if reasoning is None else reasoning + THINK_CLOSE) + content + markup
    start_in = "content" if reasoning is None else "reasoning"
    events = check_output(
        text, [split_at(text, points), list(text)], dialect.name, start_in=start_in
    )
    starts = [e.name for e in events if isinstance(e, ToolCallStart)]
    assert starts == [name for name, _ in call_list]


@pytest.mark.slow
@INVARIANT_SETTINGS
@given(
    pieces=st.lists(st.one_of(plain_text, st.sampled_from(TRICKY + NEAR_MISSES)), max_size=12),
    dialect=st.sampled_from(ALL_DIALECTS),
    start_in=st.sampled_from(["content", "reasoning"]),
    strict=st.booleans(),
    points=splits,
)
def test_no_character_is_lost_in_any_dialect_or_channel(
    pieces: list[str], dialect: Any, start_in: Any, strict: bool, points: list[int]
) -> None:
    text = "".join(pieces)
    assume(safe_prose(text) and "DSML" not in text.replace("<‖DSML‖", ""))
    events = check_output(
        text, [split_at(text, points)], dialect.name, start_in=start_in, strict=strict
    )
    channel = [e for e in events if not isinstance(e, OutputEnd)]
    got = "".join(e.text for e in channel if hasattr(e, "text"))
    assert got == text
    assert all(isinstance(e, ContentDelta) == (start_in == "content") for e in channel)


def test_the_event_order_check_rejects_a_broken_stream() -> None:
    with pytest.raises(AssertionError, match="calls are numbered"):
        check_event_order([ToolCallStart(1, "c", "f"), OutputEnd("stop")])
    with pytest.raises(AssertionError):
        check_event_order([ArgumentsDelta(0, "{}"), OutputEnd("stop")])
    with pytest.raises(AssertionError, match="OutputEnd comes last"):
        check_event_order([OutputEnd("stop"), ContentDelta("x")])
