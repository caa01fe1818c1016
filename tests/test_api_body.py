"""Non-streamed bodies as JSON text (``json_body``, ``anthropic_response_json``): JSON-equal
to ``json.dumps`` of the dict builders' bodies, the model output written once."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsmlkit.api import Usage
from dsmlkit.api.anthropic import (
    anthropic_response,
    anthropic_response_json,
    parse_anthropic_request,
)
from dsmlkit.api.openai import openai_response, parse_openai_request
from dsmlkit.api.responses import parse_responses_request, responses_response
from dsmlkit.api.sse import LONG_STRING, RawJSON, json_body, json_utf8
from dsmlkit.dialects import V4_1
from dsmlkit.parse import MessageCollector, ParsedMessage
from tests.helpers import write_block
from tests.test_api_sse import VECTORS

USAGE = Usage(prompt_tokens=30, completion_tokens=12, cached_tokens=8)
TOOLS = [{"type": "function", "function": {"name": "note"}}]
CHAT = parse_openai_request(
    {"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": TOOLS}
)
MESSAGES = parse_anthropic_request(
    {"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "x"}]}
)
RESPONSES = parse_responses_request(
    {"model": "m", "input": "x", "tools": [{"type": "function", "name": "note"}]}
)


def _parsed(output: str) -> ParsedMessage:
    parser = CHAT.new_parser("reasoning")
    collector = MessageCollector()
    collector.add(parser.feed(output))
    collector.add(parser.close())
    return collector.message()


def _bodies_agree(msg: ParsedMessage) -> None:
    chat = openai_response(msg, "m", id="chatcmpl-1", created=1, usage=USAGE)
    assert json.loads(json_body(chat)) == chat
    message = anthropic_response(msg, "m", id="msg_1", usage=USAGE, stop_sequence="x")
    text = anthropic_response_json(msg, "m", id="msg_1", usage=USAGE, stop_sequence="x")
    assert json.loads(text) == message
    response = responses_response(msg, RESPONSES, id="resp_1", created_at=1, usage=USAGE)
    assert json.loads(json_body(response)) == response


@pytest.mark.parametrize("vector", VECTORS, ids=[v["id"] for v in VECTORS])
def test_recorded_outputs_write_the_same_bodies(vector: dict[str, Any]) -> None:
    _bodies_agree(_parsed(vector["text"]))


LONG = st.text(
    st.sampled_from(['"', "\\", "\n", "\t", "\x00", "\x7f", "é", "🚀", "<", "a", " ", "｜"]),
    min_size=LONG_STRING,
    max_size=LONG_STRING + 40,
)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(LONG, LONG, LONG, st.booleans())
def test_long_outputs_write_the_same_bodies(
    reasoning: str, content: str, value: str, ascii_only: bool
) -> None:
    if ascii_only:
        reasoning, content, value = (
            t.encode("ascii", "ignore").decode() for t in (reasoning, content, value)
        )
    call = write_block(V4_1, [("note", {"text": value})])
    _bodies_agree(_parsed(f"{reasoning}</think>{content}{call}"))


def test_the_parsers_argument_json_is_embedded_as_it_is() -> None:
    msg = _parsed("</think>" + write_block(V4_1, [("note", {"text": "x" * LONG_STRING})]))
    text = anthropic_response_json(msg, "m", id="msg_1").decode()
    assert msg.calls[0].arguments_json in text


def test_json_body_keeps_what_is_not_its_own() -> None:
    """Raw JSON is embedded; a string shaped like a marker, short or long, stays a string."""
    lookalike = "dsmlkit-" + "0" * 32
    body = {
        "raw": RawJSON('{"a": [1, 2.5, null]}'),
        "lookalike": lookalike,
        "long": [lookalike + '"' + "é" * LONG_STRING, 3, True, None, {"x": "y"}],
        "empty": {},
    }
    expected = {**body, "raw": {"a": [1, 2.5, None]}}
    assert json.loads(json_body(body)) == expected
    assert json_body({"a": "b"}) == b'{"a":"b"}'


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    st.text(
        st.sampled_from(
            ['"', "\\", "\n", "\r", "\t", "\b", "\x00", "\x1f", "\x7f", "é", "🚀", "a", " "]
        ),
        max_size=60,
    )
    | st.text(st.characters(codec="utf-8"), max_size=60)
)
def test_a_long_string_is_written_as_the_c_escape_writes_it(text: str) -> None:
    """Byte-equal to ``json.dumps``: with no control characters but tab, newline and
    carriage return (the ``bytes.replace`` path) as the escape that keeps non-ASCII, with
    others as the C escape chosen by the text (the ASCII one writes DEL as ``\\u007f``)."""
    rare_control = any(c < " " and c not in "\t\n\r" for c in text)
    expected = json.dumps(text, ensure_ascii=rare_control and text.isascii()).encode()
    assert json_utf8(text) == expected
    long = text * (LONG_STRING // max(len(text), 1) + 1)
    assert json_body({"v": long}) == b'{"v":' + json_utf8(long) + b"}"
