"""A fault-injecting inference engine on raw asyncio sockets, for the fault suite.

No web framework: it reads and writes HTTP/1.1 itself, so that it can break the protocol
where a framework would not let it. It speaks what the gateway's upstream client uses:

* ``GET /v1/models`` (one model, with ``max_model_len``) and ``GET /health``;
* ``POST /v1/completions`` and ``POST /v1/chat/completions``, always answered as an SSE
  stream in chunked encoding, on keep-alive connections (``/tokenize`` answers 404: an
  engine without it, so ``--tokenizer none`` sends text and counts nothing upstream).

Each completion takes the reply of the first marker (:meth:`FaultEngine.mark`) its body
holds, else the next scripted :class:`Reply`, else ``default``: the text of a
``/v1/completions`` answer, or the ``content``, ``reasoning`` and ``tool_calls`` of a chat
answer (so content faults such as undeclared tools or repeated call ids are scripted the
same way), and at most one transport :data:`Fault`.

Connections are counted (``opened``, ``closed``, and those a fault was served on that are
still open, :meth:`FaultEngine.faulted_open`), so a test can assert the gateway closed
the connection of a failed request; ``requests`` keeps each completion body received.
Run it with :func:`fault_engine` (a thread with its own event loop).
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, Literal

#: What a reply does to the transport:
#:
#: * ``broken_chunk``: one valid chunk, then ``zzzz\r\n`` (no chunk size), and the socket
#:   held open until the peer closes it;
#: * ``silent_close``: the whole answer, then, :data:`CLOSE_DELAY` later, the connection
#:   closed without a ``Connection: close`` (an engine that does not keep connections
#:   alive and does not say so); a request sent on it meanwhile is never read;
#: * ``reset``: ``after`` chunks, then a TCP reset;
#: * ``stall_headers``: the request read, nothing sent, the socket held open;
#: * ``stall_mid``: the headers and ``after`` chunks, then nothing, the socket held open;
#: * ``huge_line``: ``after`` chunks, then one SSE line of ``line_bytes`` bytes (a JSON
#:   event whose text is that long), then the rest of the answer;
#: * ``invalid_utf8``: the answer with bytes that are not UTF-8 (``\xff\xfe``) in its first
#:   text.
Fault = Literal[
    "broken_chunk",
    "silent_close",
    "reset",
    "stall_headers",
    "stall_mid",
    "huge_line",
    "invalid_utf8",
]

#: The faults that come after ``after`` chunks.
_BREAKS = ("broken_chunk", "stall_mid", "reset", "huge_line")
#: The model the engine serves.
MODEL = "fault-engine"
#: How long after its answer a ``silent_close`` connection is closed.
CLOSE_DELAY = 0.05
#: How long a held socket waits for the peer to close it.
HOLD_SECONDS = 60.0
#: How long the engine waits before a fault, so that it arrives apart from what came before.
_PAUSE = 0.05
#: The size of each HTTP chunk of a long line.
_LINE_PIECE = 64 * 1024


@dataclass(frozen=True)
class Reply:
    """One scripted answer: ``text`` for ``/v1/completions``; ``content``, ``reasoning``
    and ``tool_calls`` (``{"id", "name", "arguments"}``, arguments a JSON string) for
    ``/v1/chat/completions``; streamed ``piece`` characters per event, the text (and the
    reasoning and content) ``repeat`` times over (a long answer the engine never holds);
    ``fault`` (with ``after`` chunks before it, ``line_bytes`` for ``huge_line``)."""

    text: str = "Hello."
    content: str = "Hello."
    reasoning: str = ""
    tool_calls: tuple[dict[str, str], ...] = ()
    finish_reason: str | None = None  # default: "tool_calls" with calls, else "stop"
    piece: int = 8
    repeat: int = 1
    fault: Fault | None = None
    after: int = 1
    line_bytes: int = 50 * 1024 * 1024


@dataclass
class FaultEngine:
    """The scripted engine; ``url`` is its ``/v1`` base once running."""

    default: Reply = field(default_factory=Reply)
    script: deque[Reply] = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)
    opened: int = 0
    closed: int = 0
    #: SSE events written (and taken by the socket: each write waits for its buffer).
    events_sent: int = 0
    url: str = ""
    _marked: dict[str, Reply] = field(default_factory=dict)
    _faulted: set[int] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def push(self, *replies: Reply) -> None:
        with self._lock:
            self.script.extend(replies)

    def mark(self, marker: str, reply: Reply) -> None:
        """Answer every completion whose body holds ``marker`` (e.g. in its prompt) with
        ``reply``: concurrent requests each get their own."""
        with self._lock:
            self._marked[marker] = reply

    def faulted_open(self) -> int:
        """Connections a fault was served on that the peer has not closed yet."""
        with self._lock:
            return len(self._faulted)

    def wait_faulted_closed(self, timeout: float) -> int:
        """:meth:`faulted_open`, once it is 0 or ``timeout`` has passed."""
        deadline = time.monotonic() + timeout
        while self.faulted_open() and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.faulted_open()

    def _next_reply(self, body: bytes) -> Reply:
        with self._lock:
            text = body.decode("utf-8", "replace")
            marked = next((r for m, r in self._marked.items() if m in text), None)
            if marked is not None:
                return marked
            return self.script.popleft() if self.script else self.default

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection: requests answered in turn until the peer closes or a fault ends
        it."""
        with self._lock:
            self.opened += 1
        try:
            while await self._answer(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            with self._lock:
                self.closed += 1
                self._faulted.discard(id(writer))
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Read and answer one request; False when the connection is done."""
        head = await reader.readuntil(b"\r\n\r\n")
        method, path = head.split(b" ", 2)[:2]
        headers = dict(
            (name.strip().lower(), value.strip())
            for name, _, value in (line.partition(b":") for line in head.split(b"\r\n")[1:])
            if name
        )
        body = await reader.readexactly(int(headers.get(b"content-length", b"0")))
        route = (method.decode(), path.decode().split("?")[0])
        if route == ("GET", "/v1/models"):
            card = {"id": MODEL, "object": "model", "max_model_len": 163840}
            await _send_json(writer, 200, {"object": "list", "data": [card]})
        elif route == ("GET", "/health"):
            await _send_json(writer, 200, {})
        elif route[0] == "POST" and route[1] in ("/v1/completions", "/v1/chat/completions"):
            request = json.loads(body)
            with self._lock:
                self.requests.append(request)
            reply = self._next_reply(body)
            return await self._stream(reader, writer, request, reply, route[1] == "/v1/completions")
        else:
            await _send_json(writer, 404, {"error": {"message": "not found", "code": 404}})
        return True

    async def _stream(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        request: dict[str, Any],
        reply: Reply,
        completions: bool,
    ) -> bool:
        """One completion as SSE, with its reply's fault; False when the connection is done."""
        if reply.fault in _BREAKS or reply.fault == "stall_headers":  # the peer must close
            with self._lock:
                self._faulted.add(id(writer))
        if reply.fault == "stall_headers":
            await _hold(reader)
            return False
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        events = _events(reply, request, completions)
        for index, event in enumerate(events):
            if index == reply.after and reply.fault in _BREAKS:
                await asyncio.sleep(_PAUSE)
                if reply.fault != "huge_line":
                    return await self._break(reader, writer, reply.fault)
                await _send_line(writer, reply.line_bytes, completions)
            writer.write(_chunk(b"data: " + event + b"\n\n"))
            await writer.drain()
            self.events_sent += 1
        writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()
        if reply.fault == "silent_close":
            await asyncio.sleep(CLOSE_DELAY)
            return False
        return True

    async def _break(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, fault: Fault
    ) -> bool:
        if fault == "broken_chunk":
            writer.write(b"zzzz\r\n")
            await writer.drain()
        elif fault == "reset":
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return False
        await _hold(reader)
        return False


def _events(reply: Reply, request: dict[str, Any], completions: bool) -> Iterator[bytes]:
    """The ``data:`` payloads of ``reply`` (the text or deltas ``repeat`` times, the
    calls, the finish, the usage), made as they are sent."""
    kind = "text_completion" if completions else "chat.completion.chunk"
    envelope = {"id": "cmpl-fault", "object": kind, "created": 0, "model": MODEL}
    count = 0
    for choice in _choices(reply, completions):
        payload = json.dumps({**envelope, "choices": [{"index": 0, **choice}]}).encode()
        if count == 1 and reply.fault == "invalid_utf8":
            payload = payload.replace(b'"text": "', b'"text": "\xff\xfe', 1)
            payload = payload.replace(b'"content": "', b'"content": "\xff\xfe', 1)
        count += 1
        yield payload
    if (request.get("stream_options") or {}).get("include_usage"):
        usage = {"prompt_tokens": 10, "completion_tokens": count, "total_tokens": 10 + count}
        yield json.dumps({**envelope, "choices": [], "usage": usage}).encode()


def _choices(reply: Reply, completions: bool) -> Iterator[dict[str, Any]]:
    finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
    step = reply.piece
    if completions:
        for _ in range(reply.repeat):
            for i in range(0, len(reply.text), step):
                yield {"text": reply.text[i : i + step], "finish_reason": None}
        yield {"text": "", "finish_reason": finish}
        return
    yield {"delta": {"role": "assistant", "content": ""}, "finish_reason": None}
    for key, text in (("reasoning_content", reply.reasoning), ("content", reply.content)):
        for _ in range(reply.repeat if text else 0):
            for i in range(0, len(text), step):
                yield {"delta": {key: text[i : i + step]}, "finish_reason": None}
    for index, call in enumerate(reply.tool_calls):
        function = {"name": call["name"], "arguments": call["arguments"]}
        delta = {"index": index, "id": call["id"], "type": "function", "function": function}
        yield {"delta": {"tool_calls": [delta]}, "finish_reason": None}
    yield {"delta": {}, "finish_reason": finish}


async def _send_line(writer: asyncio.StreamWriter, size: int, completions: bool) -> None:
    """One event whose text is ``size`` bytes long, in chunks of 64 KiB."""
    head = (
        b'{"choices":[{"index":0,"text":"'
        if completions
        else (b'{"choices":[{"index":0,"delta":{"content":"')
    )
    writer.write(_chunk(b"data: " + head))
    piece = _chunk(b"a" * _LINE_PIECE)
    for _ in range(size // _LINE_PIECE):
        writer.write(piece)
        await writer.drain()
    writer.write(_chunk(b'"}]}\n\n' if completions else b'"}}]}\n\n'))


async def _hold(reader: asyncio.StreamReader) -> None:
    """Wait (up to :data:`HOLD_SECONDS`) for the peer to close the connection."""
    with suppress(asyncio.TimeoutError):
        await asyncio.wait_for(reader.read(), HOLD_SECONDS)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def _send_json(writer: asyncio.StreamWriter, status: int, payload: Any) -> None:
    body = json.dumps(payload).encode()
    writer.write(
        b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
        % (status, len(body), body)
    )
    await writer.drain()


@contextmanager
def fault_engine(default: Reply | None = None) -> Iterator[FaultEngine]:
    """A running :class:`FaultEngine` on a free loopback port, in a thread of its own."""
    engine = FaultEngine(default or Reply())
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = asyncio.run_coroutine_threadsafe(
        asyncio.start_server(engine.serve, "127.0.0.1", 0, backlog=1024), loop
    ).result()
    port = server.sockets[0].getsockname()[1]
    engine.url = f"http://127.0.0.1:{port}/v1"
    try:
        yield engine
    finally:
        asyncio.run_coroutine_threadsafe(_stop(server), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


async def _stop(server: asyncio.Server) -> None:
    """Stop listening and end every connection's task."""
    server.close()
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
