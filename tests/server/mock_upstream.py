"""An upstream that answers through a function of an ``httpx.Request``, served on loopback.

The gateway's upstream client is a real HTTP client, so answers the fake engine does not
produce (odd SSE, wrong content types, bodies declared gzip that are not) are written by
a handler and sent over a socket as they are: the handler's ``httpx.Response`` goes out
raw (status, headers, undecoded body).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from tests.server.loopback import serve_in_thread

Handler = Callable[[httpx.Request], httpx.Response]


class _HandlerApp:
    """An ASGI app that answers every HTTP request with ``handler``'s response."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        url = f"http://{scope['server'][0]}:{scope['server'][1]}{scope['path']}"
        request = httpx.Request(scope["method"], url, headers=scope["headers"], content=body)
        response = self.handler(request)
        raw = response.stream  # as given: a body declared gzip that is not stays so
        assert isinstance(raw, httpx.SyncByteStream)
        content = b"".join(raw)
        headers = [
            (k.lower(), v) for k, v in response.headers.raw if k.lower() != b"content-length"
        ]
        headers.append((b"content-length", str(len(content)).encode()))
        start = {"type": "http.response.start", "status": response.status_code, "headers": headers}
        await send(start)
        await send({"type": "http.response.body", "body": content})


@contextmanager
def mock_upstream(handler: Handler) -> Iterator[str]:
    """Serve ``handler`` on 127.0.0.1 and yield its base URL."""
    with serve_in_thread(_HandlerApp(handler)) as url:
        yield url


class ScriptedChat:
    """A hosted ``/v1/chat/completions`` as a :data:`Handler`: each request is answered with
    the next SSE body of the script (:meth:`play`), the last one again once it runs out,
    and its JSON body is kept in ``bodies`` as the upstream got it."""

    def __init__(self) -> None:
        self.bodies: list[Any] = []
        self._script: list[bytes] = []

    def play(self, *streams: bytes) -> None:
        """Answer the next requests with ``streams``; forget the bodies got so far."""
        self._script = list(streams)
        self.bodies = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content))
        stream = self._script[min(len(self.bodies), len(self._script)) - 1]
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=stream)


def chat_stream(*deltas: dict[str, Any], finish: str = "stop") -> bytes:
    """The SSE body of a streamed chat completion: one chunk per delta, a finish chunk, a
    usage chunk and ``[DONE]``."""
    head = {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    chunks = [
        {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        for delta in deltas
    ]
    chunks.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    usage = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    chunks.append({**head, "choices": [], "usage": usage})
    frames = [f"data: {json.dumps(chunk)}\n\n" for chunk in chunks]
    return ("".join(frames) + "data: [DONE]\n\n").encode()
