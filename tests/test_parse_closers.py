"""DSML closers outside any call (issue 26 item 12; docs/streaming.md, "Closers outside a
call"): quoted in prose they stay in the text verbatim; only a run of closers that ends the
output, or that comes right after a block or direct invoke, is markup and is dropped.

Every case runs through ``tests/parse_checks.check_output``: whole, one character at a time
and split at every position, all giving the same events, with no character lost.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from dsmlkit.dialects import EOS, Dialect
from dsmlkit.parse import ContentDelta, Diagnostic, Event, Parser, ReasoningDelta
from tests.helpers import ALL_DIALECTS, MARKERS, write_block
from tests.parse_checks import check_output

SPELLINGS = [(d, m) for d in ALL_DIALECTS for m in MARKERS]
SPELLING_IDS = [f"{d.name}-{'fullwidth' if m == MARKERS[0] else 'ascii'}" for d, m in SPELLINGS]
KINDS = ("parameter", "invoke", "block")


def closer(dialect: Dialect, kind: str, marker: str) -> str:
    if kind == "parameter":
        return dialect.parameter_close(marker)
    if kind == "invoke":
        return dialect.invoke_close(marker)
    return dialect.block_close(marker)


def every_chunking(text: str) -> list[list[str]]:
    """One character at a time, and split in two at every position."""
    return [list(text)] + [[text[:i], text[i:]] for i in range(1, len(text))]


def outcome(events: Sequence[Event]) -> tuple[str, str, list[str]]:
    """(content, reasoning, diagnostic kinds) of one output's events."""
    content = "".join(e.text for e in events if isinstance(e, ContentDelta))
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    return content, reasoning, [e.kind for e in events if isinstance(e, Diagnostic)]


def checked(text: str, dialect: Dialect, **options: Any) -> tuple[str, str, list[str]]:
    return outcome(check_output(text, every_chunking(text), dialect.name, **options))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("dialect", "marker"), SPELLINGS, ids=SPELLING_IDS)
def test_a_closer_quoted_in_prose_stays_verbatim(dialect: Dialect, marker: str, kind: str) -> None:
    text = f"End a value with {closer(dialect, kind, marker)} and go on."
    assert checked(text, dialect) == (text, "", ["closer_in_text"])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("dialect", "marker"), SPELLINGS, ids=SPELLING_IDS)
def test_a_closer_that_ends_the_output_is_dropped(dialect: Dialect, marker: str, kind: str) -> None:
    text = f"The file has 3 lines.{closer(dialect, kind, marker)}"
    assert checked(text, dialect) == ("The file has 3 lines.", "", ["stray_closer"])


@pytest.mark.parametrize(("dialect", "marker"), SPELLINGS, ids=SPELLING_IDS)
def test_the_trailing_run_of_vllm_56184_is_dropped(dialect: Dialect, marker: str) -> None:
    invoke, block = dialect.invoke_close(marker), dialect.block_close(marker)
    assert checked(f"The file has 3 lines.{invoke}{block}", dialect) == (
        "The file has 3 lines.",
        "",
        ["stray_closer", "stray_closer"],
    )
    # Whitespace between and after the closers is text; EOS ends the output as well.
    text = f"The file has 3 lines.\n{invoke}\n {block}\n{EOS}"
    assert checked(text, dialect) == (
        "The file has 3 lines.\n\n \n",
        "",
        ["stray_closer", "stray_closer"],
    )


@pytest.mark.parametrize(("dialect", "marker"), SPELLINGS, ids=SPELLING_IDS)
def test_a_run_of_closers_in_prose_stays_verbatim(dialect: Dialect, marker: str) -> None:
    run = "\n".join(closer(dialect, kind, marker) for kind in KINDS)
    for text in (
        f"A call ends with\n{run}\nin that order.",
        f"{run} \n\t closes it.",  # at the very start, whitespace before the text
        f"quoted: {run}{run}!",
    ):
        assert checked(text, dialect) == (text, "", ["closer_in_text"])


@pytest.mark.parametrize(("dialect", "marker"), SPELLINGS, ids=SPELLING_IDS)
def test_closers_in_prose_and_a_trailing_run_in_one_output(dialect: Dialect, marker: str) -> None:
    param, invoke = dialect.parameter_close(marker), dialect.invoke_close(marker)
    text = f"Write {param} there. Done.{invoke}\n{param}"
    assert checked(text, dialect) == (
        f"Write {param} there. Done.\n",
        "",
        ["closer_in_text", "stray_closer", "stray_closer"],
    )


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("dialect", "marker"), SPELLINGS, ids=SPELLING_IDS)
def test_closers_right_after_a_block_are_dropped(dialect: Dialect, marker: str, kind: str) -> None:
    block = write_block(dialect, [("f", {"a": "1"})], marker)
    tail = f"{closer(dialect, kind, marker)}\n{dialect.block_close(marker)}"
    assert checked(f"Sure.{block}{tail}\nDone.", dialect) == (
        "Sure.\nDone.",
        "",
        ["stray_closer", "stray_closer", "text_after_block"],
    )
    # A closer in the prose after the block is prose again.
    text = f"{block}\nUse {closer(dialect, kind, marker)} there."
    content, _, kinds = checked(text, dialect)
    assert content == f"\nUse {closer(dialect, kind, marker)} there."
    assert kinds == ["text_after_block", "closer_in_text"]


@pytest.mark.parametrize(("dialect", "marker"), SPELLINGS, ids=SPELLING_IDS)
def test_closers_right_after_a_direct_invoke_or_empty_block_are_dropped(
    dialect: Dialect, marker: str
) -> None:
    direct = write_block(dialect, [("f", {})], marker).split("\n", 3)[3]  # invoke + closers
    assert direct.startswith(dialect.invoke_open("f", marker))
    assert checked(f"ok\n\n{direct}then", dialect)[0] == "okthen"
    empty = f"\n\n{dialect.block_open(marker)}\n{dialect.block_close(marker)}"
    invoke = dialect.invoke_close(marker)
    assert checked(f"ok{empty}{invoke} then", dialect) == (
        "ok then",
        "",
        ["empty_block", "stray_closer"],
    )


@pytest.mark.parametrize(("dialect", "marker"), SPELLINGS, ids=SPELLING_IDS)
def test_closers_in_reasoning_follow_the_same_rule(dialect: Dialect, marker: str) -> None:
    param = dialect.parameter_close(marker)
    text = f"I will write {param} into the file.</think>Done."
    assert checked(text, dialect, start_in="reasoning") == (
        "Done.",
        f"I will write {param} into the file.",
        ["closer_in_text"],
    )
    # Right before </think> the run is not at the end of the output: it is reasoning text.
    text = f"Writing {param}</think>Done."
    assert checked(text, dialect, start_in="reasoning")[1] == f"Writing {param}"
    # The output ends in reasoning with a run: dropped.
    text = f"Still thinking{dialect.invoke_close(marker)}"
    assert checked(text, dialect, start_in="reasoning") == ("", "Still thinking", ["stray_closer"])


def test_a_run_of_closers_is_held_until_text_decides_it() -> None:
    dialect = ALL_DIALECTS[-1]
    param = dialect.parameter_close()
    parser = Parser(dialect)
    assert parser.feed("Use ") == [ContentDelta("Use ")]
    assert parser.feed(param) == []
    assert parser.feed(" \n") == []
    assert parser.feed(dialect.invoke_close()) == []
    events = parser.feed(" here")
    assert outcome(events) == (f"{param} \n{dialect.invoke_close()} here", "", ["closer_in_text"])
    assert "in the content" in next(e for e in events if isinstance(e, Diagnostic)).message


def test_a_long_gap_after_a_closer_makes_it_prose() -> None:
    dialect = ALL_DIALECTS[-1]
    text = "a" + dialect.parameter_close() + " " * 600
    assert checked(text, dialect) == (text, "", ["closer_in_text"])
