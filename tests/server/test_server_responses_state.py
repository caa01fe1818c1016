"""Responses ``store`` / ``previous_response_id`` and the Responses reasoning round trip.

Through the official openai SDK against the fake engine; the engine's received prompt
(text, ``--tokenizer none``) shows what the model saw.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import anyio
import openai
import pytest
from openai.types.responses import Response

from dsmlkit.api import ApiError, parse_request
from dsmlkit.api.errors import api_error
from dsmlkit.dialects import V4_1
from dsmlkit.errors import InvalidRequest
from dsmlkit.parse import ReasoningDelta, ToolCallEnd
from dsmlkit.server import response_store
from dsmlkit.server.fold import AnswerTracker
from dsmlkit.server.reasoning_store import Digests, ReasoningMemory, ThinkingSigner
from dsmlkit.server.remember import Remember
from dsmlkit.server.response_store import LINKS, stored_history
from dsmlkit.server.restore import restore
from dsmlkit.server.state_store import MemoryStore, SqliteStore
from tests.helpers import write_block
from tests.server.conftest import Gateway
from tests.server.fake_engine import FakeEngine, Reply

REASONING = "The user wants the weather in Paris, so I call get_weather."
CALL_TEXT = REASONING + "</think>" + write_block(V4_1, [("get_weather", {"city": "Paris"})])
TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]


@pytest.fixture
def text_gateway(start_gateway: Callable[..., str], engine: FakeEngine) -> Gateway:
    """A completions-mode gateway that sends text prompts (so tests can read them)."""
    return Gateway(start_gateway(upstream_api="completions", tokenizer="none"), engine)


def create(gateway: Gateway, stream: bool, **body: Any) -> Response:
    client = gateway.openai()
    if stream:
        with client.responses.stream(model="m", **body) as events:
            return events.get_final_response()
    answer: Response = client.responses.create(model="m", **body)
    return answer


def prompt(gateway: Gateway) -> str:
    sent: str = gateway.engine.requests[-1]["prompt"]
    return sent


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_previous_response_id_puts_the_earlier_turns_in_the_prompt(
    text_gateway: Gateway, stream: bool
) -> None:
    text_gateway.engine.push(Reply(text="Paris is sunny today."))
    first = create(text_gateway, stream, input="Weather in Paris?", reasoning={"effort": "none"})
    text_gateway.engine.push(Reply(text="Rain tomorrow."))
    second = create(
        text_gateway,
        stream,
        input="And tomorrow?",
        previous_response_id=first.id,
        reasoning={"effort": "none"},
    )
    seen = prompt(text_gateway)
    assert seen.index("Weather in Paris?") < seen.index("Paris is sunny today.")
    assert seen.index("Paris is sunny today.") < seen.index("And tomorrow?")
    assert second.previous_response_id == first.id
    assert second.output_text == "Rain tomorrow."
    text_gateway.engine.push(Reply(text="Dry after that."))
    create(text_gateway, stream, input="And after?", previous_response_id=second.id)
    third = prompt(text_gateway)
    assert all(turn in third for turn in ("Weather in Paris?", "And tomorrow?", "Rain tomorrow."))


def test_the_stored_history_keeps_the_reasoning_and_the_call(text_gateway: Gateway) -> None:
    text_gateway.engine.push(Reply(text=CALL_TEXT))
    first = create(text_gateway, False, input="Weather in Paris?", tools=TOOLS)
    call_id = next(item.call_id for item in first.output if item.type == "function_call")
    text_gateway.engine.push(Reply(text="Sunny.</think>It is sunny."))
    create(
        text_gateway,
        False,
        input=[{"type": "function_call_output", "call_id": call_id, "output": "sunny"}],
        previous_response_id=first.id,
        tools=TOOLS,
    )
    seen = prompt(text_gateway)
    assert REASONING in seen and "Paris" in seen and "sunny" in seen


def test_an_error_in_the_input_names_its_own_item_after_a_stored_history(
    text_gateway: Gateway,
) -> None:
    """The stored conversation is read beside the input, not spliced into it: the param of
    a mistake is the client's own ``input[i]``."""
    text_gateway.engine.push(Reply(text=CALL_TEXT))
    first = create(text_gateway, False, input="Weather in Paris?", tools=TOOLS)
    call_id = next(item.call_id for item in first.output if item.type == "function_call")
    answered = {"type": "function_call_output", "call_id": call_id, "output": "sunny"}
    unknown = {"type": "function_call_output", "call_id": "call_unknown", "output": "?"}
    with pytest.raises(openai.BadRequestError) as caught:
        create(text_gateway, False, input=[answered, unknown], previous_response_id=first.id)
    error = caught.value.body
    assert isinstance(error, dict)
    assert error["param"] == "input[1].call_id", error


@pytest.mark.parametrize("store", [None, False], ids=["unknown", "store-false"])
def test_a_response_that_is_not_stored_is_a_400_naming_the_param(
    text_gateway: Gateway, store: bool | None
) -> None:
    missing = "resp_0123456789abcdef01234567"
    if store is False:
        text_gateway.engine.push(Reply(text="Hi."))
        missing = create(text_gateway, False, input="Hi", store=False).id
    before = len(text_gateway.engine.requests)
    with pytest.raises(openai.BadRequestError) as caught:
        create(text_gateway, False, input="Again", previous_response_id=missing)
    assert caught.value.status_code == 400
    error = caught.value.body
    assert isinstance(error, dict)
    assert error["param"] == "previous_response_id"
    assert missing in error["message"] and "not found" in error["message"]
    assert len(text_gateway.engine.requests) == before  # nothing reached the engine


def test_dropped_reasoning_of_a_responses_call_is_restored(text_gateway: Gateway) -> None:
    text_gateway.engine.push(Reply(text=CALL_TEXT))
    first = create(text_gateway, False, input="Weather in Paris?", tools=TOOLS, store=False)
    call = next(item for item in first.output if item.type == "function_call")
    history: list[Any] = [
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": "{}"},
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
    ]
    text_gateway.engine.push(Reply(text="Sunny.</think>It is sunny."))
    create(text_gateway, False, input=history, tools=TOOLS)
    assert REASONING in prompt(text_gateway)
    own = {
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "Mine."}],
    }
    text_gateway.engine.push(Reply(text="Sunny.</think>It is sunny."))
    create(text_gateway, False, input=[history[0], own, *history[1:]], tools=TOOLS)
    seen = prompt(text_gateway)
    assert "Mine." in seen and REASONING not in seen  # a reasoning item the client sent is kept


def test_a_store_outage_is_a_503_naming_the_param(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "state.db"))
    anyio.run(store.aclose)  # a closed database fails every operation, like a lost file
    memory = ReasoningMemory(store, ThinkingSigner())
    body = {"model": "m", "input": "Again", "previous_response_id": "resp_0123456789abcdef"}
    with pytest.raises(ApiError) as caught:
        anyio.run(stored_history, memory, body)
    assert (caught.value.status, caught.value.param) == (503, "previous_response_id")


class CountingStore(MemoryStore):
    """A memory store that counts its reads."""

    reads = 0

    async def get_many(self, keys: Iterable[str]) -> dict[str, str]:
        self.reads += 1
        return await super().get_many(keys)


def _saved_chain(memory: ReasoningMemory, turns: int) -> list[str]:
    """Store ``turns`` linked turns as the gateway does; their response ids, oldest first."""
    ids: list[str] = []
    for turn in range(turns):
        body: dict[str, Any] = {"input": f"Question {turn}?"}
        if ids:
            body["previous_response_id"] = ids[-1]
        answer = {"type": "message", "role": "assistant", "content": f"Answer {turn}."}
        ids.append(f"resp_{turn:04d}")
        links = anyio.run(stored_history, memory, body).links
        remember = Remember(memory, Digests(()), body, links)
        anyio.run(remember.answer, {}, {"id": ids[-1], "output": [answer]})
    return ids


def _said(items: list[Any]) -> list[str]:
    return [item["content"] for item in items]


def test_a_chain_is_read_back_oldest_first_in_batches_of_links() -> None:
    store = CountingStore()
    memory = ReasoningMemory(store, ThinkingSigner())
    ids = _saved_chain(memory, 40)
    store.reads = 0
    body = {"input": "Next?", "previous_response_id": ids[-1]}
    items = anyio.run(stored_history, memory, body).items
    expected = [text for t in range(40) for text in (f"Question {t}?", f"Answer {t}.")]
    assert _said(items) == expected
    assert store.reads == 1 + math.ceil(39 / LINKS)  # the newest turn, then batches of links


def test_a_chain_stores_each_turn_once() -> None:
    store = MemoryStore()
    memory = ReasoningMemory(store, ThinkingSigner())
    sizes = []
    for turns in (10, 50):
        before = store.size
        _saved_chain(memory, turns)
        sizes.append(store.size - before)
    per_turn = [size / turns for size, turns in zip(sizes, (10, 50), strict=True)]
    assert per_turn[1] < per_turn[0] * 1.2, per_turn  # linear: the same bytes a turn


def test_a_missing_link_or_a_chain_too_long_is_a_400_naming_the_param(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = MemoryStore()
    memory = ReasoningMemory(store, ThinkingSigner())
    ids = _saved_chain(memory, 5)
    body = {"input": "Next?", "previous_response_id": ids[-1]}
    monkeypatch.setattr(response_store, "MAX_CHAIN", 4)
    with pytest.raises(InvalidRequest, match="more than 4 responses") as caught:
        anyio.run(stored_history, memory, body)
    assert caught.value.param == "previous_response_id"
    monkeypatch.undo()
    anyio.run(store.put_many, {"response:" + ids[1]: "[]"}, 0.0)  # expired
    with pytest.raises(InvalidRequest, match=f"earlier response '{ids[1]}'") as caught:
        anyio.run(stored_history, memory, body)
    assert (api_error(caught.value).status, caught.value.param) == (400, "previous_response_id")


def test_a_whole_conversation_stored_before_links_is_still_read() -> None:
    store = MemoryStore()
    memory = ReasoningMemory(store, ThinkingSigner())
    old = [{"type": "message", "role": "user", "content": "Old question?"}]
    anyio.run(store.put_many, {"response:resp_old": json.dumps(old)})
    body = {"input": "Next?", "previous_response_id": "resp_old"}
    assert _said(anyio.run(stored_history, memory, body).items) == ["Old question?"]


def test_a_responses_turn_gets_its_reasoning_and_arguments_from_one_read_of_its_calls() -> None:
    store = CountingStore()
    memory = ReasoningMemory(store, ThinkingSigner())
    call_id = "call_" + "7" * 24
    tracker = AnswerTracker()
    tracker.add([ReasoningDelta("Look it up."), ToolCallEnd(0, call_id, "f", {"a": 1}, '{"a": 1}')])
    anyio.run(memory.remember, tracker.calls(), Digests(()))
    echoed = {"type": "function_call", "call_id": call_id, "name": "f", "arguments": '{ "a":1 }'}
    body = {
        "model": "m",
        "input": [
            {"role": "user", "content": "Go."},
            echoed,  # its reasoning item dropped, its arguments reformatted
            {"type": "function_call_output", "call_id": call_id, "output": "ok"},
        ],
    }
    read = parse_request("responses", body)
    store.reads = 0
    restored = anyio.run(restore, memory, read)
    assert store.reads == 1
    assert restored.reasoning == 1
    messages = restored.req.conversation.messages
    assert [m.role for m in messages] == ["user", "assistant", "tool"]
    assert messages[1].reasoning == "Look it up."
    (call,) = messages[1].tool_calls
    assert call.arguments_text == '{"a": 1}'  # the model's own text
    assert read.conversation.messages[1].reasoning is None  # the request read is not modified
    assert read.conversation.messages[1].tool_calls[0].arguments_text == '{ "a":1 }'  # as sent


def test_saving_a_turn_reads_nothing_its_links_came_with_the_history() -> None:
    store = CountingStore()
    memory = ReasoningMemory(store, ThinkingSigner())
    ids = _saved_chain(memory, 3)
    body = {"input": "Next?", "previous_response_id": ids[-1]}
    links = anyio.run(stored_history, memory, body).links
    assert links == [ids[2], ids[1], ids[0]]
    store.reads = 0
    answer = {"type": "message", "role": "assistant", "content": "Fine."}
    remember = Remember(memory, Digests(()), body, links)
    anyio.run(remember.answer, {}, {"id": "resp_next", "output": [answer]})
    assert store.reads == 0
    stored = anyio.run(store.get_many, ["response:resp_next"])
    assert json.loads(stored["response:resp_next"])["links"] == links
