"""Reasoning summaries through a real ``dsmlkit serve`` process, with the official SDK.

Codex asks ``reasoning: {"summary": "auto"}`` and shows only summaries; the gateway's
reasoning then comes as the reasoning item's summary too (its ``reasoning_text`` content
unchanged), whole and streamed, and the stream's summary events parse in the SDK.
"""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tests.server.conftest import openai_client
from tests.server.fake_engine import FakeEngine, Reply
from tests.server.process import serve_process

# Real processes (dsmlkit serve).
pytestmark = pytest.mark.slow

REASONING = "The user wants a greeting.\n\nSay hi."
SUMMARY_EVENTS = (
    "response.reasoning_summary_part.added",
    "response.reasoning_summary_text.delta",
    "response.reasoning_summary_text.done",
    "response.reasoning_summary_part.done",
)


@pytest.fixture(scope="module")
def client(engine_server: tuple[FakeEngine, str]) -> Iterator[openai.OpenAI]:
    flags = ("--upstream", engine_server[1], "--tokenizer", "none")
    with serve_process(*flags) as (_, url):
        yield openai_client(url)


@pytest.mark.parametrize("summary", ["auto", "concise", "detailed"])
def test_asked_summary_carries_the_reasoning(
    client: openai.OpenAI, engine: FakeEngine, summary: str
) -> None:
    engine.push(*[Reply(text=REASONING + "</think>Hi!", chunk_size=3)] * 2)
    body = {"model": "m", "input": "Greet me.", "reasoning": {"effort": "high", "summary": summary}}
    whole = client.responses.create(**body)  # type: ignore[call-overload]
    with client.responses.stream(**body) as stream:  # type: ignore[call-overload]
        events = list(stream)
        streamed = stream.get_final_response()
    for response in (whole, streamed):
        reasoning, message = response.output
        assert reasoning.type == "reasoning" and message.type == "message"
        assert [(part.type, part.text) for part in reasoning.summary] == [
            ("summary_text", REASONING)
        ]
        assert [part.text for part in reasoning.content or ()] == [REASONING]
        assert response.output_text == "Hi!"
    summary_events = [event for event in events if "summary" in event.type]
    assert tuple(event.type for event in summary_events) == SUMMARY_EVENTS
    assert all(event.item_id == streamed.output[0].id for event in summary_events)
    delta, done = summary_events[1:3]
    assert delta.type == "response.reasoning_summary_text.delta" and delta.delta == REASONING
    assert done.type == "response.reasoning_summary_text.done" and done.text == REASONING
    kinds = [event.type for event in events]
    assert kinds.index(SUMMARY_EVENTS[-1]) + 1 == kinds.index("response.output_item.done")


def test_no_summary_unless_asked(client: openai.OpenAI, engine: FakeEngine) -> None:
    engine.push(*[Reply(text=REASONING + "</think>Hi!", chunk_size=3)] * 2)
    body = {"model": "m", "input": "Greet me.", "reasoning": {"effort": "high"}}
    whole = client.responses.create(**body)  # type: ignore[call-overload]
    with client.responses.stream(**body) as stream:  # type: ignore[call-overload]
        assert not [event for event in stream if "summary" in event.type]
        streamed = stream.get_final_response()
    for response in (whole, streamed):
        reasoning = response.output[0]
        assert reasoning.type == "reasoning" and reasoning.summary == []
        assert [part.text for part in reasoning.content or ()] == [REASONING]
