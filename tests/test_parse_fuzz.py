"""Fuzzing the parser over DSML-like outputs (every dialect and spelling, strict and lenient,
reasoning or content start, stop/length, with and without tools).

Each example must pass :func:`tests.parse_checks.check_output`: no exception, the same event
stream under every chunking (whole, split at random points, one character at a time), the
event-order rules, strict arguments JSON, and no lost character.

The outputs come from one generator written against :class:`random.Random`, driven two ways:

* the corpus: ``random.Random(seed)`` for fixed seeds, the same examples on every machine
  and with every package version (:data:`CORPUS_SIZE` per dialect, about a minute on two
  cores);
* hypothesis, derandomized, drawing the same generator's choices (so it can shrink them).

For a longer run of the corpus from a random first seed (printed on failure)::

    DSMLKIT_FUZZ_EXAMPLES=20000 python3 -m pytest -q tests/test_parse_fuzz.py -k corpus

(``DSMLKIT_FUZZ_SEED`` picks the first seed.) Every failure the fuzzer ever found is a
vector in ``tests/data/parse_regressions.json``.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsmlkit.dialects import ASCII_MARKER, DIALECTS, EOS, MARKER, THINK_CLOSE, THINK_OPEN, Dialect
from dsmlkit.parse import Diagnostic, ToolCallEnd
from tests.parse_checks import check_output, split_at

#: Corpus examples per dialect (``DSMLKIT_FUZZ_EXAMPLES`` for a longer run).
CORPUS_SIZE = int(os.environ.get("DSMLKIT_FUZZ_EXAMPLES", "600"))
#: The corpus's first seed: fixed unless a longer run asks for another.
FIRST_SEED = int(
    os.environ.get(
        "DSMLKIT_FUZZ_SEED",
        random.randrange(2**32) if "DSMLKIT_FUZZ_EXAMPLES" in os.environ else 0,
    )
)
BATCHES = 10
TOOLS = [
    {"type": "function", "function": {"name": "f", "parameters": {"properties": {"a": {}}}}},
    {"name": "ns::g", "input_schema": {"properties": {"a": {}, "b": {}}}},
]
MARKERS = [MARKER, ASCII_MARKER, "｜｜DSML｜｜", "‖DSML‖", " | DSML | ", "|DSML"]
NAMES = ["f", "ns::g", "", "a b"]
PARAMS = ["a", "b", "arguments", "input", ""]
PAYLOAD_ALPHABET = "qwxyzQWXYZ杭州é \n\t<>/\"'=|｜‖{}[],:\\"
JSON_SPECIALS = [
    "1e999",
    "-1e999",
    "NaN",
    "Infinity",
    "[" * 200 + "]" * 200,
    "[" * 1000,
    '{"q": 1}{"w": 2}',
    '{"q": 1, "q": 2}',
    '"\\ud800"',
    "[1, 2,",
    "{",
    "}",
    "9" * 5000,
    '{"q": "</｜DSML｜invoke>"}',
]
FLOATS = [0.0, -0.0, 1.5, 1e308, -2.5e-308, 5e-324, 1e16, 0.1]
PIECES = [EOS, THINK_OPEN, THINK_CLOSE, "\n\n", "<", "</", "<｜DS", " " * 520]


def chars(rng: random.Random, alphabet: str, most: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, most)))


def json_value(rng: random.Random, leaves: int = 5) -> Any:
    """A random JSON value with at most about ``leaves`` leaves."""
    kind = rng.randrange(8 if leaves > 1 else 5)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.randint(-(10**20), 10**20)
    if kind == 2:
        return rng.choice([*FLOATS, rng.uniform(-1e6, 1e6)])
    if kind in (3, 4):
        return chars(rng, 'qwxyz杭é "\\<>/', 6)
    if kind in (5, 6):
        size = rng.randint(0, 3)
        return {chars(rng, "qwxyz", 2): json_value(rng, leaves // 2) for _ in range(size)}
    return [json_value(rng, leaves // 2) for _ in range(rng.randint(0, 3))]


def json_text(rng: random.Random) -> str:
    if rng.randrange(5) == 0:
        return rng.choice(JSON_SPECIALS)
    return json.dumps(json_value(rng), ensure_ascii=False)


def json_body(rng: random.Random) -> str:
    """An invoke body: mostly an object (often empty), sometimes anything."""
    choice = rng.randrange(3)
    if choice == 0:
        return "{}"
    if choice == 1:
        size = rng.randint(1, 3)
        value = {rng.choice(PARAMS): json_value(rng, 2) for _ in range(size)}
        return json.dumps(value, ensure_ascii=False)
    return json_text(rng)


def some_dialect(rng: random.Random, dialect: Dialect) -> Dialect:
    """Mostly the parser's own dialect, sometimes another one's spellings."""
    return dialect if rng.randrange(3) else rng.choice(list(DIALECTS.values()))


def tag(rng: random.Random, dialect: Dialect) -> str:
    """One DSML tag in some dialect's spelling, well formed or as the field misspells it."""
    spelling = some_dialect(rng, dialect)
    marker = rng.choice(MARKERS)
    kind = rng.choice(["block", "invoke", "parameter", "plain_close"])
    if kind == "plain_close":
        return "</parameter>"
    spelled = {
        "block": rng.choice([spelling.block, "tool_use", "toolcalls", " calls"]),
        "invoke": spelling.invoke,
        "parameter": spelling.parameter,
    }[kind]
    if rng.randrange(2):  # a closer
        if rng.randrange(2):
            spelled = spelled[: rng.randint(3, max(3, len(spelled)))]  # truncated closer
        return f"</{marker}{spelled}>"
    end = rng.choice([">", ">", ">", "", "|", " " * 600 + ">"])
    if kind == "block":
        return f"<{marker}{spelled}{end}"
    name = rng.choice(NAMES) if kind == "invoke" else rng.choice(PARAMS)
    if rng.randrange(21) == 0:
        name = "x" * 600
    attributes = f' name="{name}"'
    if kind == "parameter":
        attributes += rng.choice([' string="true"', ' string="false"', "", ' string="invalid"'])
    return f"<{marker}{spelled}{attributes}{end}"


def call_block(rng: random.Random, dialect: Dialect) -> str:
    """A mostly well-formed block or direct invoke, with junk in random places."""
    spelling = some_dialect(rng, dialect)
    marker = rng.choice(MARKERS[:4])
    invokes = []
    for _ in range(rng.randint(1, 3)):
        params = []
        if rng.randrange(4) == 0:
            params.append(json_body(rng))
        for _ in range(rng.randint(0, 3)):
            is_string = rng.randrange(2) == 0
            value = chars(rng, PAYLOAD_ALPHABET, 12) if is_string else json_text(rng)
            if rng.randrange(6) == 0:
                value += tag(rng, dialect)
            params.append(
                spelling.parameter_open(rng.choice(PARAMS), is_string, marker)
                + value
                + rng.choice([spelling.parameter_close(marker), "</parameter>"])
            )
        opener = spelling.invoke_open(rng.choice(NAMES), marker)
        closer = rng.choice([spelling.invoke_close(marker), ""])
        invokes.append(f"{opener}\n" + "\n".join(params) + f"\n{closer}")
    body = "\n".join(invokes)
    if rng.randrange(2):
        return "\n\n" + body  # direct invokes
    closer = rng.choice([spelling.block_close(marker), ""])
    return f"\n\n{spelling.block_open(marker)}\n{body}\n{closer}"


def output(rng: random.Random, dialect: Dialect) -> str:
    """Up to 12 pieces: prose, tags, call blocks, JSON and special tokens."""
    pieces = []
    for _ in range(rng.randint(0, 12)):
        kind = rng.randrange(5)
        if kind == 0:
            pieces.append(chars(rng, PAYLOAD_ALPHABET, 12))
        elif kind == 1:
            pieces.append(tag(rng, dialect))
        elif kind == 2:
            pieces.append(call_block(rng, dialect))
        elif kind == 3:
            pieces.append(json_text(rng))
        else:
            pieces.append(rng.choice(PIECES))
    return "".join(pieces)


def check_example(rng: random.Random, dialect: Dialect) -> None:
    """Generate one output with its options and chunkings; check it."""
    text = output(rng, dialect)
    options: dict[str, Any] = {
        "strict": rng.randrange(2) == 0,
        "start_in": rng.choice(["content", "reasoning"]),
        "finish_reason": rng.choice([None, "stop", "length"]),
        "tools": rng.choice([None, TOOLS]),
    }
    points = [rng.randrange(10**6) for _ in range(rng.randint(0, 6))]
    chunkings = [split_at(text, points)]
    if len(text) <= 1500:
        chunkings.append(list(text))
    check_output(text, chunkings, dialect.name, **options)


@pytest.mark.slow
@pytest.mark.parametrize("batch", range(BATCHES))
@pytest.mark.parametrize("dialect", list(DIALECTS))
def test_fuzz_corpus_passes_every_check(dialect: str, batch: int) -> None:
    size = -(-CORPUS_SIZE // BATCHES)
    for seed in range(FIRST_SEED + batch * size, FIRST_SEED + min(CORPUS_SIZE, (batch + 1) * size)):
        try:
            check_example(random.Random(seed), DIALECTS[dialect])
        except AssertionError as error:
            raise AssertionError(f"corpus seed {seed} ({dialect}): {error}") from error


@pytest.mark.slow
@settings(
    max_examples=200,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(rng=st.randoms(use_true_random=False), dialect=st.sampled_from(list(DIALECTS.values())))
def test_fuzzed_outputs_pass_every_check(rng: random.Random, dialect: Dialect) -> None:
    check_example(rng, dialect)


REGRESSIONS = json.loads(
    (Path(__file__).parent / "data" / "parse_regressions.json").read_text("utf-8")
)["vectors"]


@pytest.mark.parametrize("vector", REGRESSIONS, ids=[v["id"] for v in REGRESSIONS])
def test_regression_vectors(vector: dict[str, Any]) -> None:
    text = vector["text"]
    opts = vector.get("options", {})
    whole = check_output(text, [list(text), split_at(text, [len(text) // 2])], **opts)
    expected = vector.get("expected")
    if expected is not None:
        calls = [
            {"name": e.name, "arguments": e.arguments} for e in whole if isinstance(e, ToolCallEnd)
        ]
        assert calls == expected["calls"]
        assert [e.kind for e in whole if isinstance(e, Diagnostic)] == expected["diagnostics"]
