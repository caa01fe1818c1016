"""The LiteLLM callback's logic on plain dicts (no litellm needed): leaked DSML in a whole
``message`` or in streamed ``delta``s becomes ``tool_calls``; proper calls pass through."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dsmlkit.dialects import V4_1
from dsmlkit.integrations.chat_leaks import StreamLeaks, repair_message
from tests.helpers import write_block

LEAK = "Checking." + write_block(V4_1, [("get_weather", {"city": "Paris"})]).replace(
    "｜DSML｜", " | DSML | "
)


def test_whole_message_leak_becomes_a_call_and_reasoning_stays() -> None:
    fields, finish = repair_message(
        {"content": LEAK, "reasoning_content": "Paris it is."}, "stop", "v4.1"
    )
    assert fields["content"] == "Checking."
    assert fields["reasoning_content"] == "Paris it is."
    [call] = fields["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert finish == "tool_calls"


def test_a_proper_call_keeps_its_id() -> None:
    proper = {"id": "call_up", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    fields, finish = repair_message({"content": "Hi", "tool_calls": [proper]}, "tool_calls", "v4")
    assert fields["tool_calls"] == [proper]
    assert (fields["content"], finish) == ("Hi", "tool_calls")


@pytest.mark.parametrize("size", [1, 3, 17])
def test_streamed_leak_in_any_cut_is_one_call(size: int) -> None:
    leaks = StreamLeaks("v4.1")
    deltas: list[dict[str, Any]] = [
        leaks.feed({"content": LEAK[i : i + size]}) for i in range(0, len(LEAK), size)
    ]
    last, finish = leaks.close("stop")
    deltas.append(last)
    content = "".join(d.get("content", "") for d in deltas)
    calls = [c for d in deltas for c in d.get("tool_calls", ())]
    assert content == "Checking."
    assert [c["function"]["name"] for c in calls if "id" in c] == ["get_weather"]
    arguments = "".join(c["function"]["arguments"] for c in calls)
    assert json.loads(arguments) == {"city": "Paris"}
    assert finish == "tool_calls"
