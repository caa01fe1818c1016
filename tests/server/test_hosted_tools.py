"""DeepSeek's server tools and the ``latest_reminder`` role, through a real ``dsmlkit serve``
process and the official SDKs.

The facts (DeepSeek's API docs, guides "Web Tools" and "User Metadata Marker"):
``{"type": "deepseek_web_search"}`` and ``{"type": "deepseek_read_url"}`` in ``tools`` are
run by the hosted endpoint, whose returned blocks the client passes back unchanged on the
next request; ``{"role": "latest_reminder", "content": "<date>,<weekday>,<location>,
<platform>,<language>"}`` goes directly before its user message in Chat Completions and
Messages, and the Responses API refuses it. The docs do not say in which message fields a
Chat Completions answer returns the blocks, so the upstream here returns them in a field
of its own choosing (``search_results``): the gateway passes any such field through as
it came. In the Anthropic format the docs name the tool entries
(``{"type": "deepseek_web_search", "name": "deepseek_web_search"}``) and the blocks
(``server_tool_use``, web-search result blocks, errors included) but not every field, so
the blocks here follow Anthropic's own server-tool blocks, and one has a type of its own:
the gateway passes any block it does not read through as it came.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.server.conftest import HOSTED_MODELS
from tests.server.fake_engine import FakeEngine, Reply
from tests.server.fake_hosted import signature_of
from tests.server.mock_upstream import ScriptedChat, chat_stream, mock_upstream
from tests.server.process import serve_process

# Real dsmlkit serve processes.
pytestmark = pytest.mark.slow

WEB_SEARCH: Any = {"type": "deepseek_web_search"}
READ_URL: Any = {"type": "deepseek_read_url", "name": "deepseek_read_url"}
LOOKUP: Any = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a word up.",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    },
}
#: Two blocks as a hosted endpoint might return them (nested, with non-ASCII text).
FOUND_A = {"type": "web_page", "url": "https://a.example/", "title": "Ä", "cite": [1, 2]}
FOUND_B = {"type": "web_page", "url": "https://b.example/", "title": "B", "extra": None}
REMINDER: Any = {"role": "latest_reminder", "content": "2026-11-11,Wednesday,Singapore,Web,English"}
USER: Any = {"role": "user", "content": "What is in the news today?"}


@pytest.fixture(scope="module")
def hosted() -> Iterator[tuple[ScriptedChat, str]]:
    """A gateway in chat mode in front of a scripted hosted endpoint."""
    upstream = ScriptedChat()
    with (
        mock_upstream(upstream) as upstream_url,
        serve_process("--upstream", upstream_url, "--upstream-api", "chat") as (_, url),
    ):
        yield upstream, url


@pytest.fixture(scope="module")
def messages_mode(engine_server: tuple[FakeEngine, str]) -> Iterator[str]:
    """A gateway in messages mode in front of the fake engine's Anthropic-format endpoint."""
    with serve_process("--upstream", engine_server[1], "--upstream-api", "messages") as (_, url):
        yield url


@pytest.fixture(scope="module")
def rendered(engine_server: tuple[FakeEngine, str]) -> Iterator[str]:
    """A gateway in completions mode (it renders the prompt) in front of the fake engine."""
    with serve_process("--upstream", engine_server[1], "--tokenizer", "none") as (_, url):
        yield url


def _openai(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=10)


def _anthropic(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="none", max_retries=0, timeout=10)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_server_tool_and_its_blocks_go_round_through_a_chat_upstream(
    hosted: tuple[ScriptedChat, str], stream: bool
) -> None:
    """The tool entry reaches the upstream as sent; the blocks it returns reach the client
    (in a whole answer and in the stream); sent back, they reach the upstream unchanged."""
    upstream, url = hosted
    upstream.play(
        chat_stream(
            {"role": "assistant", "reasoning_content": "Search first."},
            {"search_results": [FOUND_A]},
            {"content": "Two pages "},
            {"search_results": [FOUND_B]},
            {"content": "say so."},
        ),
        chat_stream({"content": "Done."}),
    )
    client = _openai(url)
    ask: dict[str, Any] = {"model": "deepseek-flash", "tools": [LOOKUP, WEB_SEARCH]}
    if stream:
        found = []
        content = ""
        for chunk in client.chat.completions.create(messages=[USER], stream=True, **ask):
            delta = chunk.choices[0].delta if chunk.choices else None
            if delta is not None:
                found += (delta.model_extra or {}).get("search_results", [])
                content += delta.content or ""
    else:
        message = client.chat.completions.create(messages=[USER], **ask).choices[0].message
        found, content = (message.model_extra or {})["search_results"], message.content or ""
    assert found == [FOUND_A, FOUND_B]
    assert content == "Two pages say so."
    assert upstream.bodies[0]["tools"] == [LOOKUP, WEB_SEARCH]

    answered = {"role": "assistant", "content": content, "search_results": found}
    again: Any = [USER, answered, {"role": "user", "content": "And the second one?"}]
    assert client.chat.completions.create(messages=again, **ask).choices[0].message.content
    assert upstream.bodies[1]["messages"][1] == answered
    assert upstream.bodies[1]["tools"] == [LOOKUP, WEB_SEARCH]


def test_blocks_stay_when_dropped_reasoning_is_put_back(hosted: tuple[ScriptedChat, str]) -> None:
    """A client that drops the reasoning but keeps the blocks: the gateway puts the
    reasoning back into the turn (so it sends the messages it rebuilt), blocks and all."""
    upstream, url = hosted
    call = {"index": 0, "id": "call_up1", "type": "function"}
    upstream.play(
        chat_stream(
            {"role": "assistant", "reasoning_content": "Read it, then look a word up."},
            {"search_results": [FOUND_A]},
            {"tool_calls": [{**call, "function": {"name": "lookup", "arguments": '{"q": "x"}'}}]},
            finish="tool_calls",
        ),
        chat_stream({"content": "Done."}),
    )
    client = _openai(url)
    ask: dict[str, Any] = {"model": "deepseek-flash", "tools": [LOOKUP, READ_URL]}
    message = client.chat.completions.create(messages=[USER], **ask).choices[0].message
    assert message.tool_calls is not None
    sent_back = message.model_dump(exclude_none=True)
    del sent_back["reasoning_content"]
    result: Any = {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "a word"}
    client.chat.completions.create(messages=[USER, sent_back, result], **ask)
    turn = upstream.bodies[1]["messages"][1]
    assert turn["reasoning_content"] == "Read it, then look a word up."  # put back
    assert turn["search_results"] == [FOUND_A]
    assert upstream.bodies[1]["tools"] == [LOOKUP, READ_URL]


def test_other_apis_cannot_take_the_blocks_of_a_chat_upstream(
    hosted: tuple[ScriptedChat, str],
) -> None:
    """A Messages or Responses answer has no place for a Chat Completions upstream's
    blocks: the request is refused (400 in the API's shape) naming the tool, and nothing
    goes upstream."""
    upstream, url = hosted
    upstream.play(chat_stream({"content": "unused"}))
    with pytest.raises(anthropic.BadRequestError) as refused:
        _anthropic(url).messages.create(
            model="deepseek-flash",
            max_tokens=100,
            messages=[{"role": "user", "content": "Read https://a.example/"}],
            tools=[READ_URL],
        )
    assert refused.value.status_code == 400
    assert "tools[0]: deepseek_read_url" in refused.value.message
    assert "/v1/chat/completions" in refused.value.message
    with pytest.raises(openai.BadRequestError) as also:
        _openai(url).responses.create(
            model="deepseek-flash",
            input="What is in the news today?",
            tools=[WEB_SEARCH],
        )
    assert "tools[0]: deepseek_web_search" in also.value.message
    assert upstream.bodies == []


def test_a_rendered_prompt_cannot_hold_a_server_tool(
    rendered: str, engine_server: tuple[FakeEngine, str]
) -> None:
    """Completions mode: a self-hosted engine cannot run the tool; a 400 in the API's
    shape names it and says what to do (on main: Chat named no tool, Messages dropped it)."""
    engine = engine_server[0]
    before = len(engine.requests)
    with pytest.raises(openai.BadRequestError) as chat:
        _openai(rendered).chat.completions.create(
            model="deepseek-v4.1", messages=[USER], tools=[LOOKUP, WEB_SEARCH]
        )
    assert chat.value.status_code == 400
    error = chat.value.body
    assert isinstance(error, dict) and error["param"] == "tools[1]"
    assert "deepseek_web_search is run by DeepSeek's hosted API" in error["message"]
    assert "--upstream-api chat" in error["message"]
    with pytest.raises(anthropic.BadRequestError) as messages:
        _anthropic(rendered).messages.create(
            model="deepseek-v4.1",
            max_tokens=100,
            messages=[{"role": "user", "content": "Read https://a.example/"}],
            tools=[READ_URL],
        )
    assert messages.value.type == "invalid_request_error"
    assert "tools[0]: deepseek_read_url is run by" in messages.value.message
    render = httpx.post(
        rendered + "/v1/chat/completions/render",
        json={"model": "deepseek-v4.1", "messages": [USER], "tools": [WEB_SEARCH]},
    )
    assert render.status_code == 400
    assert len(engine.requests) == before


def test_latest_reminder_goes_through_messages_and_chat(
    hosted: tuple[ScriptedChat, str],
) -> None:
    """Chat mode: the reminder reaches the upstream in its place, from a Messages client
    (on main: a 400) and from a Chat client."""
    upstream, url = hosted
    upstream.play(chat_stream({"content": "Nothing new."}))
    answer = _anthropic(url).messages.create(
        model="deepseek-flash",
        max_tokens=100,
        messages=[REMINDER, USER],
    )
    assert [block.type for block in answer.content] == ["text"]
    assert answer.content[0].to_dict()["text"] == "Nothing new."
    assert upstream.bodies[-1]["messages"] == [REMINDER, USER]
    _openai(url).chat.completions.create(
        model="deepseek-flash",
        messages=[REMINDER, USER],
    )
    assert upstream.bodies[-1]["messages"] == [REMINDER, USER]


def test_latest_reminder_is_rendered_before_its_user_message(
    rendered: str, engine_server: tuple[FakeEngine, str]
) -> None:
    """Completions mode: a Messages client's reminder is written as the V4.1 template
    writes it, ``<｜latest_reminder｜>{content}`` right before ``<｜User｜>``."""
    engine = engine_server[0]
    _anthropic(rendered).messages.create(
        model="deepseek-v4.1",
        max_tokens=100,
        messages=[REMINDER, USER],
    )
    prompt = engine.requests[-1]["prompt"]
    assert f"<｜latest_reminder｜>{REMINDER['content']}<｜User｜>{USER['content']}" in prompt


def test_responses_refuses_latest_reminder(hosted: tuple[ScriptedChat, str]) -> None:
    """DeepSeek's Responses API takes no latest_reminder, nor does the gateway's: a 400
    that says where it belongs."""
    upstream, url = hosted
    upstream.play(chat_stream({"content": "unused"}))
    with pytest.raises(openai.BadRequestError) as refused:
        _openai(url).responses.create(
            model="deepseek-flash",
            input=[REMINDER, USER],
        )
    assert refused.value.status_code == 400
    message = refused.value.message
    assert "input[0].role: latest_reminder is not a Responses role" in message
    assert "Chat Completions or Messages" in message
    assert upstream.bodies == []


# --- messages mode: the blocks of an Anthropic-format upstream ----------------------------

#: The Messages spelling of the tools (DeepSeek's guide gives the server tools a ``name``).
LOOKUP_M: Any = {"name": "lookup", "input_schema": {"type": "object"}}
WEB_SEARCH_M: Any = {"type": "deepseek_web_search", "name": "deepseek_web_search"}
READ_URL_M: Any = {"type": "deepseek_read_url", "name": "deepseek_read_url"}
#: The blocks the upstream returns: a search and its results, a page read that failed, and
#: a block of a type no API documents (nested values, non-ASCII text, a null, a float).
SEARCH_USE: Any = {
    "type": "server_tool_use",
    "id": "srvtoolu_01",
    "name": "deepseek_web_search",
    "input": {"query": "news today", "lang": "ä"},
}
SEARCH_RESULT: Any = {
    "type": "web_search_tool_result",
    "tool_use_id": "srvtoolu_01",
    "content": [
        {"type": "web_search_result", "url": "https://a.example/", "title": "Ä", "page_age": None}
    ],
}
READ_USE: Any = {
    "type": "server_tool_use",
    "id": "srvtoolu_02",
    "name": "deepseek_read_url",
    "input": {"url": "https://b.example/"},
}
READ_ERROR: Any = {
    "type": "web_search_tool_result",
    "tool_use_id": "srvtoolu_02",
    "content": {"type": "web_search_tool_result_error", "error_code": "unavailable"},
}
UNKNOWN: Any = {"type": "deepseek_note", "note": {"score": 0.5, "tags": ["x", None]}}
SERVER_BLOCKS = [SEARCH_USE, SEARCH_RESULT, READ_USE, READ_ERROR, UNKNOWN]
LOOKUP_CALL = {"id": "toolu_up_" + "d4e5f6" * 4, "name": "lookup", "arguments": '{"q": "x"}'}
THOUGHT = "Search, read, then look a word up."


def _blocks_and_events(
    client: anthropic.Anthropic, stream: bool, **body: Any
) -> tuple[list[Any], list[Any]]:
    """The answer's content blocks as JSON, and (streamed) the stream's events."""
    if not stream:
        message = client.messages.create(**body)
        return [block.to_dict() for block in message.content], []
    with client.messages.stream(**body) as events:
        seen = list(events)
        message = events.get_final_message()
    return [block.to_dict() for block in message.content], seen


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_server_blocks_go_round_through_a_messages_upstream(
    messages_mode: str, engine: FakeEngine, stream: bool
) -> None:
    """The tool entries reach the upstream as sent; every block the upstream returns that
    the gateway does not read reaches the client unchanged in its place (in a whole answer
    and in the stream, a server_tool_use's input as input_json_delta); sent back, they
    reach the upstream unchanged in their places (on main: a 400)."""
    engine.served = HOSTED_MODELS
    engine.push(
        Reply(
            reasoning=THOUGHT,
            blocks=("Looking. ", *SERVER_BLOCKS, "Two pages say so."),
            tool_calls=(LOOKUP_CALL,),
            finish_reason="tool_calls",
        ),
        Reply(content="Done."),
    )
    client = _anthropic(messages_mode)
    tools = [LOOKUP_M, WEB_SEARCH_M, READ_URL_M]
    user: Any = {"role": "user", "content": "What is in the news today?"}
    body: Any = {"model": "m", "max_tokens": 500, "tools": tools}
    content, events = _blocks_and_events(client, stream, messages=[user], **body)
    assert engine.requests[0]["tools"] == tools
    thinking, first_text, *passed, last_text, call = content
    assert thinking["type"] == "thinking" and thinking["thinking"] == THOUGHT
    assert (first_text, last_text) == (
        {"type": "text", "text": "Looking. "},
        {"type": "text", "text": "Two pages say so."},
    )
    assert passed == SERVER_BLOCKS
    assert call["type"] == "tool_use" and call["input"] == {"q": "x"}
    if stream:
        starts = [event for event in events if event.type == "content_block_start"]
        assert [event.index for event in starts] == list(range(len(content)))
        assert starts[2].content_block.to_dict() == {**SEARCH_USE, "input": {}}
        fragments = [
            event.delta.partial_json
            for event in events
            if event.type == "content_block_delta" and event.index == 2
        ]
        assert len(fragments) > 1 and json.loads("".join(fragments)) == SEARCH_USE["input"]
        assert starts[3].content_block.to_dict() == SEARCH_RESULT
        stops = [event.index for event in events if event.type == "content_block_stop"]
        assert stops == list(range(len(content)))

    result: Any = {"type": "tool_result", "tool_use_id": call["id"], "content": "a word"}
    turn: Any = {"role": "assistant", "content": content}
    client.messages.create(messages=[user, turn, {"role": "user", "content": [result]}], **body)
    sent = engine.requests[1]
    assert sent["tools"] == tools
    assert sent["messages"][1]["content"] == [
        {"type": "thinking", "thinking": THOUGHT, "signature": signature_of(THOUGHT)},
        first_text,
        *SERVER_BLOCKS,
        last_text,
        {"type": "tool_use", "id": LOOKUP_CALL["id"], "name": "lookup", "input": {"q": "x"}},
    ]


def test_other_apis_cannot_take_the_blocks_of_a_messages_upstream(
    messages_mode: str, engine: FakeEngine
) -> None:
    """Messages mode: a Chat Completions or Responses answer has no place for the blocks;
    the 400 names the tool and the route whose answers hold them (on main: it named
    /v1/chat/completions, whose answers do not in this mode), and nothing goes up."""
    engine.served = HOSTED_MODELS
    with pytest.raises(openai.BadRequestError) as chat:
        _openai(messages_mode).chat.completions.create(
            model="deepseek-flash", messages=[USER], tools=[LOOKUP, WEB_SEARCH]
        )
    assert chat.value.status_code == 400
    error = chat.value.body
    assert isinstance(error, dict) and error["param"] == "tools[1]"
    assert "deepseek_web_search returns blocks that a chat answer cannot hold" in error["message"]
    assert "send the request to /v1/messages" in error["message"]
    with pytest.raises(openai.BadRequestError) as responses:
        _openai(messages_mode).responses.create(
            model="deepseek-flash", input="Read https://a.example/", tools=[READ_URL]
        )
    assert "tools[0]: deepseek_read_url" in responses.value.message
    assert "send the request to /v1/messages" in responses.value.message
    assert engine.requests == []
