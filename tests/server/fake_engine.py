"""A fake inference engine for the gateway tests and benchmark (a small raw ASGI app).

It behaves like vLLM 0.33 where the gateway depends on it:

* ``GET /v1/models`` lists the served names with ``max_model_len``; ``GET /health``;
* ``POST /tokenize`` encodes with the engine's own tokenizer as vLLM does: the whole string
  at once, text that spells an added token (``<｜User｜>``) becoming its id, BOS first
  unless ``add_special_tokens`` is false;
* ``POST /v1/completions`` takes a string or token-id prompt, answers 404 for a model it
  does not serve and 400 for ids out of its vocabulary or a prompt plus ``max_tokens``
  past ``max_model_len``; ``max_tokens`` missing or null means 16; the scripted text is
  tokenized and generation stops after ``max_tokens`` tokens (``finish_reason: length``)
  or at a stop string (``stop_reason`` names it); with ``stream_options.include_usage``
  a last chunk with ``choices: []`` carries the usage;
* DeepSeek's hosted endpoints (:mod:`tests.server.fake_hosted`): a leaky
  ``POST /v1/chat/completions`` (DSML left in ``content`` / ``reasoning_content``, like
  some hosted endpoints), as SSE when ``stream`` is true and else as one
  ``chat.completion``, and the Anthropic-format ``POST /v1/messages`` (SSE, DSML left in
  its text blocks), with the same model check and the hosted DeepSeek API's 400s
  (:func:`~tests.server.fake_hosted.hosted_refusal`: reasoning not passed back in thinking
  mode, a forced tool choice in thinking mode, a ``metadata.user_id`` of other characters).

Each completion takes the next scripted :class:`Reply` (or ``default``), streams it a few
tokens per chunk and can fail on demand: an error status, a hang, a dropped connection, a
malformed SSE event after N chunks, or a raw body. Received bodies are kept in
``requests`` (their Authorization headers in ``authorizations``, all their headers in
``headers``); ``disconnects``
counts clients that went away while it was hanging.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from tokenizers import Tokenizer

from dsmlkit.dialects import BOS
from dsmlkit.render.tokens import bundled_tokenizer_path
from tests.server.fake_hosted import (
    MESSAGES_PATH,
    chat_chunks,
    chat_completion,
    envelope,
    error_body,
    hosted_refusal,
    messages_events,
    sse_bytes,
    stream_end,
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

#: vLLM's default when a completion request has no max_tokens (or null).
VLLM_DEFAULT_MAX_TOKENS = 16


@dataclass(frozen=True)
class Reply:
    """One scripted answer. ``text`` is for /v1/completions (tokenized, ``chunk_size``
    tokens per chunk, or replayed as the given ``pieces``); ``pieces`` (as content deltas),
    ``content``, ``reasoning`` and ``tool_calls`` (``{"id", "name", "arguments"}`` with
    arguments as a JSON string) are for /v1/chat/completions. ``blocks`` is for
    /v1/messages: the answer's content after its thinking and before its calls, in order,
    in place of ``pieces`` and ``content`` (a string is a text block; a dict a block as a
    hosted endpoint's server tools return it: :func:`~tests.server.fake_hosted.block_events`).
    ``raw`` replaces the whole 200 body (with ``headers``). A stop string of the request in
    ``text`` ends the answer there, as in vLLM."""

    text: str = ""
    pieces: tuple[str, ...] = ()
    content: str = ""
    reasoning: str = ""
    tool_calls: tuple[dict[str, str], ...] = ()
    blocks: tuple[str | dict[str, Any], ...] = ()
    finish_reason: str = "stop"
    stop_reason: str | None = None
    chunk_size: int = 2
    interval: float = 0.0
    status: int = 200
    hang_after: int | None = None
    drop_after: int | None = None
    malformed_after: int | None = None
    raw: bytes | None = None
    headers: tuple[tuple[str, str], ...] = ()
    #: Answer on past the request's stop strings (an engine that ignores them).
    ignore_stop: bool = False


#: A stand-in for the V4.1 tokenizer file: the bundled V4 file with two placeholder tokens
#: renamed to the V4.1 template tokens it lacks (the real ids may differ).
V41_RENAMES = {
    "<｜place▁holder▁no▁0｜>": "<｜System｜>",
    "<｜place▁holder▁no▁1｜>": "<｜deepseek_image｜>",
}


def tokenizer_json(renames: dict[str, str] | None = None) -> str:
    """The bundled DeepSeek ``tokenizer.json`` with added tokens renamed."""
    spec = json.loads(bundled_tokenizer_path().read_text(encoding="utf-8"))
    for token in spec["added_tokens"]:
        token["content"] = (renames or {}).get(token["content"], token["content"])
    return json.dumps(spec)


def engine_tokenizer(renames: dict[str, str] | None = None) -> Tokenizer:
    """A tokenizer as an engine loads it (added tokens matched in any text)."""
    return Tokenizer.from_str(tokenizer_json(renames))


@dataclass
class FakeEngine:
    """The scripted engine; ``app`` is the ASGI callable."""

    default: Reply = field(default_factory=lambda: Reply(text="Hello.", content="Hello."))
    served: tuple[str, ...] = ("deepseek-v4.1",)
    max_model_len: int = 163840
    tokenizer: Tokenizer = field(default_factory=lambda: engine_tokenizer(V41_RENAMES))
    script: deque[Reply] = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)
    authorizations: list[str | None] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    disconnects: int = 0
    #: ``on_chunk(request_body, chunk)`` is called just before a chunk is sent.
    on_chunk: Callable[[dict[str, Any], dict[str, Any]], None] | None = None
    #: Seconds ``/tokenize`` waits before it answers.
    tokenize_delay: float = 0.0
    #: ``/tokenize`` requests answered.
    tokenized: int = 0

    def push(self, *replies: Reply) -> None:
        self.script.extend(replies)

    def next_reply(self, request: dict[str, Any]) -> Reply:
        """The reply to ``request``: the next scripted one, else ``default``."""
        return self.script.popleft() if self.script else self.default

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """vLLM's encoding of a string: added tokens matched anywhere, BOS first."""
        ids: list[int] = self.tokenizer.encode(text, add_special_tokens=False).ids
        bos = self.tokenizer.token_to_id(BOS)
        if add_special_tokens and bos is not None and ids[:1] != [bos]:
            ids.insert(0, bos)
        return ids

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        body = await _read_body(receive)
        route = (scope["method"], scope["path"])
        if route == ("GET", "/health"):
            await _send_json(send, 200, {})
        elif route == ("GET", "/v1/models"):
            await _send_json(send, 200, self.models())
        elif route == ("POST", "/tokenize"):
            await self._tokenize(send, json.loads(body))
        elif route in (
            ("POST", "/v1/completions"),
            ("POST", "/v1/chat/completions"),
            ("POST", MESSAGES_PATH),
        ):
            await self._generate(scope, receive, send, json.loads(body))
        else:
            await _send_error(send, 404, f"no route {scope['path']}", "NotFoundError")

    def models(self) -> dict[str, Any]:
        """The ``GET /v1/models`` listing: every served name with ``max_model_len``."""
        cards = [
            {
                "id": name,
                "object": "model",
                "created": 0,
                "owned_by": "vllm",
                "root": self.served[0],
                "parent": None,
                "max_model_len": self.max_model_len,
            }
            for name in self.served
        ]
        return {"object": "list", "data": cards}

    def _unknown_model(self, request: dict[str, Any]) -> str | None:
        model = request.get("model")
        if model is None or model in self.served:
            return None
        return f"The model `{model}` does not exist."

    async def _tokenize(self, send: Send, request: dict[str, Any]) -> None:
        await asyncio.sleep(self.tokenize_delay)
        if (unknown := self._unknown_model(request)) is not None:
            await _send_error(send, 404, unknown, "NotFoundError", "model")
            return
        ids = self.encode(request["prompt"], request.get("add_special_tokens", True))
        self.tokenized += 1
        answer: dict[str, Any] = {
            "count": len(ids),
            "max_model_len": self.max_model_len,
            "tokens": ids,
        }
        if request.get("return_token_strs"):
            answer["token_strs"] = [self.tokenizer.id_to_token(i) for i in ids]
        await _send_json(send, 200, answer)

    def _prompt_ids(self, request: dict[str, Any]) -> list[int]:
        prompt = request.get("prompt")
        if isinstance(prompt, list):
            return list(prompt)
        if isinstance(prompt, str):
            return self.encode(prompt, request.get("add_special_tokens", True))
        text = json.dumps(request.get("messages", []), ensure_ascii=False)
        return self.encode(text, False)  # a stand-in for the chat template

    async def _generate(
        self, scope: Scope, receive: Receive, send: Send, request: dict[str, Any]
    ) -> None:
        self.requests.append(request)
        authorization = dict(scope["headers"]).get(b"authorization")
        self.authorizations.append(authorization.decode() if authorization else None)
        self.headers.append({k.decode(): v.decode() for k, v in scope["headers"]})
        path = scope["path"]
        if (unknown := self._unknown_model(request)) is not None or "model" not in request:
            message = unknown or "model is required"
            await _send_error(send, 404, message, "NotFoundError", "model", path)
            return
        prompt_ids = self._prompt_ids(request)
        vocab = self.tokenizer.get_vocab_size(with_added_tokens=True)
        bad = [i for i in prompt_ids if not 0 <= i < vocab]
        if bad:
            await _send_error(
                send, 400, f"Token id {bad[0]} is out of vocabulary", "BadRequestError"
            )
            return
        completions = path == "/v1/completions"
        refusal = None if completions else hosted_refusal(path, request)
        if refusal is not None:
            await _send_error(send, 400, refusal, "invalid_request_error", None, path)
            return
        asked = request.get("max_tokens", request.get("max_completion_tokens"))
        if asked is None:
            default = self.max_model_len - len(prompt_ids)
            asked = VLLM_DEFAULT_MAX_TOKENS if completions else default
        if len(prompt_ids) + asked > self.max_model_len:
            message = (
                f"This model's maximum context length is {self.max_model_len} tokens. However, "
                f"you requested {asked} output tokens and your prompt contains "
                f"{len(prompt_ids)} input tokens, for a total of {len(prompt_ids) + asked}."
            )
            await _send_error(send, 400, message, "BadRequestError")
            return
        reply = self.next_reply(request)
        if reply.status != 200:
            message = f"scripted failure {reply.status}"
            await _send_error(send, reply.status, message, "server_error", None, path)
            return
        if not completions and reply.raw is None and request.get("stream") is not True:
            await _send_json(send, 200, chat_completion(reply, request))
            return
        headers = [(b"content-type", b"text/event-stream")]
        headers += [(k.encode(), v.encode()) for k, v in reply.headers]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        if reply.raw is not None:
            await send({"type": "http.response.body", "body": reply.raw})
            return
        usage_wanted = bool((request.get("stream_options") or {}).get("include_usage"))
        if completions:
            chunks = list(self._completion_chunks(reply, request, prompt_ids, asked))
        elif path == MESSAGES_PATH:
            chunks = list(messages_events(reply, request, len(prompt_ids)))
            usage_wanted = False  # the events carry it
        else:
            chunks = list(chat_chunks(reply, request))
        if usage_wanted:
            completion_tokens = sum(chunk.pop("_tokens", 0) for chunk in chunks)
            usage = {
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": completion_tokens,
                "total_tokens": len(prompt_ids) + completion_tokens,
            }
            chunks.append({**envelope(chunks[0]["object"], request, []), "usage": usage})
        for chunk in chunks:
            chunk.pop("_tokens", None)
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
                self.on_chunk(request, chunk)
            await _send_body(send, sse_bytes(path, chunk))
            if reply.interval:
                await asyncio.sleep(reply.interval)
        await _send_body(send, stream_end(path))
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _completion_chunks(
        self, reply: Reply, request: dict[str, Any], prompt_ids: list[int], max_tokens: int
    ) -> Iterator[dict[str, Any]]:
        """The scripted text as vLLM streams it: cut at a stop string (excluded) or after
        ``max_tokens`` tokens, a few tokens per chunk."""
        text, finish, stop_reason = reply.text, reply.finish_reason, reply.stop_reason
        stops = request.get("stop") or []
        hits = [(text.find(s), s) for s in ([stops] if isinstance(stops, str) else stops)]
        hits = [hit for hit in hits if hit[0] >= 0]
        if hits and not reply.pieces and not reply.ignore_stop:
            at, stop = min(hits)
            text, finish, stop_reason = text[:at], "stop", stop
        if reply.pieces:
            pieces = [(piece, len(self.encode(piece, False))) for piece in reply.pieces]
        else:
            pieces = list(self._pieces(self.encode(text, False), reply.chunk_size))
        used = 0
        for piece, tokens in pieces:
            if used + tokens > max_tokens:
                finish, stop_reason = "length", None
                break
            used += tokens
            choice = {"index": 0, "text": piece, "logprobs": None, "finish_reason": None}
            yield {**envelope("text_completion", request, [choice]), "_tokens": tokens}
        final = {
            "index": 0,
            "text": "",
            "logprobs": None,
            "finish_reason": finish,
            "stop_reason": stop_reason,
        }
        yield envelope("text_completion", request, [final])

    def _pieces(self, ids: list[int], size: int) -> Iterator[tuple[str, int]]:
        """Incremental detokenization: a piece is released once its bytes are whole."""
        start = 0
        for end in range(size, len(ids) + size, size):
            end = min(end, len(ids))
            piece = self.tokenizer.decode(ids[start:end], skip_special_tokens=False)
            if piece.endswith("\ufffd") and end < len(ids):
                continue
            yield piece, end - start
            start = end
            if end >= len(ids):
                break


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


async def _send_error(
    send: Send,
    status: int,
    message: str,
    kind: str,
    param: str | None = None,
    path: str = "/v1/completions",
) -> None:
    """vLLM's error body, ``{"error": {"message", "type", "param", "code": status}}``, or
    at ``/v1/messages`` Anthropic's (:func:`~tests.server.fake_hosted.error_body`)."""
    await _send_json(send, status, error_body(path, status, message, kind, param))


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
