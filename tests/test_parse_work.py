"""Linear on every input: the parser's own work counter (characters handed to the state
machine, including text held back and read again, and text ``close()`` reads again) stays
within a constant times the output on every adversarial shape, whole and streamed.

Time growth exponents for the same shapes are printed by ``bench/bench_parse.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dsmlkit.dialects import Dialect, get_dialect
from dsmlkit.parse import Parser
from dsmlkit.parse.parser import MAX_FOLLOWER_GAP
from dsmlkit.parse.scanner import MAX_TAG_LENGTH
from tests.adversarial import SHAPES

#: The most a parser ever holds back: a closer, a gap, a closer, a gap, the deciding tag.
HOLD_BOUND = 3 * MAX_TAG_LENGTH + 2 * MAX_FOLLOWER_GAP
DELTA = 4


def work(text: str, dialect: Dialect, delta: int | None) -> int:
    parser = Parser(dialect)
    if delta is None:
        parser.feed(text)
    else:
        for i in range(0, len(text), delta):
            parser.feed(text[i : i + delta])
    parser.close()
    return parser.work


@pytest.mark.slow
@pytest.mark.parametrize("dialect", ["v4", "v4.1"])
@pytest.mark.parametrize("shape", list(SHAPES.values()), ids=list(SHAPES))
def test_work_is_linear(shape: Callable[[Dialect, int], str], dialect: str) -> None:
    d = get_dialect(dialect)
    for size in (10_000, 40_000):
        text = shape(d, size)
        assert work(text, d, None) <= 2 * len(text)
        assert work(text, d, DELTA) <= (2 + HOLD_BOUND / DELTA) * len(text)
    small, large = shape(d, 10_000), shape(d, 40_000)
    per_char = [work(t, d, DELTA) / len(t) for t in (small, large)]
    assert per_char[1] <= per_char[0] * 1.1 + 0.1  # no growth with the size


def test_repeated_closing_sequences_are_read_again_at_most_once() -> None:
    d = get_dialect("v4.1")
    text = SHAPES["repeated closing sequence"](d, 50_000)
    assert text.count(d.block_close()) > 900
    assert work(text, d, None) <= 2 * len(text)
