"""A ``text/event-stream`` answer written straight to the ASGI ``send``.

In place of Starlette's ``StreamingResponse`` with a ``BackgroundTask``: one body message
per text the body yields, a watcher that cancels the body when the client disconnects
(:class:`CancelOnDisconnect`; uvicorn's ASGI 2.3 ``send`` does not raise after a
disconnect, so it must be watched),
and a ``finish`` that always runs last: after the last byte, after a disconnect, after a
failure, or when the body never started.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import aclosing
from types import TracebackType
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

#: The content type (as Starlette writes it for ``media_type="text/event-stream"``).
CONTENT_TYPE = (b"content-type", b"text/event-stream; charset=utf-8")


class LastText(str):
    """A text the body yields as its last: it goes out with the end of the body, in one
    write (the body is closed after it)."""


class EventStream(Response):
    """An ASGI app answering 200 with ``body``'s texts (UTF-8), then running ``finish``.

    ``headers`` come first, then the content type. A :class:`Response` for the routes'
    sake (what they return); none of its own sending is used."""

    def __init__(
        self,
        body: AsyncGenerator[str, None],
        headers: Mapping[str, str],
        finish: Callable[[], None],
    ) -> None:
        self.status_code = 200
        self.background = None
        self.raw_headers = [
            *((name.encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()),
            CONTENT_TYPE,
        ]
        self._body = body
        self._finish = finish

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with CancelOnDisconnect(receive):
                await self._send(send)
        finally:
            self._finish()

    async def _send(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        async with aclosing(self._body) as texts:
            async for text in texts:
                last = type(text) is LastText
                await send(
                    {"type": "http.response.body", "body": text.encode(), "more_body": not last}
                )
                if last:
                    return
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class CancelOnDisconnect:
    """``async with CancelOnDisconnect(receive):`` runs its block until the client goes
    away: a watcher task reads ``receive`` and, on ``http.disconnect``, cancels the task
    in the block. That cancellation ends at the block's end (``disconnected`` tells it
    happened); any other passes through.

    Plain asyncio, not a task group: one small task per answer, which costs a fraction of
    a task group's CPU (docs/server.md, Benchmark, gives the figures).
    """

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self._inside: asyncio.Task[Any] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self.disconnected = False

    async def __aenter__(self) -> CancelOnDisconnect:
        self._inside = asyncio.current_task()
        self._watcher = asyncio.get_running_loop().create_task(self._watch())
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        inside, self._inside = self._inside, None  # the watcher cancels nothing from now on
        assert self._watcher is not None and inside is not None
        self._watcher.cancel()
        if not self.disconnected:
            return False
        uncancel = getattr(inside, "uncancel", None)  # Python 3.11+: the count goes back
        if uncancel is not None:
            uncancel()
        return kind is not None and issubclass(kind, asyncio.CancelledError)

    async def _watch(self) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass
        if self._inside is not None:
            self.disconnected = True
            self._inside.cancel()
