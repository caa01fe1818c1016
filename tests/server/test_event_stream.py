"""EventStream: texts go straight to ASGI send; a disconnect cancels the body; finish runs."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import anyio
import pytest
from starlette.types import Message, Scope

from dsmlkit.server.event_stream import EventStream


class _Client:
    """ASGI receive/send of one client: it disconnects once ``leave`` is set."""

    def __init__(self) -> None:
        self.sent: list[Message] = []
        self.leave = anyio.Event()
        self.finished = 0

    async def receive(self) -> Message:
        await self.leave.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        self.sent.append(message)

    async def finish(self) -> None:
        self.finished += 1


def _run(body: AsyncGenerator[str, None], client: _Client) -> None:
    stream = EventStream(body, {"cache-control": "no-cache"}, client.finish)
    scope: Scope = {"type": "http"}
    anyio.run(stream, scope, client.receive, client.send)


def test_each_text_is_one_body_message_then_the_end_then_finish() -> None:
    async def body() -> AsyncGenerator[str, None]:
        yield "data: a\n\n"
        yield "data: é\n\n"

    client = _Client()
    _run(body(), client)
    start, *parts = client.sent
    assert start["status"] == 200
    assert start["headers"] == [
        (b"cache-control", b"no-cache"),
        (b"content-type", b"text/event-stream; charset=utf-8"),
    ]
    assert [(p["body"], p["more_body"]) for p in parts] == [
        (b"data: a\n\n", True),
        ("data: é\n\n".encode(), True),
        (b"", False),
    ]
    assert client.finished == 1


def test_a_disconnect_cancels_the_body_and_finish_still_runs() -> None:
    client = _Client()
    cancelled: list[bool] = []

    async def body() -> AsyncGenerator[str, None]:
        yield "data: a\n\n"
        client.leave.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            cancelled.append(True)
            raise
        yield "never"

    _run(body(), client)
    assert cancelled == [True]
    assert [m.get("body") for m in client.sent[1:]] == [b"data: a\n\n"]
    assert client.finished == 1


def test_a_failing_body_still_runs_finish() -> None:
    async def body() -> AsyncGenerator[str, None]:
        yield "data: a\n\n"
        raise RuntimeError("bug")

    client = _Client()
    with pytest.raises(RuntimeError, match="bug"):
        _run(body(), client)
    assert client.finished == 1
