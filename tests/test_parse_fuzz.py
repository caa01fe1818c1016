"""Fuzzing the parser over DSML-like outputs (every dialect and spelling, strict and lenient,
reasoning or content start, stop/length, with and without tools).

Each example must pass :func:`tests.parse_checks.check_output`: no exception, the same event
stream under every chunking (whole, split where hypothesis says, one character at a time),
the event-order rules, strict arguments JSON, and no lost character.

The default run is derandomized with a fixed budget (about a minute on two cores). For a
longer, random run::

    DSMLKIT_FUZZ_EXAMPLES=20000 python3 -m pytest -q tests/test_parse_fuzz.py

Every failure the fuzzer ever found is a vector in ``tests/data/parse_regressions.json``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsmlkit.dialects import ASCII_MARKER, DIALECTS, EOS, MARKER, THINK_CLOSE, THINK_OPEN
from dsmlkit.parse import Diagnostic, ToolCallEnd
from tests.parse_checks import check_output, split_at

_LONG_RUN = "DSMLKIT_FUZZ_EXAMPLES" in os.environ
FUZZ = settings(
    max_examples=int(os.environ.get("DSMLKIT_FUZZ_EXAMPLES", "2000")),
    derandomize=not _LONG_RUN,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TOOLS = [
    {"type": "function", "function": {"name": "f", "parameters": {"properties": {"a": {}}}}},
    {"name": "ns::g", "input_schema": {"properties": {"a": {}, "b": {}}}},
]
MARKERS = [MARKER, ASCII_MARKER, "｜｜DSML｜｜", "‖DSML‖", " | DSML | ", "|DSML"]
NAMES = ["f", "ns::g", "", "a b"]
PARAMS = ["a", "b", "arguments", "input", ""]

payload_text = st.text(alphabet="qwxyzQWXYZ杭州é \n\t<>/\"'=|｜‖{}[],:\\", max_size=12)
json_text = st.one_of(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-(10**20), 10**20)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(alphabet='qwxyz杭é "\\<>/', max_size=6),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(st.text(alphabet="qwxyz", max_size=2), inner, max_size=3)
        ),
        max_leaves=5,
    ).map(lambda v: json.dumps(v, ensure_ascii=False)),
    st.sampled_from(
        [
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
    ),
)


@st.composite
def tag(draw: st.DrawFn) -> str:
    """One DSML tag in some dialect's spelling, well formed or as the field misspells it."""
    dialect = draw(st.sampled_from(list(DIALECTS.values())))
    marker = draw(st.sampled_from(MARKERS))
    kind = draw(st.sampled_from(["block", "invoke", "parameter", "plain_close"]))
    closing = draw(st.booleans())
    if kind == "plain_close":
        return "</parameter>"
    spelled = {
        "block": draw(st.sampled_from([dialect.block, "tool_use", "toolcalls", " calls"])),
        "invoke": dialect.invoke,
        "parameter": dialect.parameter,
    }[kind]
    if closing:
        if draw(st.booleans()):
            spelled = spelled[: draw(st.integers(3, len(spelled)))]  # truncated closer
        return f"</{marker}{spelled}>"
    end = draw(st.sampled_from([">", ">", ">", "", "|", " " * 600 + ">"]))
    if kind == "block":
        return f"<{marker}{spelled}{end}"
    name = draw(st.sampled_from(NAMES)) if kind == "invoke" else draw(st.sampled_from(PARAMS))
    if draw(st.integers(0, 20)) == 0:
        name = "x" * 600
    attributes = f' name="{name}"'
    if kind == "parameter":
        attributes += draw(
            st.sampled_from([' string="true"', ' string="false"', "", ' string="invalid"'])
        )
    return f"<{marker}{spelled}{attributes}{end}"


@st.composite
def call_block(draw: st.DrawFn) -> str:
    """A mostly well-formed block or direct invoke, with junk where hypothesis puts it."""
    dialect = draw(st.sampled_from(list(DIALECTS.values())))
    marker = draw(st.sampled_from(MARKERS[:4]))
    invokes = []
    for _ in range(draw(st.integers(1, 3))):
        params = []
        if draw(st.integers(0, 4)) == 0:
            params.append(draw(json_text))  # a JSON body
        for _ in range(draw(st.integers(0, 3))):
            is_string = draw(st.booleans())
            value = draw(payload_text if is_string else json_text)
            if draw(st.integers(0, 5)) == 0:
                value += draw(tag())
            params.append(
                dialect.parameter_open(draw(st.sampled_from(PARAMS)), is_string, marker)
                + value
                + draw(st.sampled_from([dialect.parameter_close(marker), "</parameter>"]))
            )
        opener = dialect.invoke_open(draw(st.sampled_from(NAMES)), marker)
        closer = draw(st.sampled_from([dialect.invoke_close(marker), ""]))
        invokes.append(f"{opener}\n" + "\n".join(params) + f"\n{closer}")
    body = "\n".join(invokes)
    if draw(st.booleans()):
        return "\n\n" + body  # direct invokes
    closer = draw(st.sampled_from([dialect.block_close(marker), ""]))
    return f"\n\n{dialect.block_open(marker)}\n{body}\n{closer}"


piece = st.one_of(
    payload_text,
    tag(),
    call_block(),
    json_text,
    st.sampled_from([EOS, THINK_OPEN, THINK_CLOSE, "\n\n", "<", "</", "<｜DS", " " * 520]),
)
output = st.lists(piece, max_size=12).map("".join)
options = st.fixed_dictionaries(
    {
        "dialect": st.sampled_from(list(DIALECTS)),
        "strict": st.booleans(),
        "start_in": st.sampled_from(["content", "reasoning"]),
        "finish_reason": st.sampled_from([None, "stop", "length"]),
        "tools": st.sampled_from([None, TOOLS]),
    }
)


@FUZZ
@given(text=output, opts=options, points=st.lists(st.integers(0, 10**6), max_size=6))
def test_fuzzed_outputs_pass_every_check(
    text: str, opts: dict[str, Any], points: list[int]
) -> None:
    chunkings = [split_at(text, points)]
    if len(text) <= 1500:
        chunkings.append(list(text))
    check_output(text, chunkings, **opts)


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
