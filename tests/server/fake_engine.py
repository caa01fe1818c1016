"""A fake inference engine for the gateway tests and benchmark (a small raw ASGI app).

It serves OpenAI ``/v1/completions`` (raw model text, as vLLM streams it with
``skip_special_tokens: false``) and a leaky ``/v1/chat/completions`` (DSML left in
``content`` / ``reasoning_content``, like some hosted endpoints), always as SSE. Each
request takes the next scripted :class:`Reply` (or ``default`` when the script is empty),
replays it in small chunks and can fail on demand: an error status, a hang, a dropped
connection or a malformed SSE event after N chunks. Received bodies are kept in
``requests`` (and their Authorization headers in ``authorizations``); ``disconnects`` counts
clients that went away while it was hanging.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


@dataclass(frozen=True)
class Reply:
    """One scripted answer. ``text`` is for /v1/completions (cut into ``chunk_size`` pieces,
    or replayed as the given ``pieces``); ``content``, ``reasoning`` and ``tool_calls``
    (``{"id", "name", "arguments"}`` with arguments as a JSON string) are for
    /v1/chat/completions."""

    text: str = ""
    pieces: tuple[str, ...] = ()
    content: str = ""
    reasoning: str = ""
    tool_calls: tuple[dict[str, str], ...] = ()
    finish_reason: str = "stop"
    stop_reason: str | None = None
    chunk_size: int = 5
    interval: float = 0.0
    status: int = 200
    hang_after: int | None = None
    drop_after: int | None = None
    malformed_after: int | None = None


@dataclass
class FakeEngine:
    """The scripted engine; ``app`` is the ASGI callable."""

    default: Reply = field(default_factory=lambda: Reply(text="Hello.", content="Hello."))
    script: deque[Reply] = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)
    authorizations: list[str | None] = field(default_factory=list)
    disconnects: int = 0
    #: ``on_chunk(request_body, chunk_index)`` is called just before a chunk is sent.
    on_chunk: Callable[[dict[str, Any], int], None] | None = None

    def push(self, *replies: Reply) -> None:
        self.script.extend(replies)

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        body = await _read_body(receive)
        path = scope["path"]
        if scope["method"] != "POST" or path not in ("/v1/completions", "/v1/chat/completions"):
            await _send_json(send, 404, {"error": {"message": f"no route {path}", "code": 404}})
            return
        request = json.loads(body)
        self.requests.append(request)
        headers = dict(scope["headers"])
        authorization = headers.get(b"authorization")
        self.authorizations.append(authorization.decode() if authorization else None)
        reply = self.script.popleft() if self.script else self.default
        if reply.status != 200:
            error = {"message": f"scripted failure {reply.status}", "type": "server_error"}
            await _send_json(send, reply.status, {"error": error})
            return
        usage_wanted = bool((request.get("stream_options") or {}).get("include_usage"))
        if path == "/v1/completions":
            chunks = list(_completion_chunks(reply, request, usage_wanted))
        else:
            chunks = list(_chat_chunks(reply, request, usage_wanted))
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        for index, chunk in enumerate(chunks):
            if index == reply.hang_after:
                await _wait_for_disconnect(receive)
                self.disconnects += 1
                return
            if index == reply.drop_after:
                raise ConnectionAbortedError("fake engine: dropping the stream as scripted")
            if index == reply.malformed_after:
                await _send_body(send, b'data: {"choices": [{"text": "trunc\n\n')
            if self.on_chunk is not None:
                self.on_chunk(request, index)
            await _send_body(send, b"data: " + json.dumps(chunk).encode() + b"\n\n")
            if reply.interval:
                await asyncio.sleep(reply.interval)
        await _send_body(send, b"data: [DONE]\n\n")
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _pieces(text: str, size: int) -> Iterator[str]:
    for start in range(0, len(text), size):
        yield text[start : start + size]


def _usage(request: dict[str, Any], completion_tokens: int) -> dict[str, int]:
    prompt = request.get("prompt", request.get("messages", ""))
    prompt_tokens = len(prompt) if isinstance(prompt, list) else len(str(prompt)) // 4
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _envelope(kind: str, request: dict[str, Any], choices: list[Any]) -> dict[str, Any]:
    return {
        "id": "fake-1",
        "object": kind,
        "created": int(time.time()),
        "model": request.get("model", "fake"),
        "choices": choices,
    }


def _completion_chunks(
    reply: Reply, request: dict[str, Any], usage_wanted: bool
) -> Iterator[dict[str, Any]]:
    count = 0
    for piece in reply.pieces or _pieces(reply.text, reply.chunk_size):
        count += 1
        choice = {"index": 0, "text": piece, "logprobs": None, "finish_reason": None}
        yield _envelope("text_completion", request, [choice])
    final = {
        "index": 0,
        "text": "",
        "logprobs": None,
        "finish_reason": reply.finish_reason,
        "stop_reason": reply.stop_reason,
    }
    yield _envelope("text_completion", request, [final])
    if usage_wanted:
        yield {**_envelope("text_completion", request, []), "usage": _usage(request, count)}


def _chat_chunks(
    reply: Reply, request: dict[str, Any], usage_wanted: bool
) -> Iterator[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return _envelope("chat.completion.chunk", request, [choice])

    count = 0
    yield chunk({"role": "assistant", "content": ""})
    for key, text in (("reasoning_content", reply.reasoning), ("content", reply.content)):
        for piece in _pieces(text, reply.chunk_size):
            count += 1
            yield chunk({key: piece})
    for index, call in enumerate(reply.tool_calls):
        head = {"name": call["name"], "arguments": ""}
        yield chunk(
            {
                "tool_calls": [
                    {"index": index, "id": call["id"], "type": "function", "function": head}
                ]
            }
        )
        for piece in _pieces(call["arguments"], reply.chunk_size):
            count += 1
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, reply.finish_reason)
    if usage_wanted:
        yield {**_envelope("chat.completion.chunk", request, []), "usage": _usage(request, count)}


async def _read_body(receive: Receive) -> bytes:
    parts = []
    while True:
        message = await receive()
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(parts)


async def _wait_for_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _send_body(send: Send, data: bytes) -> None:
    await send({"type": "http.response.body", "body": data, "more_body": True})


async def _send_json(send: Send, status: int, payload: dict[str, Any]) -> None:
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps(payload).encode()})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
