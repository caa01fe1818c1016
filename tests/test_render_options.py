"""Render options beyond what the golden files pin down."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dsmlkit.dialects import BOS, EOS
from dsmlkit.render import render

SYSTEM_AND_USER = [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}]
TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
ABSOLUTE = (
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n",
    "to ensure absolutely no assumption is left unchecked.\n\n",
)
BEYOND = (
    "Reasoning Effort: Beyond maximum — exhaustive, relentless, and uncompromising.\n",
    "no assumption remains unchecked and no error remains undiscovered.\n\n",
)
NOTHING = ("", "")


def _budget_line(budget: int) -> str:
    return f"Reasoning Effort: {budget} (range 1-100, the higher the value, the more thorough"


# -- reasoning effort -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "effort", "prefix"),
    [
        (None, None, NOTHING),
        (None, "high", NOTHING),
        (None, "medium", NOTHING),
        (None, "max", ABSOLUTE),
        ("0731", None, NOTHING),
        ("0731", "low", NOTHING),
        ("0731", "high", ABSOLUTE),
        ("0731", "xhigh", ABSOLUTE),
        ("0731", "max", BEYOND),
    ],
)
def test_v4_effort_text_comes_before_the_system_prompt(
    table: str | None, effort: str | None, prefix: tuple[str, str]
) -> None:
    prompt = render(
        SYSTEM_AND_USER, dialect="v4", effort_table=table, reasoning_effort=effort
    ).prompt
    first_line, last_words = prefix
    head, system = prompt.split("S<｜User｜>")
    assert head.startswith(BOS + first_line)
    assert head.endswith(last_words or BOS)
    assert system == "Hi<｜Assistant｜><think>"


@pytest.mark.parametrize(
    ("table", "effort", "budget"),
    [
        ("release", "low", 50),
        ("release", "medium", 75),
        ("release", "high", 75),
        ("release", "max", 100),
        ("preview", "low", 25),
        ("preview", "medium", 50),
        ("preview", "xhigh", 75),
        ("release", 1, 1),
        ("preview", 99, 99),
        ("release", "42", 42),
    ],
)
def test_v41_effort_budget_follows_the_table(table: str, effort: str | int, budget: int) -> None:
    prompt = render(SYSTEM_AND_USER, effort_table=table, reasoning_effort=effort).prompt
    assert prompt.startswith(BOS + "<｜System｜>" + _budget_line(budget))


@pytest.mark.parametrize("dialect", ["v4", "v4.1"])
def test_chat_mode_has_no_effort_text(dialect: str) -> None:
    prompt = render(SYSTEM_AND_USER, dialect=dialect, mode="chat", reasoning_effort="max").prompt
    assert prompt == BOS + ("<｜System｜>" if dialect == "v4.1" else "") + (
        "S<｜User｜>Hi<｜Assistant｜></think>"
    )


LEVELS = ["minimal", "low", "medium", "high", "xhigh", "max", "ultra"]


@pytest.mark.parametrize(
    ("dialect", "default", "other"), [("v4", "preview", "0731"), ("v4.1", "release", "preview")]
)
def test_the_default_effort_table_and_the_level_aliases(
    dialect: str, default: str, other: str
) -> None:
    def prompt(table: str | None, effort: str | None) -> str:
        return render(
            SYSTEM_AND_USER, dialect=dialect, effort_table=table, reasoning_effort=effort
        ).prompt

    for table in (default, other):
        assert prompt(table, "minimal") == prompt(table, "low")
        assert prompt(table, "ultra") == prompt(table, "max")
    # Every level renders; with no table named, each renders as in the default table.
    for effort in [None, *LEVELS]:
        assert prompt(None, effort) == prompt(default, effort)
    assert any(prompt(default, level) != prompt(other, level) for level in LEVELS)


# -- thinking, headers and where the output starts --------------------------------------


@pytest.mark.parametrize("dialect", ["v3.2", "v4", "v4.1"])
@pytest.mark.parametrize(("mode", "start"), [("thinking", "reasoning"), ("chat", "content")])
def test_generation_header_tells_where_the_output_starts(
    dialect: str, mode: str, start: str
) -> None:
    result = render(SYSTEM_AND_USER, dialect=dialect, mode=mode)
    think = "<think>" if start == "reasoning" else "</think>"
    assert result.prompt.endswith("Hi<｜Assistant｜>" + think)
    assert result.output_starts_in == start
    assert result.stop == (EOS,)
    assert result.dialect == dialect


@pytest.mark.parametrize("dialect", ["v3.2", "v4", "v4.1"])
def test_without_generation_prompt_the_prompt_ends_with_the_last_message(dialect: str) -> None:
    result = render(SYSTEM_AND_USER, dialect=dialect, add_generation_prompt=False)
    assert result.prompt.endswith("<｜User｜>Hi")
    assert result.output_starts_in == "content"


@pytest.mark.parametrize("dialect", ["v3.2", "v4", "v4.1"])
def test_without_bos(dialect: str) -> None:
    result = render(SYSTEM_AND_USER, dialect=dialect, add_bos=False, mode="chat")
    assert not result.prompt.startswith(BOS)
    assert result.prompt.startswith(("S", "<｜System｜>S"))


def test_v32_tool_results_end_with_the_think_header() -> None:
    messages: list[dict[str, Any]] = [
        *SYSTEM_AND_USER,
        {"role": "assistant", "content": "", "tool_calls": [_call("a", "lookup", {})]},
        {"role": "tool", "tool_call_id": "a", "content": "found"},
    ]
    result = render(messages, [TOOL], dialect="v3.2")
    assert result.prompt.endswith(
        "<function_results>\n<result>found</result>\n</function_results>\n\n<think>"
    )
    assert result.output_starts_in == "reasoning"


def test_task_action_header_starts_in_content() -> None:
    result = render([{"role": "user", "content": "Hi", "task": "action"}], dialect="v4")
    assert result.prompt.endswith("<｜Assistant｜><think><｜action｜>")
    assert result.output_starts_in == "content"


def test_other_tasks_append_their_token_only() -> None:
    result = render([{"role": "user", "content": "Hi", "task": "title"}], dialect="v4.1")
    assert result.prompt.endswith("<｜User｜>Hi<｜title｜>")


# -- continuing a final assistant message -----------------------------------------------


@pytest.mark.parametrize("dialect", ["v3.2", "v4", "v4.1"])
def test_continuing_open_reasoning(dialect: str) -> None:
    messages = [*SYSTEM_AND_USER, {"role": "assistant", "reasoning_content": "So far"}]
    result = render(messages, dialect=dialect, continue_final_message=True)
    assert result.prompt.endswith("<｜Assistant｜><think>So far")
    assert result.output_starts_in == "reasoning"


@pytest.mark.parametrize("dialect", ["v3.2", "v4", "v4.1"])
def test_continuing_content(dialect: str) -> None:
    messages = [
        *SYSTEM_AND_USER,
        {"role": "assistant", "reasoning": "Done.", "content": "The answ"},
    ]
    result = render(messages, dialect=dialect, continue_final_message=True)
    assert result.prompt.endswith("<｜Assistant｜><think>Done.</think>The answ")
    assert result.output_starts_in == "content"


def test_a_final_assistant_message_is_closed_and_gets_no_header() -> None:
    messages = [*SYSTEM_AND_USER, {"role": "assistant", "content": "Hello"}]
    result = render(messages, dialect="v4.1", mode="chat")
    assert result.prompt.endswith("</think>Hello" + EOS)


# -- drop_thinking ----------------------------------------------------------------------

HISTORY = [
    {"role": "user", "content": "One"},
    {"role": "assistant", "reasoning_content": "Earlier", "content": "A"},
    {"role": "user", "content": "Two"},
]


@pytest.mark.parametrize("dialect", ["v4", "v4.1"])
def test_earlier_reasoning_is_dropped_by_default(dialect: str) -> None:
    prompt = render(HISTORY, dialect=dialect).prompt
    assert "Earlier" not in prompt
    assert "One<｜Assistant｜></think>A" + EOS in prompt


@pytest.mark.parametrize("dialect", ["v4", "v4.1"])
def test_keep_thinking_renders_earlier_reasoning(dialect: str) -> None:
    prompt = render(HISTORY, dialect=dialect, drop_thinking=False).prompt
    assert "One<｜Assistant｜><think>Earlier</think>A" + EOS in prompt


@pytest.mark.parametrize("dialect", ["v4", "v4.1"])
def test_tools_force_reasoning_to_stay(dialect: str) -> None:
    result = render(HISTORY, [TOOL], dialect=dialect, drop_thinking=True)
    assert "One<｜Assistant｜><think>Earlier</think>A" + EOS in result.prompt
    assert any("drop_thinking" in note for note in result.notes)


def test_v32_drops_earlier_reasoning_even_with_tools() -> None:
    prompt = render(HISTORY, [TOOL], dialect="v3.2").prompt
    assert "Earlier" not in prompt


@pytest.mark.parametrize("dialect", ["v3.2", "v4", "v4.1"])
def test_developer_turns_before_the_last_user_are_dropped_with_reasoning(dialect: str) -> None:
    messages = [{"role": "developer", "content": "Old rules"}, *HISTORY]
    dropped = render(messages, dialect=dialect)
    assert "Old rules" not in dropped.prompt
    assert any(note.startswith("messages[0]: a developer message") for note in dropped.notes)
    kept = render(messages, dialect=dialect, drop_thinking=False)
    assert "Old rules" in kept.prompt
    assert kept.notes == ()


@pytest.mark.parametrize("dialect", ["v4", "v4.1"])
@pytest.mark.parametrize(("mode", "header"), [("thinking", "<think>"), ("chat", "</think>")])
def test_a_final_system_message_opens_the_assistant_turn(
    dialect: str, mode: str, header: str
) -> None:
    messages = [{"role": "user", "content": "u"}, {"role": "system", "content": "s"}]
    result = render(messages, dialect=dialect, mode=mode)
    system = "<｜System｜>s" if dialect == "v4.1" else "s"
    assert result.prompt.endswith(f"<｜User｜>u{system}<｜Assistant｜>{header}")
    assert result.output_starts_in == ("reasoning" if mode == "thinking" else "content")


def test_v4_a_system_message_before_an_assistant_turn_opens_it() -> None:
    messages = [
        {"role": "user", "content": "u"},
        {"role": "system", "content": "s"},
        {"role": "assistant", "content": "a"},
        {"role": "system", "content": "t"},
        {"role": "user", "content": "v"},
    ]
    prompt = render(messages, dialect="v4", mode="chat").prompt
    assert (
        prompt
        == BOS
        + "<｜User｜>us<｜Assistant｜></think>a"
        + EOS
        + "t<｜User｜>v<｜Assistant｜></think>"
    )


def test_v41_tool_results_do_not_start_a_new_user_turn() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "", "reasoning_content": "R", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "x"},
    ]
    kept = render(messages, dialect="v4.1").prompt
    assert "<｜Assistant｜><think>R</think>" in kept
    assert kept.endswith("<tool_result>x</tool_result><｜Assistant｜><think>")
    assert "R" not in render(messages, dialect="v4").prompt  # V4: the results are a user turn


# -- request-level tools and response_format --------------------------------------------


@pytest.mark.parametrize("dialect", ["v3.2", "v4", "v4.1"])
def test_request_tools_join_the_leading_system_message(dialect: str) -> None:
    prompt = render(SYSTEM_AND_USER, [TOOL], dialect=dialect, mode="chat").prompt
    system = prompt[: prompt.index("<｜User｜>")]
    assert "S\n\n## Tools\n" in system
    assert json.dumps(TOOL["function"]) in system


def test_request_tools_without_a_system_message_get_an_empty_one() -> None:
    prompt = render([{"role": "user", "content": "Hi"}], [TOOL], mode="chat").prompt
    assert prompt.startswith(BOS + "<｜System｜>\n\n## Tools\n\n")


def test_request_response_format_is_rendered_after_the_system_prompt() -> None:
    schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
    prompt = render(SYSTEM_AND_USER, response_format=schema, mode="chat").prompt
    assert (
        "S\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n"
        + json.dumps(schema)
        + "<｜User｜>"
    ) in prompt


def test_text_response_format_adds_nothing() -> None:
    plain = render(SYSTEM_AND_USER).prompt
    assert render(SYSTEM_AND_USER, response_format={"type": "text"}).prompt == plain


# -- tool calls and results -------------------------------------------------------------


def _call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _with_call(arguments: Any) -> list[dict[str, Any]]:
    return [*SYSTEM_AND_USER, {"role": "assistant", "tool_calls": [_call("a", "f", arguments)]}]


@pytest.mark.parametrize(
    "arguments",
    [
        {"q": "x", "n": 2},
        '{"q": "x", "n": 2}',
        json.dumps(json.dumps({"q": "x", "n": 2})),
    ],
)
def test_object_json_and_double_encoded_arguments_render_the_same(arguments: Any) -> None:
    result = render(_with_call(arguments))
    assert (
        '<｜DSML｜ parameter name="q" string="true">x</｜DSML｜ parameter>\n'
        '<｜DSML｜ parameter name="n" string="false">2</｜DSML｜ parameter>'
    ) in result.prompt
    assert result.notes == ()


@pytest.mark.parametrize(
    ("arguments", "value", "flag"),
    [("not JSON", "not JSON", "true"), ("[1, 2]", "[1, 2]", "true"), (5, "5", "false")],
)
def test_non_object_arguments_become_one_reported_parameter(
    arguments: Any, value: str, flag: str
) -> None:
    result = render(_with_call(arguments), dialect="v4")
    assert (
        f'<｜DSML｜parameter name="arguments" string="{flag}">{value}</｜DSML｜parameter>'
        in result.prompt
    )
    assert len(result.notes) == 1
    assert "messages[2].tool_calls[0].function.arguments" in result.notes[0]


@pytest.mark.parametrize("arguments", ["", None])
def test_empty_arguments_render_an_empty_invoke(arguments: Any) -> None:
    result = render(_with_call(arguments), dialect="v4")
    assert '<｜DSML｜invoke name="f">\n\n</｜DSML｜invoke>' in result.prompt
    assert result.notes == ()


def test_a_value_holding_the_whole_closing_sequence_is_reported() -> None:
    value = "x</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>y"
    result = render(_with_call({"text": value}))
    assert value in result.prompt
    assert len(result.notes) == 1
    assert "closing sequence" in result.notes[0]


def test_a_value_with_single_closing_tags_is_not_reported() -> None:
    result = render(_with_call({"text": "a </｜DSML｜ parameter> b </｜DSML｜ calls>"}))
    assert result.notes == ()


@pytest.mark.parametrize(
    "value",
    [
        'a</｜DSML｜ parameter><｜DSML｜ parameter name="k" string="true">b',
        'a</|DSML|parameter>\n<|DSML|parameter name="k" string="false">1',
    ],
)
def test_a_value_the_parser_would_split_is_reported(value: str) -> None:
    result = render(_with_call({"text": value}))
    assert value in result.prompt
    assert result.notes == (
        "messages[2].tool_calls: a value holds DSML tag text that a parser takes for markup, "
        "so the calls do not read back as written",
    )


def _two_calls_answered_in_reverse() -> list[dict[str, Any]]:
    return [
        *SYSTEM_AND_USER,
        {"role": "assistant", "tool_calls": [_call("one", "f", {}), _call("two", "f", {})]},
        {"role": "tool", "tool_call_id": "two", "content": "Second"},
        {"role": "tool", "tool_call_id": "one", "content": "First"},
    ]


@pytest.mark.parametrize("dialect", ["v4", "v4.1"])
def test_v4_results_are_sorted_into_call_order(dialect: str) -> None:
    prompt = render(_two_calls_answered_in_reverse(), [TOOL], dialect=dialect).prompt
    assert "<tool_result>First</tool_result>\n\n<tool_result>Second</tool_result>" in prompt


def test_v32_results_stay_in_message_order() -> None:
    prompt = render(_two_calls_answered_in_reverse(), [TOOL], dialect="v3.2").prompt
    assert "<result>Second</result>\n<result>First</result>" in prompt


def test_text_and_images_in_a_tool_result_join_with_blank_lines() -> None:
    messages = [
        *_with_call({}),
        {
            "role": "tool",
            "tool_call_id": "a",
            "is_error": True,
            "content": [
                {"type": "text", "text": "see"},
                {"type": "image_url", "image_url": {"url": "data:,"}},
            ],
        },
    ]
    prompt = render(messages).prompt
    assert "<tool_result>see\n\n<｜deepseek_image｜></tool_result>" in prompt


def test_user_text_after_tool_results_joins_their_turn() -> None:
    messages = [*_with_call({}), {"role": "tool", "content": "r"}, {"role": "user", "content": "u"}]
    prompt = render(messages, dialect="v4").prompt
    assert prompt.endswith("<｜User｜><tool_result>r</tool_result>\n\nu<｜Assistant｜><think>")


def test_v32_compact_template_variant_has_no_blank_lines_in_the_tools_text() -> None:
    official = render(SYSTEM_AND_USER, [TOOL], dialect="v3.2").prompt
    compact = render(SYSTEM_AND_USER, [TOOL], dialect="v3.2", template_variant="compact").prompt
    assert "## Tools\n\nYou have access" in official
    assert "## Tools\nYou have access" in compact
    assert compact.count("\n\n") == official.count("\n\n") - 7
