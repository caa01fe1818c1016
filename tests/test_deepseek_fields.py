"""DeepSeek's own request fields: thinking switch, effort names, prefix completion,
latest_reminder, Anthropic documents and one max_tokens per request."""

from __future__ import annotations

from typing import Any

import pytest

from dsmlkit.api import InvalidRequest, parse_request
from dsmlkit.api.common import (
    DEFAULT_MAX_TOKENS_CHAT,
    DEFAULT_MAX_TOKENS_MAX_EFFORT,
    DEFAULT_MAX_TOKENS_THINKING,
)
from dsmlkit.dialects import DEFAULT_DIALECT, EOS
from dsmlkit.parse import (
    ArgumentsDelta,
    ContentDelta,
    Diagnostic,
    Event,
    MessageCollector,
    OutputEnd,
    ToolCallEnd,
    ToolCallStart,
)
from dsmlkit.render import RenderResult, render_conversation

USER = {"role": "user", "content": "Hi"}
CHAT_END = "<｜Assistant｜></think>"
THINK_END = "<｜Assistant｜><think>"


def openai(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [USER], **extra}


def anthropic(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 64, "messages": [USER], **extra}


def rendered(api: str, body: dict[str, Any], dialect: str = DEFAULT_DIALECT.name) -> RenderResult:
    req = parse_request(api, body, dialect=dialect)
    return render_conversation(req.conversation, req.render)


# --- the thinking switch and its precedence ----------------------------------------------


@pytest.mark.parametrize(
    ("extra", "ends_with"),
    [
        ({}, THINK_END),  # DeepSeek's default: thinking
        ({"thinking": {"type": "disabled"}}, CHAT_END),
        ({"thinking": {"type": "enabled"}}, THINK_END),
        ({"reasoning_effort": "none"}, CHAT_END),
        # thinking.type wins over chat_template_kwargs.thinking, which wins over effort none
        ({"thinking": {"type": "enabled"}, "chat_template_kwargs": {"thinking": False}}, THINK_END),
        ({"thinking": {"type": "disabled"}, "chat_template_kwargs": {"thinking": True}}, CHAT_END),
        ({"chat_template_kwargs": {"thinking": True}, "reasoning_effort": "none"}, THINK_END),
        ({"chat_template_kwargs": {"thinking": False}, "reasoning_effort": "max"}, CHAT_END),
    ],
)
def test_openai_thinking_switch_precedence(extra: dict[str, Any], ends_with: str) -> None:
    assert rendered("openai", openai(**extra)).prompt.endswith(ends_with)


def test_a_switch_over_effort_none_is_noted_and_uses_the_default_effort() -> None:
    result = rendered("openai", openai(thinking={"type": "enabled"}, reasoning_effort="none"))
    assert "Reasoning Effort: 75 " in result.prompt  # V4.1 release default
    assert any("overridden by thinking.type" in note for note in result.notes)


@pytest.mark.parametrize(
    ("extra", "ends_with"),
    [
        ({}, CHAT_END),  # Anthropic's default: no extended thinking
        ({"thinking": {"type": "enabled", "budget_tokens": 2048}}, THINK_END),
        ({"thinking": {"type": "adaptive"}}, THINK_END),
        ({"thinking": {"type": "disabled"}}, CHAT_END),
        ({"output_config": {"effort": "none"}}, CHAT_END),
        ({"thinking": {"type": "adaptive"}, "output_config": {"effort": "none"}}, THINK_END),
    ],
)
def test_anthropic_thinking_switch(extra: dict[str, Any], ends_with: str) -> None:
    assert rendered("anthropic", anthropic(**extra)).prompt.endswith(ends_with)


# --- effort names, per dialect ------------------------------------------------------------


@pytest.mark.parametrize(
    ("effort", "dialect", "text"),
    [
        ("minimal", "v4.1", "Reasoning Effort: 50 "),
        ("low", "v4.1", "Reasoning Effort: 50 "),
        ("medium", "v4.1", "Reasoning Effort: 75 "),
        ("xhigh", "v4.1", "Reasoning Effort: 75 "),
        ("max", "v4.1", "Reasoning Effort: 100 "),
        ("ultra", "v4.1", "Reasoning Effort: 100 "),
        (37, "v4.1", "Reasoning Effort: 37 "),
        ("max", "v4", "Absolute maximum"),
        ("ultra", "v4", "Absolute maximum"),
        ("minimal", "v4", "<｜begin▁of▁sentence｜><｜User｜>"),
    ],
)
def test_deepseek_effort_names_map_per_dialect(effort: Any, dialect: str, text: str) -> None:
    for api, body in (
        ("openai", openai(reasoning_effort=effort)),
        ("anthropic", anthropic(thinking={"type": "enabled"}, output_config={"effort": effort})),
    ):
        assert text in rendered(api, body, dialect).prompt


def test_numeric_effort_needs_a_dialect_with_numeric_effort() -> None:
    with pytest.raises(InvalidRequest) as caught:
        rendered("openai", openai(reasoning_effort=37), "v4")
    assert caught.value.param == "reasoning_effort"


def test_v32_sets_any_effort_aside_with_a_note() -> None:
    result = rendered("openai", openai(reasoning_effort="max"), "v3.2")
    assert any("v3.2 has no reasoning effort" in note for note in result.notes)


# --- chat prefix completion ---------------------------------------------------------------


def prefix_body(**assistant: Any) -> dict[str, Any]:
    message = {"role": "assistant", "prefix": True, **assistant}
    return openai(messages=[USER, message])


def continue_with(body: dict[str, Any], continuation: str) -> tuple[RenderResult, list[Event]]:
    req = parse_request("openai", body)
    result = render_conversation(req.conversation, req.render)
    parser = req.output_parser(result)
    return result, parser.feed(continuation) + parser.close()


def test_prefix_ends_the_prompt_with_the_text_and_no_eos() -> None:
    result, events = continue_with(
        prefix_body(content="```python\n", thinking={"type": "disabled"})
        | {"thinking": {"type": "disabled"}},
        "print(1)\n```",
    )
    assert result.prompt.endswith(CHAT_END + "```python\n")
    assert not result.prompt.endswith(EOS)
    assert result.output_prefix == "```python\n"
    collected = MessageCollector()
    collected.add(events)
    assert collected.message().content == "print(1)\n```"  # only what the model added


def test_prefix_reasoning_is_a_reasoning_prefix_in_thinking_mode() -> None:
    result, events = continue_with(
        prefix_body(content="", reasoning_content="Let me think"), " harder.</think>Done."
    )
    assert result.prompt.endswith(THINK_END + "Let me think")
    assert result.output_starts_in == "reasoning"
    collected = MessageCollector()
    collected.add(events)
    message = collected.message()
    assert (message.reasoning, message.content) == (" harder.", "Done.")


def test_prefix_with_reasoning_and_text_continues_the_text() -> None:
    result, _ = continue_with(prefix_body(content="Answer:", reasoning_content="r"), " 4")
    assert result.prompt.endswith(THINK_END + "r</think>Answer:")
    assert (result.output_starts_in, result.output_prefix) == ("content", "Answer:")


def test_the_parser_starts_where_the_prefix_left_the_model() -> None:
    opened = '<｜DSML｜ calls>\n<｜DSML｜ invoke name="get_weather">\n'
    body = prefix_body(content="Checking." + opened) | {
        "thinking": {"type": "disabled"},
        "tools": [{"type": "function", "function": {"name": "get_weather"}}],
    }
    rest = '<｜DSML｜ parameter name="city" string="true">Paris</｜DSML｜ parameter>\n'
    rest += "</｜DSML｜ invoke>\n</｜DSML｜ calls>"
    _, events = continue_with(body, rest)
    collected = MessageCollector()
    collected.add(events)
    message = collected.message()
    assert [(call.name, call.arguments) for call in message.calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert message.content == ""
    assert not any(isinstance(event, ContentDelta) for event in events)
    # the call the prefix opened is started again, with its fragments whole
    assert isinstance(events[0], ToolCallStart) and events[0].index == 0
    [end] = [event for event in events if isinstance(event, ToolCallEnd)]
    fragments = [event.text for event in events if isinstance(event, ArgumentsDelta)]
    assert "".join(fragments) == end.arguments_json


#: An Anthropic prefill that ends in the client's own call (its value's last fragment and
#: the call's end are held back by the parser until more text comes).
OWN_CALL = {"type": "tool_use", "id": "toolu_own", "name": "bash", "input": {"cmd": "ls"}}
CALL_PREFILL = [USER, {"role": "assistant", "content": [{"type": "text", "text": "A"}, OWN_CALL]}]


def test_a_prefill_ending_in_a_call_continues_after_it() -> None:
    req = parse_request("anthropic", anthropic(messages=CALL_PREFILL))
    result = render_conversation(req.conversation, req.render)
    assert result.output_prefix.endswith("</｜DSML｜ calls>")
    parser = req.output_parser(result)
    events = parser.feed("Done.") + parser.close("stop")
    assert [type(event) for event in events if not isinstance(event, Diagnostic)] == [
        ContentDelta,
        OutputEnd,
    ]
    assert events[-1] == OutputEnd("stop")


def test_a_call_after_a_prefilled_call_is_numbered_from_0() -> None:
    req = parse_request("anthropic", anthropic(messages=CALL_PREFILL))
    parser = req.output_parser(render_conversation(req.conversation, req.render))
    block = (
        '\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name="now">\n</｜DSML｜ invoke>\n</｜DSML｜ calls>'
    )
    events = parser.feed(block) + parser.close("stop")
    calls = [event for event in events if isinstance(event, ToolCallStart | ToolCallEnd)]
    assert [(type(call), call.index, call.name) for call in calls] == [
        (ToolCallStart, 0, "now"),
        (ToolCallEnd, 0, "now"),
    ]
    assert events[-1] == OutputEnd("tool_calls")


def test_prefix_only_on_the_final_assistant_message() -> None:
    body = openai(messages=[USER, {"role": "assistant", "content": "a", "prefix": True}, USER])
    with pytest.raises(InvalidRequest) as caught:
        parse_request("openai", body)
    assert caught.value.param == "messages[1].prefix"


# --- latest_reminder and documents --------------------------------------------------------


def test_latest_reminder_in_the_openai_adapter() -> None:
    body = openai(messages=[USER, {"role": "latest_reminder", "content": "Be brief."}])
    assert "<｜latest_reminder｜>Be brief." in rendered("openai", body).prompt


def document(source: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "document", "source": source, **extra}]}


def test_text_documents_render_as_text_with_their_title() -> None:
    body = anthropic(
        messages=[
            document({"type": "text", "media_type": "text/plain", "data": "x = 1"}, title="a.py")
        ]
    )
    assert "<｜User｜>a.py\n\nx = 1<｜Assistant｜>" in rendered("anthropic", body).prompt
    blocks = {
        "type": "content",
        "content": [{"type": "text", "text": "p1"}, {"type": "text", "text": "p2"}],
    }
    body = anthropic(messages=[document(blocks)])
    assert "<｜User｜>p1\n\np2<｜Assistant｜>" in rendered("anthropic", body).prompt


@pytest.mark.parametrize("kind", ["base64", "url", "file"])
def test_other_document_sources_are_a_400_naming_the_param(kind: str) -> None:
    body = anthropic(messages=[document({"type": kind})])
    with pytest.raises(InvalidRequest) as caught:
        parse_request("anthropic", body)
    assert caught.value.param == "messages[0].content[0].source.type"
    assert "text" in caught.value.message


# --- one max_tokens per request -----------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (openai(), DEFAULT_MAX_TOKENS_THINKING),
        (openai(reasoning_effort="max"), DEFAULT_MAX_TOKENS_MAX_EFFORT),
        (openai(reasoning_effort="none"), DEFAULT_MAX_TOKENS_CHAT),
        (openai(max_tokens=100), 100),
        (openai(max_tokens=100, max_completion_tokens=50), 50),
    ],
)
def test_max_tokens_resolves_to_one_number(body: dict[str, Any], expected: int) -> None:
    assert parse_request("openai", body).resolved_max_tokens() == expected


def test_max_tokens_is_capped_by_the_context_when_known() -> None:
    req = parse_request("openai", openai())
    assert req.resolved_max_tokens(prompt_tokens=1000, max_model_len=4096) == 3096
    assert parse_request("anthropic", anthropic()).resolved_max_tokens(10, 4096) == 64
    with pytest.raises(InvalidRequest) as caught:
        parse_request("openai", openai(max_tokens=4000)).resolved_max_tokens(1000, 4096)
    assert caught.value.param == "max_tokens"
    with pytest.raises(InvalidRequest) as caught:
        req.resolved_max_tokens(5000, 4096)
    assert caught.value.param == "messages"
