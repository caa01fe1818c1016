"""The DSML grammars compiled by xgrammar and matched against model outputs, character by
character (xgrammar's GrammarMatcher on the raw string; no tokenizer).

Skipped without xgrammar (it needs torch and transformers, so it is not in ``[dev]``):
install it with ``pip install xgrammar`` beside a CPU torch to run these.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsmlkit.dialects import DIALECTS, EOS, get_dialect
from dsmlkit.grammar import ebnf, structural_tag
from dsmlkit.parse import parse
from tests.helpers import write_block

xgr = pytest.importorskip("xgrammar")

VECTORS = json.loads((Path(__file__).parent / "data" / "parse.json").read_text("utf-8"))["vectors"]

#: Parse vectors that are not the format the grammar writes, each with why it is rejected.
OFF_FORMAT = {
    "v32-invalid-json-string-false": 'a string value written under string="false"',
    "v4-invalid-json-string-false": 'a string value written under string="false"',
    "v4-compact-spaces-no-separator": "no blank line before the block; spaces between tags",
    "v4-compact-no-whitespace": "no newlines between tags",
    "v4-ascii-legacy-wrapped": "ASCII |DSML| marker",
    "v4-ascii-direct-invokes": "ASCII marker, invokes without a block",
    "v4-direct-invoke-fullwidth": "an invoke without a block",
    "v4-text-after-block-kept": "text after the block",
    "v4-tool-call-inside-reasoning": "a call block inside reasoning (no </think>)",
    "v41-rejects-v4-spelling": "V4 tags in a V4.1 output",
}
WELL_FORMED = [v for v in VECTORS if v["id"] not in OFF_FORMAT]


# --------------------------------------------------------------------------- helpers


@cache
def _compiler() -> Any:
    return xgr.GrammarCompiler(xgr.TokenizerInfo([]), cache_enabled=False)


def _matches(compiled: Any, text: str) -> bool:
    """Does the whole of ``text`` match, ending where the grammar may end?"""
    matcher = xgr.GrammarMatcher(compiled)
    return bool(matcher.accept_string(text)) and bool(matcher.is_completed())


def _compiled(dialect: str, tools: list[dict[str, Any]], **options: Any) -> list[Any]:
    """The grammar compiled from its EBNF and from its structural tag."""
    text = ebnf(dialect, tools, **options)
    tag = structural_tag(dialect, tools, **options)
    assert tag["format"]["grammar"] == text
    return [
        _compiler().compile_grammar(text),
        _compiler().compile_structural_tag(json.dumps(tag)),
    ]


def _accepts(dialect: str, tools: list[dict[str, Any]], text: str, **options: Any) -> bool:
    verdicts = {_matches(compiled, text) for compiled in _compiled(dialect, tools, **options)}
    assert len(verdicts) == 1, "the EBNF and the structural tag disagree"
    return verdicts.pop()


def schema_of(value: Any) -> dict[str, Any]:
    """The narrowest JSON schema a value fits."""
    if isinstance(value, bool):
        return {"type": "boolean"}
    if value is None:
        return {"type": "null"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, float):
        return {"type": "number"}
    if isinstance(value, str):
        return {"type": "string"}
    if isinstance(value, list):
        kinds = {json.dumps(schema_of(v), sort_keys=True): schema_of(v) for v in value}
        if not kinds:
            return {"type": "array"}
        items = list(kinds.values())
        return {"type": "array", "items": items[0] if len(items) == 1 else {"anyOf": items}}
    return {
        "type": "object",
        "properties": {k: schema_of(v) for k, v in value.items()},
        "required": list(value),
        "additionalProperties": False,
    }


def tools_for(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Function tools that the calls fit: every argument seen, required when always there."""
    tools: dict[str, dict[str, Any]] = {}
    for call in calls:
        tool = tools.setdefault(call["name"], {"properties": {}, "required": None})
        for key, value in call["arguments"].items():
            seen = tool["properties"].setdefault(key, schema_of(value))
            if seen != schema_of(value):
                tool["properties"][key] = {"anyOf": [seen, schema_of(value)]}
        keys = list(call["arguments"])
        tool["required"] = (
            keys if tool["required"] is None else [k for k in tool["required"] if k in keys]
        )
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "parameters": {"type": "object", **tool},
            },
        }
        for name, tool in tools.items()
    ]


def _options(vector: dict[str, Any]) -> dict[str, Any]:
    return {"thinking": vector["mode"] == "thinking"}


# --------------------------------------------------------------------------- parse vectors


@pytest.mark.parametrize("vector", WELL_FORMED, ids=[v["id"] for v in WELL_FORMED])
def test_vector_matches(vector: dict[str, Any]) -> None:
    calls = vector["expected"]["calls"]
    tools = tools_for(calls)
    text, dialect, options = vector["text"], vector["version"], _options(vector)
    assert _accepts(dialect, tools, text, **options)
    if not calls:
        assert _accepts(dialect, tools, text, tool_choice="none", **options)
        if tools:
            assert not _accepts(dialect, tools, text, tool_choice="required", **options)
        return
    assert _accepts(dialect, tools, text, tool_choice="required", **options)
    assert not _accepts(dialect, tools, text, tool_choice="none", **options)
    if len(calls) == 1:
        assert _accepts(dialect, tools, text, parallel=False, **options)
        assert _accepts(dialect, tools, text, tool_choice=calls[0]["name"], **options)
    else:
        assert not _accepts(dialect, tools, text, parallel=False, **options)


@pytest.mark.parametrize("vector_id", sorted(OFF_FORMAT))
def test_off_format_vector_is_rejected(vector_id: str) -> None:
    vector = next(v for v in VECTORS if v["id"] == vector_id)
    tools = tools_for(vector["expected"]["calls"])
    assert not _accepts(vector["version"], tools, vector["text"], **_options(vector))


def test_every_dialect_has_well_formed_vectors() -> None:
    counts = {d: sum(v["version"] == d for v in WELL_FORMED) for d in DIALECTS}
    assert all(counts.values()), counts


# --------------------------------------------------------------------------- rejections

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "hourly": {"type": "boolean"},
            },
            "required": ["city"],
        },
    },
}
BASH = {
    "name": "Bash",
    "parameters": {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    },
}
TOOLS = [WEATHER, BASH]


def _output(dialect: str, *calls: tuple[str, dict[str, Any]], content: str = "") -> str:
    return content + write_block(get_dialect(dialect), list(calls))


@pytest.fixture(params=sorted(DIALECTS))
def dialect(request: pytest.FixtureRequest) -> str:
    return request.param  # type: ignore[no-any-return]


def test_well_formed_calls_match(dialect: str) -> None:
    text = _output(
        dialect,
        ("get_weather", {"city": "Oslo", "days": 3, "unit": "celsius", "hourly": False}),
        ("Bash", {"command": "ls -la"}),
        content="Checking.",
    )
    assert _accepts(dialect, TOOLS, text)
    assert _accepts(dialect, TOOLS, text, tool_choice="required")
    assert _accepts(dialect, TOOLS, "Thinking it over.</think>" + text, thinking=True)


@pytest.mark.parametrize(
    ("case", "calls"),
    [
        ("unknown tool", [("get_time", {})]),
        ("unknown parameter", [("get_weather", {"city": "Oslo", "country": "NO"})]),
        ("missing required parameter", [("get_weather", {"days": 3})]),
        ("integer written as a string value", [("get_weather", {"city": "Oslo", "days": "3"})]),
        ("float for an integer", [("get_weather", {"city": "Oslo", "days": 3.5})]),
        ("string for a boolean", [("get_weather", {"city": "Oslo", "hourly": "no"})]),
        ("value outside the enum", [("get_weather", {"city": "Oslo", "unit": "kelvin"})]),
        ("non-string for a string", [("Bash", {"command": 1})]),
        ("parameters out of schema order", [("get_weather", {"days": 3, "city": "Oslo"})]),
    ],
)
def test_wrong_calls_are_rejected(dialect: str, case: str, calls: list[Any]) -> None:
    assert not _accepts(dialect, TOOLS, _output(dialect, *calls)), case


def test_json_string_under_string_false_is_rejected(dialect: str) -> None:
    d = get_dialect(dialect)
    text = _output(dialect, ("Bash", {"command": "ls"})).replace(
        d.parameter_open("command", True) + "ls", d.parameter_open("command", False) + '"ls"'
    )
    assert not _accepts(dialect, TOOLS, text)


def test_text_where_a_call_is_required(dialect: str) -> None:
    assert _accepts(dialect, TOOLS, "I will not call anything.")
    assert not _accepts(dialect, TOOLS, "I will not call anything.", tool_choice="required")
    assert not _accepts(dialect, TOOLS, "No call.", tool_choice="Bash")


def test_parallel_and_named_choice(dialect: str) -> None:
    one = _output(dialect, ("Bash", {"command": "ls"}))
    two = _output(dialect, ("Bash", {"command": "ls"}), ("Bash", {"command": "pwd"}))
    assert _accepts(dialect, TOOLS, two)
    assert not _accepts(dialect, TOOLS, two, parallel=False)
    assert _accepts(dialect, TOOLS, one, parallel=False)
    assert _accepts(dialect, TOOLS, one, tool_choice="Bash")
    assert not _accepts(dialect, TOOLS, two, tool_choice="Bash")
    weather = _output(dialect, ("get_weather", {"city": "Rome"}))
    assert not _accepts(dialect, TOOLS, weather, tool_choice="Bash")
    assert not _accepts(dialect, TOOLS, one, tool_choice="none")


def test_no_text_after_the_block_and_no_markup_in_text(dialect: str) -> None:
    block = _output(dialect, ("Bash", {"command": "ls"}))
    d = get_dialect(dialect)
    assert not _accepts(dialect, TOOLS, block + "\nDone.")
    assert not _accepts(dialect, TOOLS, block + EOS)
    assert not _accepts(dialect, TOOLS, f"Say {d.block_open()} now.")
    assert not _accepts(dialect, TOOLS, f"Say {d.invoke_close()} now.", tool_choice="none")
    assert not _accepts(dialect, TOOLS, "Reasoning without an end", thinking=True)
    assert not _accepts(dialect, TOOLS, f"I'll {d.block_open()}</think>Hi.", thinking=True)
    assert _accepts(dialect, TOOLS, "Use <div> and a < b.</think>Hi <b>.", thinking=True)


def test_other_dialect_spelling_is_rejected() -> None:
    text = _output("v4", ("Bash", {"command": "ls"}))
    assert _accepts("v4", TOOLS, text)
    assert not _accepts("v4.1", TOOLS, text)
    assert not _accepts("v3.2", TOOLS, text)


# --------------------------------------------------------------------------- closers in values


def test_seed_case_closers_inside_values(dialect: str) -> None:
    d = get_dialect(dialect)
    for value in (
        f"tag is {d.parameter_close()} ok",
        f"tag is {d.invoke_close()} and {d.block_close()} ok",
        f"the prefix </｜DSML alone, then {d.parameter_close()}\nok",
        f"ends with {d.parameter_close()}",
    ):
        text = _output(dialect, ("Bash", {"command": value}), ("Bash", {"command": "ls"}))
        assert _accepts(dialect, TOOLS, text), value
        assert [c.arguments["command"] for c in parse(text, dialect).calls] == [value, "ls"]


def test_values_the_parser_would_cut_are_rejected(dialect: str) -> None:
    d = get_dialect(dialect)
    for value in (
        f"x{d.parameter_close()}\n{d.invoke_close()} more",
        f"x{d.parameter_close()} {d.block_close()}",
        f"x{d.parameter_close()}\n</｜DSML is a closer's start",
        f"x{d.parameter_close()}\n{d.parameter_open('command', True)}y",
        f"x {d.invoke_open('Bash')}",
        "opener text <｜DSML｜ par is not allowed",
        f"x{EOS}",
    ):
        text = _output(dialect, ("Bash", {"command": value}))
        assert not _accepts(dialect, TOOLS, text), value


_PIECES = st.sampled_from(
    [
        "a", " ", "\n", "<", ">", "/", "｜", "|", "DSML", "｜DSML｜", "|DSML|", "</｜DSML｜",
        "<｜DSML｜", " parameter>", "parameter>", " invoke>", "invoke>", " calls>", "tool_calls>",
        "function_calls>", "</｜DSML｜ parameter>", "</｜DSML｜parameter>", "</|DSML|param>",
        "</｜DSML｜ invoke>", "</｜DSML｜invoke>", "</｜DSML｜ calls>", "</｜DSML｜tool_calls>",
        ' name="command" string="true">', "<think>", "</think>", "\u3000", "\t",
    ]
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(pieces=st.lists(_PIECES, max_size=8), dialect=st.sampled_from(sorted(DIALECTS)))
def test_what_the_grammar_allows_parses_back(pieces: list[str], dialect: str) -> None:
    """Soundness: a value or content the grammar accepts is read back unchanged."""
    text = "".join(pieces)
    call = _output(dialect, ("Bash", {"command": text}), ("Bash", {"command": "ls"}))
    compiled = _compiled_once(dialect)
    if _matches(compiled, call):
        message = parse(call, dialect, tools=TOOLS)
        assert [c.arguments for c in message.calls] == [{"command": text}, {"command": "ls"}]
    if _matches(compiled, text):
        message = parse(text, dialect, tools=TOOLS)
        assert (message.content, message.calls) == (text, ())


@cache
def _compiled_once(dialect: str) -> Any:
    return _compiler().compile_grammar(ebnf(dialect, TOOLS))


# --------------------------------------------------------------------------- schemas


def _one_param_tool(schema: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": "f", "parameters": {"type": "object", "properties": {"x": schema}}}]


@pytest.mark.parametrize(
    ("schema", "good", "bad"),
    [
        ({"type": ["integer", "null"]}, [3, None], ["3", 1.5]),
        ({"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "integer"}}]},
         ["s", [1, 2], []], [[1.5], {"a": 1}]),
        ({"enum": ["a", 1, None]}, ["a", 1, None], ["b", 2]),
        ({"const": {"k": [1]}}, [{"k": [1]}], [{"k": [2]}]),
        ({}, ["text", 1, [None], {"a": {"b": True}}], []),
        ({"type": "array", "minItems": 1, "maxItems": 2}, [[1], ["a", {}]], [[], [1, 2, 3]]),
        ({"type": "array", "prefixItems": [{"type": "string"}], "items": False},
         [["a"], []], [["a", "b"], [1]]),
        ({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
         [{"a": 1}], [{}, {"a": 1, "b": 2}, {"a": "1"}]),
        ({"type": "object", "additionalProperties": {"type": "boolean"}},
         [{}, {"p": True, "q": False}], [{"p": 1}]),
        ({"$ref": "#/$defs/node"}, [{"next": {"next": None}}, {"next": None}], [{"next": 1}]),
        ({"type": "number"}, [0, -2, 3.25, 1e-05], ["1"]),
    ],
)  # fmt: skip
def test_schema_values(schema: dict[str, Any], good: list[Any], bad: list[Any]) -> None:
    tools = _one_param_tool(schema)
    tools[0]["parameters"]["$defs"] = {
        "node": {
            "type": "object",
            "properties": {"next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
            "required": ["next"],
        }
    }
    compiled = _compiler().compile_grammar(ebnf("v4.1", tools))
    for value, expected in [(v, True) for v in good] + [(v, False) for v in bad]:
        text = _output("v4.1", ("f", {"x": value}))
        assert _matches(compiled, text) is expected, value


def test_json_layout() -> None:
    """json.dumps's layout, with or without the spaces; no other whitespace."""
    compiled = _compiler().compile_grammar(ebnf("v4.1", _one_param_tool({})))
    text = _output("v4.1", ("f", {"x": {"a": [1, 2]}}))
    assert _matches(compiled, text)
    assert _matches(compiled, text.replace(": ", ":").replace(", ", ","))
    assert not _matches(compiled, text.replace(": ", ":  "))
    assert not _matches(compiled, text.replace("{", "{ "))
