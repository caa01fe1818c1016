"""The gateway benchmark's engine on raw asyncio: a serving engine's SSE at about its own cost.

The ASGI fake engine (tests/server/fake_engine.py) under uvicorn spends most of its CPU per
chunk in uvicorn; this engine writes each chunk as one chunked-encoding frame in one socket
write, as vLLM's serving layer does, so the gateway's CPU per chunk can be set beside what an
engine itself spends. It serves a :class:`FakeEngine`'s script (``next_reply``,
``on_chunk``) and tokenizer, and speaks what the gateway and the benchmark use:

* ``GET /health``; ``GET /v1/models`` (with ``max_model_len``); ``POST /tokenize`` (the
  engine's encoding, ``count`` and ``tokens``);
* ``POST /v1/completions`` and ``POST /v1/chat/completions``, always streamed: each piece
  of the reply one chunk (completions: ``text``; chat: ``reasoning_content`` up to a
  ``</think>`` piece, ``content`` after it), one every ``interval``, then the finish chunk,
  the usage chunk when ``stream_options.include_usage`` asks for it, and ``[DONE]``;
* ``GET /stats``: the process's CPU seconds and the chunks sent so far, from which a caller
  takes the engine's own CPU per chunk over a phase.

HTTP/1.1 by hand, as much as that needs (it is a test double, not product code): a request
line, headers and a ``Content-Length`` body; keep-alive unless the client says ``close``.
"""

from __future__ import annotations

import asyncio
import gc
import json
import signal
import socket
import time
from collections.abc import Iterator
from typing import Any

from tests.server.fake_engine import FakeEngine, Reply

THINK_END = "</think>"
STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
)
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found"}


class RawEngine:
    """``engine``'s replies over raw asyncio; :meth:`run` serves until SIGTERM."""

    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine
        self.chunks = 0  # SSE events sent, [DONE] not counted

    def run(self, sock: socket.socket, backlog: int) -> None:
        gc.collect()
        gc.freeze()  # as serving engines do once loaded: collections skip the start-up heap
        asyncio.run(self._serve(sock, backlog))

    async def _serve(self, sock: socket.socket, backlog: int) -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        # asyncio listens again on the socket, with its own default backlog (100) unless told
        server = await asyncio.start_server(self._connection, sock=sock, backlog=backlog)
        async with server:
            await stop.wait()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._exchange(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away (between requests: the end of a kept-alive connection)
        except asyncio.CancelledError:
            pass  # the engine stops with a kept-alive connection still open (a pooling client)
        finally:
            writer.close()

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """One request and its answer; whether the connection stays open."""
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        method, target, version = head[0].split(" ", 2)
        headers = {}
        for line in filter(None, head[1:]):
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if "transfer-encoding" in headers:  # no client of this engine sends a chunked body
            await self._json(writer, 400, {"error": "send a Content-Length body"})
            return False
        body = await reader.readexactly(int(headers.get("content-length") or 0))
        route = method, target.split("?", 1)[0]
        if route == ("GET", "/health"):
            await self._json(writer, 200, {})
        elif route == ("GET", "/v1/models"):
            await self._json(writer, 200, self.engine.models())
        elif route == ("GET", "/stats"):
            await self._json(writer, 200, {"cpu": time.process_time(), "chunks": self.chunks})
        elif route == ("POST", "/tokenize"):
            request = json.loads(body)
            ids = self.engine.encode(request["prompt"], request.get("add_special_tokens", True))
            answer = {"count": len(ids), "max_model_len": self.engine.max_model_len}
            await self._json(writer, 200, {**answer, "tokens": ids})
        elif method == "POST" and route[1] in ("/v1/completions", "/v1/chat/completions"):
            await self._stream(writer, route[1] == "/v1/completions", json.loads(body))
        else:
            await self._json(writer, 404, {"error": f"no route {target}"})
        return version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"

    async def _json(self, writer: asyncio.StreamWriter, status: int, payload: Any) -> None:
        body = json.dumps(payload).encode()
        head = f"HTTP/1.1 {status} {REASONS[status]}\r\ncontent-type: application/json\r\n"
        writer.write(f"{head}content-length: {len(body)}\r\n\r\n".encode() + body)
        await writer.drain()

    async def _stream(
        self, writer: asyncio.StreamWriter, completions: bool, request: dict[str, Any]
    ) -> None:
        reply = self.engine.next_reply(request)
        writer.write(STREAM_HEAD)
        for chunk in _chunks(reply, request, completions, self._prompt_tokens(request)):
            if self.engine.on_chunk is not None:
                self.engine.on_chunk(request, chunk)
            await _frame(writer, b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.chunks += 1
            if reply.interval and chunk["choices"]:
                await asyncio.sleep(reply.interval)
        await _frame(writer, b"data: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    def _prompt_tokens(self, request: dict[str, Any]) -> int:
        prompt = request.get("prompt")
        if isinstance(prompt, list):
            return len(prompt)
        text = prompt if isinstance(prompt, str) else json.dumps(request.get("messages"))
        return len(self.engine.encode(text, False))


async def _frame(writer: asyncio.StreamWriter, data: bytes) -> None:
    """One chunk of the chunked body, in one write."""
    writer.write(b"%x\r\n%b\r\n" % (len(data), data))
    await writer.drain()


def _chunks(
    reply: Reply, request: dict[str, Any], completions: bool, prompt_tokens: int
) -> Iterator[dict[str, Any]]:
    """The reply's pieces as chunks (one token each), the finish and, if asked, the usage."""
    envelope = {
        "id": "raw-1",
        "object": "text_completion" if completions else "chat.completion.chunk",
        "created": int(time.time()),
        "model": request.get("model", "raw"),
    }

    def chunk(fields: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, **fields, "logprobs": None, "finish_reason": finish}
        return {**envelope, "choices": [choice]}

    pieces = reply.pieces
    if completions:
        yield from (chunk({"text": piece}) for piece in pieces)
        yield chunk({"text": "", "stop_reason": None}, reply.finish_reason)
    else:
        cut = pieces.index(THINK_END) if THINK_END in pieces else -1
        yield chunk({"delta": {"role": "assistant", "content": ""}})
        yield from (chunk({"delta": {"reasoning_content": p}}) for p in pieces[: max(cut, 0)])
        yield from (chunk({"delta": {"content": piece}}) for piece in pieces[cut + 1 :])
        yield chunk({"delta": {}}, reply.finish_reason)
    if (request.get("stream_options") or {}).get("include_usage"):
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": len(pieces)}
        usage["total_tokens"] = prompt_tokens + len(pieces)
        yield {**envelope, "choices": [], "usage": usage}
