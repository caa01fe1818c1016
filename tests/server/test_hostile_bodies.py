"""10,000 hostile bodies over every POST route of a real ``dsmlkit serve``: none is a 500.

Each body is a valid body of a route, mutated one to three times: a key deleted, renamed,
added or given another value (another type, a huge or non-finite number, deep nesting,
control tokens, a lone surrogate, NUL, another route's body, a value from elsewhere in
the same body), a list item repeated, and on the encoded bytes a cut, an invalid UTF-8
byte, a repeated key, a stray prefix or suffix, or a top level that is not an object;
some go with a content type that is not JSON, some to another route. Body ``i`` is made
by ``random.Random(i)`` alone, so a failure names its index and any later run makes the
same body again (no hypothesis version decides). The server has the fake engine behind
it (a tokenizer; half the bodies in completions mode, half in chat mode), so the gateway
routes go all the way upstream.

Asserted: no answer has status 500, every error answer is JSON with a message, and the
server's log holds no traceback. ``DSMLKIT_HOSTILE_BODIES`` changes the count.
"""

from __future__ import annotations

import copy
import json
import os
import random
import re
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import httpx
import pytest

from tests.server.fake_engine import FakeEngine
from tests.server.process import ServerLog, serve_process
from tests.server.test_server_fuzz import (
    CHAT,
    MESSAGES,
    PARSE,
    TOOLS_ANTHROPIC,
    TOOLS_OPENAI,
    json_paths,
)

# Real processes (dsmlkit serve).
pytestmark = pytest.mark.slow

COUNT = int(os.environ.get("DSMLKIT_HOSTILE_BODIES", "10000"))
#: Client connections sending at once (the server is one process).
CLIENTS = 4

#: The function of :data:`TOOLS_OPENAI` as a Responses tool (flat).
RESPONSES_TOOL: dict[str, Any] = {"type": "function", **cast(Any, TOOLS_OPENAI[0]["function"])}
RESPONSES: dict[str, Any] = {
    "model": "m",
    "instructions": "Be brief.",
    "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Hm."}]},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city": "Paris"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    ],
    "tools": [RESPONSES_TOOL],
    "tool_choice": "auto",
    "reasoning": {"effort": "high"},
    "max_output_tokens": 50,
    "temperature": 0.5,
    "store": True,
    "stream": False,
}
COUNT_TOKENS = {k: v for k, v in MESSAGES.items() if k != "max_tokens"}
#: Valid bodies of every POST route.
BODIES: dict[str, list[dict[str, Any]]] = {
    "/v1/chat/completions": [
        {**CHAT, "tool_choice": "auto"},
        {**CHAT, "stream": True, "stream_options": {"include_usage": True}, "tool_choice": "auto"},
    ],
    "/v1/messages": [
        {**MESSAGES, "tool_choice": {"type": "auto"}},
        {**MESSAGES, "stream": True, "tool_choice": {"type": "auto"}},
    ],
    "/v1/responses": [
        RESPONSES,
        {**RESPONSES, "stream": True},
        {"model": "m", "input": "Hi", "previous_response_id": "resp_unknown"},
    ],
    "/v1/chat/completions/render": [CHAT],
    "/v1/messages/render": [MESSAGES],
    "/v1/responses/render": [RESPONSES],
    "/tokenize": [
        {"prompt": "hi <｜User｜>", "add_special_tokens": True, "return_token_strs": True},
        {"model": "m", "messages": CHAT["messages"][:2], "tools": TOOLS_OPENAI},
    ],
    "/detokenize": [{"tokens": [0, 1, 2, 300]}],
    "/v1/messages/count_tokens": [COUNT_TOKENS],
    "/v1/parse": [
        PARSE,
        {**PARSE, "api": "anthropic", "tools": TOOLS_ANTHROPIC, "chunk_size": 3},
        {**PARSE, "start_in": "reasoning", "finish_reason": "length", "chunk_size": 1},
    ],
}
ROUTES = sorted(BODIES)

#: Spliced in for a marker string after encoding: what ``json.dumps`` cannot write.
RAW = {
    "__nan__": "NaN",
    "__inf__": "1e400",
    "__neg_inf__": "-1e400",
    "__digits__": "1" * 5000,
    "__surrogate__": '"\\ud800x"',
    "__deep_64__": "[" * 64 + "1" + "]" * 64,
    "__deep_65__": "{" + '"a":{' * 64 + "}" * 65,
    "__deep_3000__": "[" * 3000 + "]" * 3000,
}
NAMES = ["type", "role", "content", "text", "name", "id", "input", "model", "tools", "x"]
WORDS = [
    "",
    "auto",
    "none",
    "required",
    "any",
    "tool",
    "function",
    "user",
    "assistant",
    "system",
    "developer",
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
    "reasoning",
    "function_call",
    "function_call_output",
    "message",
    "input_text",
    "output_text",
    "image",
    "image_url",
    "text",
    "enabled",
    "disabled",
    "adaptive",
    "omitted",
    "json_schema",
    "json_object",
    "high",
    "max",
    "openai",
    "anthropic",
    "v3.2",
    "content",
    "length",
    "call_1",
    "toolu_1",
    "get_weather",
    "<｜User｜>",
    "<｜Assistant｜>",
    "<｜end▁of▁sentence｜>",
    "</think>",
    "<｜DSML｜tool_calls>",
    '<｜DSML｜invoke name="get_weather">',
    "\x00",
    "\u2028",
    "resp_x",
]
LITERALS: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1,
    2**31,
    2**63,
    2**64 + 1,
    -(2**63),
    10**30,
    0.5,
    -0.0,
    1e308,
    5e-324,
    [],
    {},
    [None],
    [{}],
    [[]],
    {"type": None},
    {"type": "text"},
    {"type": "text", "text": 1},
    {"type": "function"},
    {"type": "tool_use"},
    {"type": "function", "function": None},
    {"role": "user"},
    {"role": "assistant", "content": None},
    [{"type": "text", "text": None}],
]
CONTENT_TYPES = [
    "text/plain",
    "application/x-www-form-urlencoded",
    "application/json; charset=utf-16",
    "application/json, text/plain",
    "APPLICATION/JSON",
    "application/problem+json",
    "",
]
INVALID_UTF8 = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80\x80"]
JSON_JUNK = [b"", b" ", b"null", b"[]", b'"text"', b"1", b"{}", b"{", b"\xef\xbb\xbf{}"]


def _at(body: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        body = body[step]
    return body


class Mutator:
    """The mutations of one body, every choice drawn from ``rng``."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def value(self) -> Any:
        """A hostile value: a literal, a word, a long string, another route's body."""
        rng = self.rng
        kind = rng.randrange(10)
        if kind < 4:
            return copy.deepcopy(rng.choice(LITERALS))
        if kind == 4:
            return rng.choice(list(RAW))
        if kind < 8:
            return rng.choice(WORDS)
        if kind == 8:
            return rng.choice(WORDS) * rng.randrange(1, 2000)
        return copy.deepcopy(rng.choice(BODIES[rng.choice(ROUTES)]))

    def tree(self, body: Any) -> Any:
        """One mutation of the decoded body."""
        rng = self.rng
        paths = list(json_paths(body))
        path = rng.choice(paths)
        action = rng.choice(["replace", "replace", "replace", "delete", "add", "repeat", "move"])
        if not path:
            return self.value() if action == "replace" else body
        parent, last = _at(body, path[:-1]), path[-1]
        if action == "delete":
            del parent[last]
        elif action == "add" and isinstance(parent, dict):
            parent[rng.choice(NAMES) + rng.choice(["", "_x"])] = self.value()
        elif action == "repeat" and isinstance(parent, list):
            parent.insert(last, copy.deepcopy(parent[last]))
        elif action == "move":
            parent[last] = copy.deepcopy(_at(body, rng.choice(paths)))
        elif action == "add" and isinstance(parent, dict) and isinstance(last, str):
            parent[rng.choice(NAMES)] = parent.pop(last)  # a renamed key
        else:
            parent[last] = self.value()
        return body

    def raw(self, data: bytes) -> bytes:
        """One mutation of the encoded body."""
        rng = self.rng
        kind = rng.randrange(7)
        at = rng.randrange(len(data) + 1)
        if kind == 0:
            return data[:at]
        if kind == 1:
            return data[:at] + rng.choice(INVALID_UTF8) + data[at:]
        if kind == 2:
            keys = list(re.finditer(rb'"(\w+)": ', data))
            if keys:
                key = rng.choice(keys)
                spare = json.dumps(self.value()).encode()
                return data[: key.start()] + key.group() + spare + b", " + data[key.start() :]
        if kind == 3:
            return rng.choice(JSON_JUNK)
        if kind == 4:
            return rng.choice([b"\xef\xbb\xbf", b" \n", b"\x00"]) + data
        if kind == 5:  # a key that is not text
            return re.sub(rb'"(\w+)": ', rb'"\1\\udc80": ', data, count=rng.randint(1, 3))
        return data + rng.choice([b"}", b"]", b"x", b"{}", b"\x00", b"\n\n"])


class HostileBody:
    """Body number ``index``: its route, content type and bytes (from ``Random(index)``)."""

    def __init__(self, index: int) -> None:
        rng = random.Random(index)
        mutate = Mutator(rng)
        self.index = index
        self.route = rng.choice(ROUTES)
        body: Any = copy.deepcopy(rng.choice(BODIES[self.route]))
        for _ in range(rng.randint(1, 3)):
            body = mutate.tree(body)
        data = json.dumps(body, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
        for marker, literal in RAW.items():
            data = data.replace(json.dumps(marker).encode(), literal.encode())
        if rng.random() < 0.15:
            data = mutate.raw(data)
        self.data = data
        self.content_type = rng.choice(CONTENT_TYPES) if rng.random() < 0.05 else "application/json"
        if rng.random() < 0.03:
            self.route = rng.choice(ROUTES)  # another route's body


#: The bodies each upstream mode gets: half each.
MODES = {"completions": range(0, COUNT // 2), "chat": range(COUNT // 2, COUNT)}


@pytest.fixture(scope="module", params=list(MODES))
def server(
    request: pytest.FixtureRequest, engine_server: tuple[FakeEngine, str], v41_tokenizer: str
) -> Iterator[tuple[str, range, ServerLog]]:
    """A real server in front of the fake engine in one upstream mode (chat mode names
    the engine's model, so that the client's own reaches it), its bodies and its log."""
    mode = request.param
    flags = ["--tokenizer", v41_tokenizer, "--upstream", engine_server[1], "--upstream-api", mode]
    if mode == "chat":
        flags += ["--model", "deepseek-v4.1"]
    with serve_process(*flags, "--log-level", "warning") as (process, url):
        watch = ServerLog(process)
        yield url, MODES[mode], watch
        process.terminate()
        process.wait(15)
        watch.join(5)


def _send(url: str, indices: range) -> list[tuple[HostileBody, int, bytes]]:
    """Each body of ``indices`` sent on one keep-alive connection: (body, status, answer)."""
    answers = []
    with httpx.Client(base_url=url, timeout=30) as http:
        for index in indices:
            hostile = HostileBody(index)
            headers = {"content-type": hostile.content_type} if hostile.content_type else {}
            response = http.post(hostile.route, content=hostile.data, headers=headers)
            answers.append((hostile, response.status_code, response.content))
    return answers


def test_hostile_bodies_never_get_a_500(server: tuple[str, range, ServerLog]) -> None:
    url, indices, watch = server
    share = -(-len(indices) // CLIENTS)
    ranges = [indices[start : start + share] for start in range(0, len(indices), share)]
    with ThreadPoolExecutor(CLIENTS) as pool:
        answers = [a for batch in pool.map(_send, [url] * len(ranges), ranges) for a in batch]
    assert len(answers) == len(indices)
    failures = [
        f"body {hostile.index} to {hostile.route}: {status} {answer[:300]!r}"
        for hostile, status, answer in answers
        if status == 500
    ]
    assert not failures, "\n".join(failures[:20])
    for hostile, status, answer in answers:
        if status >= 400:
            error = json.loads(answer)["error"]
            assert error["message"], (hostile.index, answer)
    statuses = Counter(status for _, status, _ in answers)
    assert statuses[200] > len(indices) // 10  # most mutations leave something to answer
    assert statuses[415] > 0 and statuses[400] > len(indices) // 10
    assert not watch.tracebacks(), watch.tracebacks()[:3]


@pytest.mark.parametrize("route", ROUTES)
def test_the_valid_bodies_are_answered(server: tuple[str, range, ServerLog], route: str) -> None:
    url = server[0]
    for body in BODIES[route]:
        response = httpx.post(url + route, json=body, timeout=30)
        expected = 400 if "previous_response_id" in body else 200
        assert response.status_code == expected, (body, response.text)
