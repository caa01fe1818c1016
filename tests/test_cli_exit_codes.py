"""One exit code per kind of failure, the same in every subcommand (``dsmlkit.cli``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dsmlkit.cli import EXIT_INPUT, EXIT_USAGE

# Every test runs the dsmlkit command in a subprocess.
pytestmark = pytest.mark.slow

#: Each subcommand with the flags it needs besides its input FILE.
COMMANDS = {
    "parse": [],
    "render": ["--dialect", "v4"],
    "convert": ["--from", "openai"],
}
#: What ``grammar`` needs besides ``--tools``.
GRAMMAR = ["--dialect", "v4", "--format", "ebnf"]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dsmlkit", *args],
        input="",
        capture_output=True,
        text=True,
        check=False,
    )


def assert_one_line(done: subprocess.CompletedProcess[str], command: str, named: str) -> None:
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"dsmlkit {command}: ") and named in lines[0]
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_missing_input_file_exits_3_naming_it(command: str, tmp_path: Path) -> None:
    missing = str(tmp_path / "missing-input.json")
    done = run_cli(command, *COMMANDS[command], missing)
    assert done.returncode == EXIT_INPUT
    assert done.stdout == ""
    assert_one_line(done, command, missing)


@pytest.mark.parametrize("command", [*sorted(COMMANDS), "grammar"])
def test_a_bad_flag_exits_2(command: str) -> None:
    needed = [*GRAMMAR, "--tools", "-"] if command == "grammar" else COMMANDS[command]
    done = run_cli(command, *needed, "--no-such-flag")
    assert done.returncode == EXIT_USAGE
    assert "--no-such-flag" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        ("[{", "is not valid JSON: Expecting property name enclosed in double quotes at line 1"),
        ('{"name": "f"}', "must hold a JSON list of tool objects"),
        ("[1, 2]", "must hold a JSON list of tool objects"),
    ],
)
@pytest.mark.parametrize("command", ["parse", "grammar"])
def test_a_bad_tools_file_is_one_line_naming_it(
    command: str, content: str | None, message: str, tmp_path: Path
) -> None:
    path = tmp_path / "tools.json"
    if content is not None:
        path.write_text(content, "utf-8")
    extra = GRAMMAR if command == "grammar" else []
    done = run_cli(command, *extra, "--tools", str(path))
    assert done.returncode == EXIT_INPUT
    assert_one_line(done, command, f"--tools: {path}" if content else str(path))
    assert message in done.stderr


def test_a_tools_object_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "tools.json"
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    path.write_text(json.dumps({"tools": [tool]}), "utf-8")
    done = run_cli("parse", "--tools", str(path))
    assert done.returncode == 0, done.stderr


#: Tool files that are JSON lists of objects but not valid tools (a nameless function).
NAMELESS_TOOLS = [
    [{"type": "function", "function": {"parameters": {"type": "object"}}}],
    [{"description": "no name at all"}],
]


@pytest.mark.parametrize("tools", NAMELESS_TOOLS)
@pytest.mark.parametrize("events", [[], ["--events"]])
def test_parse_with_invalid_tools_exits_3_naming_the_file(
    events: list[str], tools: list[Any], tmp_path: Path
) -> None:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(tools), "utf-8")
    done = run_cli("parse", *events, "--tools", str(path))
    assert done.returncode == EXIT_INPUT, done.stderr
    assert_one_line(done, "parse", f"--tools: {path}: tools[0]")
    assert done.stdout == ""


@pytest.mark.parametrize("tools", NAMELESS_TOOLS)
def test_grammar_with_invalid_tools_exits_3_naming_the_file(
    tools: list[Any], tmp_path: Path
) -> None:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(tools), "utf-8")
    done = run_cli("grammar", *GRAMMAR, "--tools", str(path))
    assert done.returncode == EXIT_INPUT, done.stderr
    assert_one_line(done, "grammar", f"--tools: {path}: tools[0]")


def test_grammar_tool_choice_naming_no_tool_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps([{"name": "f"}]), "utf-8")
    done = run_cli("grammar", *GRAMMAR, "--tools", str(path), "--tool-choice", "g")
    assert done.returncode == EXIT_USAGE
    assert_one_line(done, "grammar", "--tool-choice: tool_choice 'g' names no declared tool")


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"messages": []}, "stdin: model: is required"),
        ("{not json", "stdin is not valid JSON"),
    ],
)
def test_convert_reports_an_invalid_request_on_stderr_too(body: Any, named: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "dsmlkit", "convert", "--from", "openai"],
        input=body if isinstance(body, str) else json.dumps(body),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == EXIT_INPUT
    assert_one_line(done, "convert", named)
    assert json.loads(done.stdout)["error"]["type"] == "invalid_request_error"
