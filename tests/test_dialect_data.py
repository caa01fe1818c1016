"""A dialect is one value: a new one renders and parses with no code change."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

import dsmlkit
from dsmlkit.dialects import DIALECTS, MARKER, V3_2, V4_1, Dialect
from dsmlkit.parse import Parser, parse
from dsmlkit.render import render

#: A made-up V4.2: V4.1's layout and texts with other tag names.
V4_2 = dataclasses.replace(V4_1, name="v4.2", block="actions", invoke="act", parameter="arg")

TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "parameters": {"properties": {"city": {}}}},
    }
]
HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "18C"},
]
CALL = (
    f'<{MARKER}actions>\n<{MARKER}act name="get_weather">\n'
    f'<{MARKER}arg name="city" string="true">Tokyo</{MARKER}arg>\n'
    f"</{MARKER}act>\n</{MARKER}actions>"
)


def test_a_custom_dialect_renders_its_own_spelling() -> None:
    prompt = render(HISTORY, TOOLS, dialect=V4_2).prompt
    assert f'<{MARKER}actions>\n<{MARKER}act name="get_weather">' in prompt
    assert f'<{MARKER}arg name="city" string="true">Paris</{MARKER}arg>' in prompt
    assert f'"<{MARKER}actions>" block' in prompt  # the tools section names the new tags
    assert "calls>" not in prompt
    spelled_as_v41 = render(HISTORY, TOOLS, dialect="v4.1").prompt
    assert (
        prompt.replace("actions>", " calls>")
        .replace("act ", " invoke ")
        .replace("act>", " invoke>")
        .replace("arg ", " parameter ")
        .replace("arg>", " parameter>")
        == spelled_as_v41
    )


@pytest.mark.parametrize("strict", [False, True])
def test_a_custom_dialect_parses_its_own_spelling(strict: bool) -> None:
    parsed = parse("Sure." + CALL, V4_2, strict=strict, tools=TOOLS)
    assert [(call.name, call.arguments) for call in parsed.calls] == [
        ("get_weather", {"city": "Tokyo"})
    ]
    assert parsed.content == "Sure."
    assert Parser(V4_2).dialect is V4_2


def test_the_renderer_reads_only_dialect_data() -> None:
    plain_v32 = dataclasses.replace(V3_2, name="v3.2-copy")
    assert (
        render(HISTORY, TOOLS, dialect=plain_v32).prompt
        == render(HISTORY, TOOLS, dialect="v3.2").prompt
    )
    no_effort = dataclasses.replace(V4_1, name="v4.1-no-effort", effort_tables=())
    assert no_effort.effort_table() is None
    assert "Reasoning Effort" not in render(HISTORY, dialect=no_effort).prompt


def test_dialects_are_hashable_values() -> None:
    assert len({*DIALECTS.values(), V4_2}) == 4
    assert isinstance(V4_2, Dialect)


def test_tools_sections_are_filled_in_with_the_value() -> None:
    custom = dataclasses.replace(V4_1, name="custom", block=" blocks")
    for variant, template in custom.tools_sections:
        filled = template.format(
            dsml=MARKER,
            block=" blocks",
            invoke=V4_1.invoke,
            parameter=V4_1.parameter,
            think_open="<think>",
            think_close="</think>",
        )
        assert custom.tools_section(variant) == filled
    assert custom.tools_section() == custom.tools_section(custom.tools_sections[0][0])
    same = dataclasses.replace(V4_1)
    assert same == V4_1 and hash(same) == hash(V4_1)


def test_the_core_keeps_no_module_level_caches() -> None:
    core = Path(dsmlkit.__file__).parent
    for package in ("dialects.py", "fields.py", "errors.py", "parse", "render", "api", "grammar"):
        for module in (
            [core / package] if package.endswith(".py") else (core / package).rglob("*.py")
        ):
            text = module.read_text(encoding="utf-8")
            for cache in ("lru_cache", "functools.cache"):
                assert cache not in text, f"{module.relative_to(core)} uses {cache}"
