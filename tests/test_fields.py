"""The one request reader: Field accessors, and the canonical reader built on them.

A message of a usual shape is built straight from what that shape holds; every other
message goes through the full reader. Both must give the same message, and arguments text
is read as ``json.loads`` reads it.
"""

from __future__ import annotations

import json
from collections import UserDict
from typing import Any

import pytest

from dsmlkit.conversation.readers import build_conversation, history_arguments, read_messages
from dsmlkit.errors import InvalidRequest
from dsmlkit.fields import MISSING, Field


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


USUAL = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": None, "reasoning_content": "hm", "tool_calls": []},
    {"role": "assistant", "content": "ok"},
    {"role": "assistant", "reasoning_content": "think"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [_call("a", "f", '{"x": 1}'), _call("", "g.h", "not json")],
    },
    {"role": "tool", "tool_call_id": "a", "content": "1"},
    {"role": "tool", "tool_call_id": "", "content": ""},
]


def _as_mappings(value: Any) -> Any:
    """``value`` with every dict a Mapping that is not a dict (the full reader's path)."""
    if isinstance(value, dict):
        return UserDict({key: _as_mappings(item) for key, item in value.items()})
    if isinstance(value, list):
        return [_as_mappings(item) for item in value]
    return value


@pytest.mark.parametrize("index", range(len(USUAL)))
def test_a_usual_message_reads_as_the_full_reader_reads_it(index: int) -> None:
    usual_notes: list[str] = []
    full_notes: list[str] = []
    usual = read_messages(Field([USUAL[index]], "messages"), usual_notes)
    full = read_messages(Field([_as_mappings(USUAL[index])], "messages"), full_notes)
    assert usual == full
    assert usual_notes == full_notes


def test_two_calls_with_one_id_are_refused_on_both_paths() -> None:
    message = {"role": "assistant", "tool_calls": [_call("a", "f", "{}"), _call("a", "g", "{}")]}
    for given in (message, _as_mappings(message)):
        with pytest.raises(InvalidRequest) as caught:
            read_messages(Field([given], "messages"), [])
        assert caught.value.param == "messages[0].tool_calls"


def test_a_bad_tool_name_in_a_usual_message_is_named() -> None:
    message = {"role": "assistant", "tool_calls": [_call("a", "bad name", "{}")]}
    with pytest.raises(InvalidRequest) as caught:
        read_messages(Field([message], "messages"), [])
    assert caught.value.param == "messages[0].tool_calls[0].function.name"


def _old_history_arguments(raw: Any) -> Any:
    """What arguments are by the rule, through json.loads (None: noted, kept raw)."""
    if raw is None or (isinstance(raw, str) and (not raw or raw.isspace())):
        return {}
    value = raw
    for _ in range(2):
        if not isinstance(value, str):
            break
        try:
            value = json.loads(value)
        except ValueError:
            break
    return value if isinstance(value, dict) else None


@pytest.mark.parametrize(
    "raw",
    [
        '{"a": 1}',
        ' {"a": 1}\n',
        '{"a": 1} x',
        '{"a": 1',
        "\ufeff{}",
        json.dumps(json.dumps({"a": [1, 2]})),
        json.dumps(" {} "),
        json.dumps(json.dumps(json.dumps({}))),
        "[1, 2]",
        "3",
        '"text"',
        "",
        " \t",
        "{}",
        "\u3000{}",
        None,
        {"a": 1},
        [1],
        7,
    ],
)
def test_arguments_read_as_json_loads_reads_them(raw: Any) -> None:
    notes: list[str] = []
    arguments = history_arguments(Field(raw, "args"), notes)
    expected = _old_history_arguments(raw)
    if expected is None:
        assert arguments == {"arguments": raw}
        assert notes and notes[0].startswith("args: arguments are not a JSON object")
    else:
        assert arguments == expected
        assert notes == []


def test_missing_arguments_are_no_arguments() -> None:
    assert history_arguments(Field(MISSING, "args"), []) == {}


@pytest.mark.parametrize(
    ("value", "read"),
    [(MISSING, None), (None, None), ("", ""), ("x", "x")],
)
def test_optional_string(value: Any, read: str | None) -> None:
    assert Field(value, "m.name").optional_string() == read


@pytest.mark.parametrize(("value", "read"), [(MISSING, False), (None, False), (True, True)])
def test_flag(value: Any, read: bool) -> None:
    assert Field(value, "m.wo_eos").flag() is read


@pytest.mark.parametrize(
    ("field", "message"),
    [
        (Field(3, "m.name"), "expected a string"),
        (Field("yes", "m.wo_eos"), "expected true or false"),
    ],
)
def test_canonical_getters_name_the_field(field: Field, message: str) -> None:
    read = field.optional_string if message == "expected a string" else field.flag
    with pytest.raises(InvalidRequest) as caught:
        read()
    assert (caught.value.param, caught.value.message) == (field.path, message)


def _answered(calls: list[dict[str, Any]], results: list[str | None]) -> list[str | None]:
    """The call ids the tool results end up with, read by build_conversation."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "tool_calls": calls},
    ]
    messages += [{"role": "tool", "tool_call_id": result, "content": "r"} for result in results]
    read = build_conversation(messages).messages
    return [message.tool_call_id for message in read[2:]]


def test_tool_results_find_their_calls_in_any_order() -> None:
    calls = [_call("a", "f", "{}"), _call("b", "f", "{}"), _call("c", "f", "{}")]
    assert _answered(calls, ["a", "b", "c"]) == ["a", "b", "c"]
    assert _answered(calls, ["c", None, "b"]) == ["c", "a", "b"]
    assert _answered(calls, [None, None]) == ["a", "b"]


def test_a_result_naming_an_id_answers_the_next_call_when_calls_have_none() -> None:
    calls = [_call("", "f", "{}"), _call("", "g", "{}")]
    assert _answered(calls, ["x", "y"]) == ["x", "y"]


def test_a_result_naming_an_unknown_id_is_refused() -> None:
    with pytest.raises(InvalidRequest) as caught:
        _answered([_call("a", "f", "{}"), _call("b", "f", "{}")], ["b", "zzz"])
    assert caught.value.param == "messages[3].tool_call_id"
    assert "matches no call" in caught.value.message
