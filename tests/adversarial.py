"""Adversarial outputs for the linearity checks (tests/test_parse_work.py, bench/bench_parse.py).

Each shape repeats a piece that makes the parser look ahead, hold back or rewind, so that a
parser doing more than a constant amount of work per character shows it as the size grows.
"""

from __future__ import annotations

from collections.abc import Callable

from dsmlkit.dialects import Dialect


def _call(d: Dialect, value: str) -> str:
    return (
        f"\n\n{d.block_open()}\n{d.invoke_open('write')}\n"
        f"{d.parameter_open('content', True)}{value}{d.parameter_close()}\n"
        f"{d.invoke_close()}\n{d.block_close()}"
    )


def _repeat(piece: str, size: int) -> str:
    return piece * max(1, size // len(piece))


def repeated_closing_sequence(d: Dialect, size: int) -> str:
    """A value quoting the whole closing sequence again and again (a file about DSML)."""
    sequence = f"{d.parameter_close()}\n{d.invoke_close()}\n{d.block_close()}\n"
    return _call(d, _repeat("x" + sequence, size))


def closer_then_whitespace(d: Dialect, size: int) -> str:
    """Parameter closers each followed by a long run of whitespace, then text."""
    return _call(d, _repeat(d.parameter_close() + " " * 400 + "y", size))


def closer_then_partial_opener(d: Dialect, size: int) -> str:
    """Parameter closers each followed by a parameter opener that never completes."""
    opener = d.parameter_open("x", True)
    return _call(d, _repeat(f"{d.parameter_close()}\n{opener[: len(opener) // 2]}z ", size))


def closer_then_invoke_closer_text(d: Dialect, size: int) -> str:
    """Parameter closer + invoke closer followed by text (not an end of the invoke)."""
    return _call(d, _repeat(f"{d.parameter_close()}\n{d.invoke_close()} text ", size))


def dense_angle_brackets_value(d: Dialect, size: int) -> str:
    return _call(d, _repeat("<", size))


def dense_angle_brackets_content(d: Dialect, size: int) -> str:
    return _repeat("a<b <", size)


def bar_runs_value(d: Dialect, size: int) -> str:
    return _call(d, _repeat("<" + "｜" * 60 + "|" * 60, size))


def bar_runs_content(d: Dialect, size: int) -> str:
    return _repeat("<" + "｜" * 60 + "<|DSML" + "|" * 60, size)


def far_tags_among_angle_brackets(d: Dialect, size: int) -> str:
    """A tag worth scanning only every few hundred characters of '<' and bars (value)."""
    return _call(d, _repeat("<think>" + "a<b|" * 80, size))


def partial_markers_content(d: Dialect, size: int) -> str:
    return _repeat("<｜DSML｜ <|DSML|" + d.block.strip() + " </｜DS ", size)


def blocks_with_text_between(d: Dialect, size: int) -> str:
    """Block after block, each tentative close decided by the next block's opener."""
    return _repeat(_call(d, "v") + "\n\nthen, " + "t" * 200, size)


def tentative_close_then_mentions(d: Dialect, size: int) -> str:
    """One block, then text mentioning block openers that no invoke opener follows."""
    return _call(d, "v") + _repeat(f" see {d.block_open()} here", size)


def calls_then_long_whitespace(d: Dialect, size: int) -> str:
    """Direct invokes each followed by whitespace held until text shows whose it is."""
    invoke = f"\n\n{d.invoke_open('f')}\n{d.invoke_close()}"
    return _repeat(invoke + " " * 500 + "t", size)


def closers_in_prose(d: Dialect, size: int) -> str:
    """Prose quoting closers, each run held until the text after it arrives."""
    return _repeat(f"see {d.parameter_close()}\n {d.invoke_close()} " + " " * 300 + "t", size)


def one_long_run_of_closers(d: Dialect, size: int) -> str:
    """One run of closers the length of the output, then text: all held, then released."""
    return _repeat(f"{d.invoke_close()}\n{d.block_close()} ", size) + "t"


SHAPES: dict[str, Callable[[Dialect, int], str]] = {
    "repeated closing sequence": repeated_closing_sequence,
    "closer + long whitespace": closer_then_whitespace,
    "closer + partial opener": closer_then_partial_opener,
    "closer + invoke-closer text": closer_then_invoke_closer_text,
    "dense '<' (value)": dense_angle_brackets_value,
    "dense '<' (content)": dense_angle_brackets_content,
    "long bar runs (value)": bar_runs_value,
    "long bar runs (content)": bar_runs_content,
    "partial markers (content)": partial_markers_content,
    "far tags among '<' and bars": far_tags_among_angle_brackets,
    "blocks with text between": blocks_with_text_between,
    "tentative close + mentions": tentative_close_then_mentions,
    "calls + long whitespace": calls_then_long_whitespace,
    "closers in prose": closers_in_prose,
    "one long run of closers": one_long_run_of_closers,
}
