"""``dsmlkit.grammar`` and ``dsmlkit grammar`` without xgrammar: shapes, caller errors, the CLI
contract. (Matching is tested with xgrammar in test_grammar_xgrammar.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dsmlkit.dialects import V4, V4_1
from dsmlkit.errors import CallerError
from dsmlkit.grammar import ebnf, structural_tag
from dsmlkit.grammar.dsml import WHITESPACE

WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
    },
}
TOOLS = [{"type": "function", "function": WEATHER}]


def _rule(grammar: str, name: str) -> str:
    (line,) = [line for line in grammar.splitlines() if line.startswith(f"{name} ::= ")]
    return line


def test_markup_is_the_dialects_exact_spelling() -> None:
    grammar = ebnf("v4.1", TOOLS)
    assert _rule(grammar, "block") == (
        'block ::= "\\n\\n<｜DSML｜ calls>\\n" tool0 ("\\n" tool0)* "\\n</｜DSML｜ calls>"'
    )
    assert '"<｜DSML｜ invoke name=\\"get_weather\\">\\n"' in _rule(grammar, "tool0")
    assert '"<｜DSML｜ parameter name=\\"city\\" string=\\"true\\">" value0' in grammar
    assert '"<｜DSML｜ parameter name=\\"days\\" string=\\"false\\">" json_integer' in grammar
    v4 = ebnf(V4, TOOLS)
    assert "<｜DSML｜tool_calls>" in v4 and "<｜DSML｜ calls>" not in v4
    assert "<｜DSML｜function_calls>" in ebnf("v3.2", TOOLS)


@pytest.mark.parametrize(
    ("options", "root"),
    [
        ({}, "root ::= text block?"),
        ({"tool_choice": "required"}, "root ::= text block"),
        ({"tool_choice": "get_weather"}, "root ::= text block"),
        ({"tool_choice": "none"}, "root ::= text"),
        ({"thinking": True}, 'root ::= text "</think>" text block?'),
    ],
)
def test_tool_choice_and_thinking_shape_the_root(options: dict[str, Any], root: str) -> None:
    assert ebnf("v4.1", TOOLS, **options).splitlines()[0] == root


def test_parallel_and_named_calls_allow_one_invoke() -> None:
    for options in ({"parallel": False}, {"tool_choice": "get_weather"}):
        block = _rule(ebnf("v4.1", TOOLS, **options), "block")
        assert block == 'block ::= "\\n\\n<｜DSML｜ calls>\\n" tool0 "\\n</｜DSML｜ calls>"'


def test_no_tools_means_text_only() -> None:
    assert ebnf("v4", []) == ebnf("v4", TOOLS, tool_choice="none")
    assert "block" not in ebnf("v4", [])


def test_tool_shapes_and_dialect_objects_agree() -> None:
    bare = ebnf(V4_1, [WEATHER])
    assert bare == ebnf("v4.1", TOOLS) == ebnf("V41", TOOLS)
    anthropic = {"name": "get_weather", "input_schema": WEATHER["parameters"]}
    assert ebnf("v4.1", [anthropic]) == bare


def test_structural_tag_wraps_the_ebnf() -> None:
    tag = structural_tag("v4.1", TOOLS, tool_choice="required", thinking=True, parallel=False)
    assert json.loads(json.dumps(tag)) == tag
    assert tag == {
        "type": "structural_tag",
        "format": {
            "type": "grammar",
            "grammar": ebnf("v4.1", TOOLS, tool_choice="required", thinking=True, parallel=False),
        },
    }


def _tool(parameters: Any) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": "f", "parameters": parameters}}]


@pytest.mark.parametrize(
    ("dialect", "tools", "options", "message"),
    [
        ("v5", TOOLS, {}, "unknown dialect 'v5'; use one of"),
        ("v4", TOOLS, {"tool_choice": "get_time"}, "names no declared tool; use 'auto'"),
        ("v4", [], {"tool_choice": "required"}, "needs at least one tool"),
        ("v4", TOOLS, {"tool_choice": {"type": "function"}}, "tool_choice must be"),
        ("v4", {"name": "f"}, {}, "tools must be a list"),
        ("v4", ["f"], {}, "tools[0] must be an object"),
        ("v4", [{"type": "web_search"}], {}, "only function tools"),
        ("v4", [{"name": 'a"b'}], {}, 'without " or newline'),
        ("v4", [WEATHER, WEATHER], {}, "declared twice"),
        ("v4", _tool({"type": "array"}), {}, "must have type 'object'"),
        ("v4", _tool({"properties": []}), {}, "properties must be an object"),
        ("v4", _tool({"properties": {}, "required": ["x"]}), {}, "is not in properties"),
        ("v4", _tool({"properties": {'a"': {}}}), {}, "may not hold"),
        ("v4", _tool({"properties": {"x": {"type": "text"}}}), {}, "unknown type 'text'"),
        ("v4", _tool({"properties": {"x": {"enum": []}}}), {}, "enum must be a non-empty"),
        ("v4", _tool({"properties": {"x": False}}), {}, "admits no value"),
        ("v4", _tool({"properties": {"x": {"$ref": "#/$defs/y"}}}), {}, "points at nothing"),
        ("v4", _tool({"properties": {"x": {"$ref": "other.json"}}}), {}, "only local"),
        (
            "v4",
            _tool(
                {"properties": {"x": {"$ref": "#/$defs/a"}}, "$defs": {"a": {"$ref": "#/$defs/a"}}}
            ),
            {},
            "refers to itself",
        ),
        ("v4", _tool({"properties": {"x": 3}}), {}, "a schema must be an object"),
    ],
)
def test_caller_mistakes_say_what_to_do(
    dialect: str, tools: Any, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(CallerError) as caught:
        ebnf(dialect, tools, **options)
    assert message in str(caught.value)


def test_whitespace_is_what_the_parser_skips() -> None:
    assert frozenset(c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace()) == WHITESPACE


@pytest.mark.slow
def test_the_core_imports_only_the_standard_library() -> None:
    code = (
        "import json, sys; before = set(sys.modules); import dsmlkit.grammar; "
        "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
        "print(json.dumps(sorted(new - set(sys.stdlib_module_names))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    assert json.loads(done.stdout) == ["dsmlkit"]


# --------------------------------------------------------------------------- the CLI


def run_cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "dsmlkit", "grammar", *args],
        input=stdin.encode("utf-8"),
        capture_output=True,
        check=False,
    )


@pytest.fixture
def tools_file(tmp_path: Path) -> str:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(TOOLS), "utf-8")
    return str(path)


@pytest.mark.slow
def test_cli_prints_the_structural_tag_and_the_ebnf(tools_file: str) -> None:
    args = ["--dialect", "v4.1", "--tools", tools_file, "--tool-choice", "get_weather"]
    done = run_cli(*args, "--thinking", "--no-parallel", "--format", "xgrammar")
    assert done.returncode == 0, done.stderr
    expected = structural_tag(
        "v4.1", TOOLS, tool_choice="get_weather", thinking=True, parallel=False
    )
    assert json.loads(done.stdout) == expected
    done = run_cli(*args, "--format", "ebnf")
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode("utf-8") == ebnf("v4.1", TOOLS, tool_choice="get_weather")


@pytest.mark.slow
def test_cli_reads_a_tools_object_from_stdin() -> None:
    done = run_cli(
        "--dialect", "v4", "--tools", "-", "--format", "ebnf", stdin=json.dumps({"tools": TOOLS})
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode("utf-8") == ebnf("v4", TOOLS)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tool-choice", "get_time", "--format", "ebnf"], "names no declared tool"),
        (["--tool-choice", "required"], "required: --format"),
        (["--format", "lark"], "invalid choice: 'lark'"),
    ],
)
def test_cli_usage_errors_are_one_line_and_exit_2(
    tools_file: str, args: list[str], message: str
) -> None:
    done = run_cli("--dialect", "v4.1", "--tools", tools_file, *args)
    assert done.returncode == 2
    assert done.stdout == b""
    lines = done.stderr.decode("utf-8").splitlines()
    assert len(lines) == 1 and lines[0].startswith("dsmlkit grammar: "), lines
    assert message in lines[0]


@pytest.mark.slow
def test_cli_rejects_a_tools_file_that_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "tools.json"
    path.write_text("[{", "utf-8")
    done = run_cli("--dialect", "v4", "--tools", str(path), "--format", "ebnf")
    assert done.returncode == 3
    assert f"{path} is not valid JSON" in done.stderr.decode("utf-8")
