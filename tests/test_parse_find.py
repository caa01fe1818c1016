"""``TagScanner.find`` skips only '<' characters that start no tag.

The parser jumps with ``find`` to the next '<' worth scanning, so every '<' where ``scan``
answers anything but None (a tag, or pending) must be found, in every grammar, whether the
search runs left to right over one text (as the parser does, from what it remembers) or
starts anywhere.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dsmlkit.dialects import EOS, THINK_CLOSE, THINK_OPEN, get_dialect
from dsmlkit.parse.scanner import NO_TAG, Grammar, TagScanner
from tests.helpers import ALL_DIALECTS, MARKERS

MARKUP = [
    f"{opening}{space}{marker}{name}"
    for marker in (*MARKERS, "‖DSML‖", "||DSML||", " | DSML | ")
    for opening in ("<", "</")
    for space in ("", " ", "   ")
    for name in ("parameter>", " parameter", "invoke", "tool_calls>", "")
]
OTHERS = [
    "</parameter>",
    "</param",
    THINK_OPEN,
    THINK_CLOSE,
    "<thin",
    "think>",
    "/think>",
    EOS,
    EOS[:5],
    "<",
    "</",
    "< ",
    "<  ",
    "a < b || c | d",
    "<td>",
    "</td>",
    "<t",
    "</p",
    "|",
    "｜",
    "‖",
    " ",
    "\n",
    "x" * 300,  # long enough that find searches far ahead
    '<tr><td class="n">1</td><td><a href="/x">link</a></td></tr>\n' * 5,
]

texts = st.lists(st.sampled_from(MARKUP) | st.sampled_from(OTHERS), max_size=12).map("".join)
SCANNERS = [
    TagScanner(Grammar.for_dialect(get_dialect(name), strict=strict))
    for name in ALL_DIALECTS
    for strict in (False, True)
]


def _tag_starts(scanner: TagScanner, text: str) -> list[int]:
    return [
        i
        for i, char in enumerate(text)
        if char == "<"
        and any(
            scanner.scan(text, i, final, in_value=in_value) is not NO_TAG
            for final in (False, True)
            for in_value in (False, True)
        )
    ]


def _check(text: str, starts: list[int], start: int, found: int) -> None:
    wanted = [i for i in starts if i >= start]
    if found < 0:
        assert not wanted, (text, start)
        return
    assert text[found] == "<"
    assert found >= start
    assert not wanted or found <= wanted[0], (text, start, found, wanted[0])


@pytest.mark.slow
@settings(
    max_examples=400,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(texts, st.lists(st.integers(min_value=0), max_size=6))
@example("<td>" + "x" * 300 + "<thin", [])  # a tag still arriving at the end
@example("<td>" + "x" * 300 + "</param", [])
@example("<td>" + "x" * 300 + "a | b|</｜DSML｜parameter>", [])  # a marker just after a bar
@example("<td>" + "x" * 300 + "<a>think> </think>", [])
@example("<td>" + "x" * 251 + "</｜DSML｜parameter>" + "x" * 300, [])  # across 256 characters
@example("<td>" + "x" * 250 + "</｜DSML｜parameter>" + "x" * 300, [])
def test_find_skips_no_tag_start(text: str, starts_at: list[int]) -> None:
    for scanner in SCANNERS:
        starts = _tag_starts(scanner, text)
        walker = TagScanner(scanner._grammar)  # left to right, as the parser searches
        position = 0
        while position <= len(text):
            found = walker.find(text, position)
            _check(text, starts, position, found)
            if found < 0:
                break
            position = found + 1
        jumper = TagScanner(scanner._grammar)  # anywhere, in any order
        for start in starts_at:
            start %= len(text) + 1
            _check(text, starts, start, jumper.find(text, start))
