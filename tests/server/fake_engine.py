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
  or at a stop string (``stop_reason`` names it), streamed text lagging by the longest
  stop string less one character (see :meth:`FakeEngine._completion_chunks`); usage counts
  the EOS token and a stop string's tokens; with ``stream_options.include_usage`` a last
  chunk with ``choices: []`` carries the usage; without ``stream``, one
  ``text_completion`` body with the usage;
* DeepSeek's hosted endpoints (:mod:`tests.server.fake_hosted`): a leaky
  ``POST /v1/chat/completions`` (DSML left in ``content`` / ``reasoning_content``, like
  some hosted endpoints), as SSE when ``stream`` is true and else as one
  ``chat.completion``, cut at ``max_tokens``, and the Anthropic-format
  ``POST /v1/messages`` (SSE, DSML left in its text blocks), with the same model check and
  the hosted DeepSeek API's 400s
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
from dataclasses import dataclass, field, replace
from typing import Any

from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream

from dsmlkit.dialects import BOS
from tests.helpers import v41_tokenizer_text
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


def engine_tokenizer() -> Tokenizer:
    """The tests' V4.1 tokenizer as an engine loads it (added tokens matched in any text)."""
    return Tokenizer.from_str(v41_tokenizer_text())


@dataclass
class FakeEngine:
    """The scripted engine; ``app`` is the ASGI callable."""

    default: Reply = field(default_factory=lambda: Reply(text="Hello.", content="Hello."))
    served: tuple[str, ...] = ("deepseek-v4.1",)
    max_model_len: int = 163840
    tokenizer: Tokenizer = field(default_factory=engine_tokenizer)
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
        if reply.raw is not None:
            headers = [(b"content-type", b"text/event-stream")]
            headers += [(k.encode(), v.encode()) for k, v in reply.headers]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": reply.raw})
            return
        if completions:
            chunks = list(self._completion_chunks(reply, request, asked))
            completion_tokens = sum(chunk.pop("_tokens") for chunk in chunks)
        elif path == MESSAGES_PATH:
            capped = self._chat_capped(reply, asked)
            chunks = list(messages_events(capped, request, len(prompt_ids)))
            completion_tokens = 0  # unused: the events carry their own usage
        else:
            chunks = list(chat_chunks(self._chat_capped(reply, asked), request))
            completion_tokens = self._chat_tokens(chunks)
        usage = {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": completion_tokens,
            "total_tokens": len(prompt_ids) + completion_tokens,
        }
        if request.get("stream") is not True and path != MESSAGES_PATH:
            whole = _completion(chunks) if completions else chat_completion(chunks)
            await _send_json(send, 200, {**whole, "usage": usage})
            return
        headers = [(b"content-type", b"text/event-stream")]
        headers += [(k.encode(), v.encode()) for k, v in reply.headers]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        wanted = (request.get("stream_options") or {}).get("include_usage")
        if wanted and path != MESSAGES_PATH:
            chunks.append({**envelope(chunks[0]["object"], request, []), "usage": usage})
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
        self, reply: Reply, request: dict[str, Any], max_tokens: int
    ) -> Iterator[dict[str, Any]]:
        """The scripted output as vLLM streams it (``_tokens``: what each chunk adds to the
        usage's ``completion_tokens``).

        Text is generated ``chunk_size`` tokens a step, one chunk a step. As in vLLM's
        detokenizer, while the request has stop strings the last ``len(longest) - 1``
        characters are held back (a step may stream ``""``) and released by the last
        chunk, which carries the finish; a stop string in the text ends the answer before
        it, the tokens up to the one that completes it counted. The engine stops after
        ``max_tokens`` tokens (``length``, the last token's text in that chunk), else
        after the text with the EOS token (counted, not shown) or, with a scripted
        ``stop_reason``, that stop string's tokens. ``pieces`` are replayed as given.
        """
        if reply.pieces:
            yield from self._replayed_chunks(reply, request, max_tokens)
            return
        stops = [] if reply.ignore_stop else _stop_strings(request)
        held = max((len(stop) for stop in stops), default=1) - 1
        ids = self.encode(reply.text, False)
        texts = self._token_texts(ids)
        text, sent, used = "", 0, 0
        for start in range(0, len(ids), reply.chunk_size):
            step = texts[start : start + reply.chunk_size][: max_tokens - used]
            if not step:
                break
            before = len(text)
            text += "".join(step)
            used += len(step)
            hit = _stop_hit(text, before, stops)
            if hit is not None:
                at, stop = hit
                kept = 1 + sum(
                    before + len("".join(step[:n])) < at + len(stop) for n in range(1, len(step))
                )
                yield self._completion_chunk(request, text[sent:at], kept, "stop", stop)
                return
            if used >= max_tokens or (
                start + len(step) >= len(ids) and reply.finish_reason == "length"
            ):
                yield self._completion_chunk(request, text[sent:], len(step), "length", None)
                return
            shown = max(sent, len(text) - held)
            yield self._completion_chunk(request, text[sent:shown], len(step), None, None)
            sent = shown
        if reply.stop_reason is not None:  # the engine's own stop string, not shown
            spent = len(self.encode(reply.stop_reason, False))
            yield self._completion_chunk(request, text[sent:], spent, "stop", reply.stop_reason)
        else:  # the EOS token
            ended = int(reply.finish_reason != "length")
            yield self._completion_chunk(request, text[sent:], ended, reply.finish_reason, None)

    def _replayed_chunks(
        self, reply: Reply, request: dict[str, Any], max_tokens: int
    ) -> Iterator[dict[str, Any]]:
        """``reply.pieces`` one chunk each, none past ``max_tokens``, then the finish."""
        finish, stop_reason, used = reply.finish_reason, reply.stop_reason, 0
        for piece in reply.pieces:
            tokens = len(self.encode(piece, False))
            if used + tokens > max_tokens:
                finish, stop_reason = "length", None
                break
            used += tokens
            yield self._completion_chunk(request, piece, tokens, None, None)
        yield self._completion_chunk(request, "", int(finish == "stop"), finish, stop_reason)

    @staticmethod
    def _completion_chunk(
        request: dict[str, Any], text: str, tokens: int, finish: str | None, stop: str | None
    ) -> dict[str, Any]:
        choice = {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": finish,
            "stop_reason": stop,
        }
        return {**envelope("text_completion", request, [choice]), "_tokens": tokens}

    def _token_texts(self, ids: list[int]) -> list[str]:
        """Each token's text as vLLM's incremental detokenizer releases it (a token that
        ends inside a character shows nothing, the next one the whole character)."""
        stream = DecodeStream(skip_special_tokens=False)
        return [stream.step(self.tokenizer, token) or "" for token in ids]

    def _chat_capped(self, reply: Reply, max_tokens: int) -> Reply:
        """The reply as vLLM ends it at ``max_tokens``: its reasoning, then its content,
        cut after that many tokens (``finish_reason: length``, no calls after the cut)."""
        reasoning = self.encode(reply.reasoning, False)
        content = self.encode(reply.content, False)
        if len(reasoning) + len(content) < max_tokens:
            return reply
        kept = (reasoning + content)[:max_tokens]
        cut = len(reasoning) >= max_tokens
        return replace(
            reply,
            reasoning=self.tokenizer.decode(kept[: len(reasoning)], skip_special_tokens=False),
            content=""
            if cut
            else self.tokenizer.decode(kept[len(reasoning) :], skip_special_tokens=False),
            tool_calls=(),
            finish_reason="length",
        )

    def _chat_tokens(self, chunks: list[dict[str, Any]]) -> int:
        """A chat answer's ``completion_tokens``: the tokens of all it streamed, plus the
        EOS token unless it was cut at ``max_tokens``."""
        texts = []
        for chunk in chunks:
            delta = chunk["choices"][0]["delta"]
            texts += [delta.get("content", ""), delta.get("reasoning_content", "")]
            texts += [call["function"]["arguments"] for call in delta.get("tool_calls", ())]
        ended = chunks[-1]["choices"][0]["finish_reason"] != "length"
        return len(self.encode("".join(texts), False)) + int(ended)


def _stop_strings(request: dict[str, Any]) -> list[str]:
    stops = request.get("stop") or []
    return [stops] if isinstance(stops, str) else list(stops)


def _stop_hit(text: str, before: int, stops: list[str]) -> tuple[int, str] | None:
    """vLLM's stop check after a step that grew ``text`` from ``before`` characters: the
    first stop string (in the request's order) found ending in the new characters."""
    for stop in stops:
        at = text.find(stop, max(0, before - len(stop) + 1))
        if at >= 0:
            return at, stop
    return None


def _completion(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """The whole answer as one ``text_completion`` (a request without ``stream``): the
    streamed chunks' text joined, the last one's finish."""
    last = chunks[-1]["choices"][0]
    text = "".join(chunk["choices"][0]["text"] for chunk in chunks)
    return {**chunks[-1], "choices": [{**last, "text": text}]}


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
