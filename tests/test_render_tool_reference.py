"""tool_reference parts in tool results (rendering.md §2), in name and schema mode."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dsmlkit.render import render


def _tool(name: str, *, deferred: bool = False, function_level: bool = False) -> dict[str, Any]:
    function: dict[str, Any] = {
        "name": name,
        "description": f"{name} things",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    }
    tool: dict[str, Any] = {"type": "function", "function": function}
    if deferred and function_level:
        function["defer_loading"] = True
    elif deferred:
        tool["defer_loading"] = True
    return tool


def _line(name: str) -> str:
    """The tool's line in the tools section."""
    return json.dumps(_tool(name)["function"], ensure_ascii=False)


TOOLS = [
    _tool("tool_search"),
    _tool("read_file", deferred=True),
    _tool("write_file", deferred=True, function_level=True),
]


def _conversation(result_content: Any) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "Be useful."},
        {"role": "user", "content": "Find a file tool."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "tool_search", "arguments": {"q": "file"}},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": result_content},
    ]


REFS_AND_TEXT = [
    {"type": "text", "text": "Found 2 tools."},
    {"type": "tool_reference", "name": "read_file"},
    {"type": "tool_reference", "tool_name": "write_file"},
]


@pytest.mark.parametrize(
    ("dialect", "opener", "closer"),
    [
        ("v4.1", "<tool_result>", "</tool_result>"),
        ("v4", "<tool_result>", "</tool_result>"),
        ("v3.2", "<result>", "</result>"),
    ],
)
def test_references_render_as_names_first_then_text(dialect: str, opener: str, closer: str) -> None:
    result = render(_conversation(REFS_AND_TEXT), TOOLS, dialect=dialect)

    assert f"{opener}read_file\n\nwrite_file\n\nFound 2 tools.{closer}" in result.prompt
    assert result.notes == ()


@pytest.mark.parametrize("dialect", ["v3.2", "v4", "v4.1"])
def test_name_mode_keeps_every_tool_in_the_system_prompt(dialect: str) -> None:
    prompt = render(_conversation(REFS_AND_TEXT), TOOLS, dialect=dialect).prompt
    tools_section = prompt[: prompt.index("Find a file tool.")]

    for name in ("tool_search", "read_file", "write_file"):
        assert _line(name) in tools_section
    assert "defer_loading" not in prompt


def test_a_single_reference_is_the_whole_result() -> None:
    content = [{"type": "tool_reference", "name": "read_file"}]
    prompt = render(_conversation(content), TOOLS, dialect="v4.1").prompt

    assert "<tool_result>read_file</tool_result>" in prompt


def test_schema_mode_hides_deferred_tools_and_shows_the_referenced_definition() -> None:
    result = render(_conversation(REFS_AND_TEXT), TOOLS, tool_reference="schema")
    tools_section = result.prompt[: result.prompt.index("Find a file tool.")]

    assert _line("tool_search") in tools_section
    assert "read_file" not in tools_section
    assert "write_file" not in tools_section
    expected = f"<tool_result>{_line('read_file')}\n\n{_line('write_file')}\n\nFound 2 tools."
    assert expected in result.prompt


def test_schema_mode_names_a_tool_that_is_already_in_the_system_prompt() -> None:
    content = [{"type": "tool_reference", "name": "tool_search"}]
    prompt = render(_conversation(content), TOOLS, tool_reference="schema").prompt

    assert "<tool_result>tool_search</tool_result>" in prompt


def test_schema_mode_without_visible_tools_has_no_tools_section() -> None:
    deferred_only = [_tool("read_file", deferred=True)]
    prompt = render(
        [{"role": "user", "content": "Hi"}], deferred_only, tool_reference="schema"
    ).prompt

    assert "## Tools" not in prompt


@pytest.mark.parametrize("mode", ["name", "schema"])
def test_unknown_referenced_tool_renders_its_name_and_is_reported(mode: str) -> None:
    content = [{"type": "tool_reference", "name": "no_such_tool"}]
    result = render(_conversation(content), TOOLS, tool_reference=mode)

    assert "<tool_result>no_such_tool</tool_result>" in result.prompt
    assert len(result.notes) == 1
    assert "no_such_tool" in result.notes[0]


def test_reference_names_are_plain_text_pieces() -> None:
    result = render(_conversation(REFS_AND_TEXT), TOOLS)

    text = "<tool_result>read_file\n\nwrite_file\n\nFound 2 tools.</tool_result>"
    assert (text, False) in result.pieces
