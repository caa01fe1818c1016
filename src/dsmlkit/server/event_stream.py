"""A ``text/event-stream`` answer written straight to the ASGI ``send``.

In place of Starlette's ``StreamingResponse`` with a ``BackgroundTask``: one body message
per text the body yields, a watcher that cancels the body when the client disconnects
(uvicorn's ASGI 2.3 ``send`` does not raise after a disconnect, so it must be watched),
and a ``finish`` that always runs last: after the last byte, after a disconnect, after a
failure, or when the body never started.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from contextlib import aclosing

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

#: The content type (as Starlette writes it for ``media_type="text/event-stream"``).
CONTENT_TYPE = (b"content-type", b"text/event-stream; charset=utf-8")


class EventStream(Response):
    """An ASGI app answering 200 with ``body``'s texts (UTF-8), then running ``finish``.

    ``headers`` come first, then the content type. A :class:`Response` for the routes'
    sake (what they return); none of its own sending is used."""

    def __init__(
        self,
        body: AsyncGenerator[str, None],
        headers: Mapping[str, str],
        finish: Callable[[], Awaitable[None]],
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
        failures: list[Exception] = []  # raised as they are, not in an exception group
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(watch_disconnect, receive, group.cancel_scope)
                try:
                    await self._send(send)
                except Exception as exc:
                    failures.append(exc)
                group.cancel_scope.cancel()  # the watcher's work is done
        finally:
            with anyio.CancelScope(shield=True):
                await self._finish()
        if failures:
            raise failures[0]

    async def _send(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        async with aclosing(self._body) as texts:
            async for text in texts:
                body = text.encode()
                await send({"type": "http.response.body", "body": body, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def watch_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    """Wait for the client to go away, then cancel ``scope`` (the answer's work)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()
