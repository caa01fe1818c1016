"""EventStream: texts go straight to ASGI send; a disconnect cancels the body; finish runs;
CancelOnDisconnect ends only its own cancellation."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncGenerator

import anyio
import pytest
from starlette.types import Message, Scope

from dsmlkit.server.event_stream import CancelOnDisconnect, EventStream, LastText


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

    def finish(self) -> None:
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


def test_a_last_text_ends_the_body_in_the_same_message() -> None:
    closed: list[bool] = []

    async def body() -> AsyncGenerator[str, None]:
        try:
            yield "data: a\n\n"
            yield LastText("data: [DONE]\n\n")
            yield "never sent"
        finally:
            closed.append(True)

    client = _Client()
    _run(body(), client)
    assert [(m["body"], m["more_body"]) for m in client.sent[1:]] == [
        (b"data: a\n\n", True),
        (b"data: [DONE]\n\n", False),
    ]
    assert closed == [True]
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


def test_after_a_disconnect_the_task_goes_on_uncancelled() -> None:
    """The watch's cancellation ends with its block: later awaits of the same task run
    (on Python 3.11+ its cancel count is back to zero, so timeouts still work)."""
    client = _Client()
    after: list[str] = []

    async def main() -> None:
        async with CancelOnDisconnect(client.receive) as watch:
            client.leave.set()
            await anyio.sleep_forever()
        task = asyncio.current_task()
        assert task is not None
        assert watch.disconnected
        if sys.version_info >= (3, 11):
            assert task.cancelling() == 0
        await asyncio.sleep(0)
        with anyio.fail_after(5):
            await asyncio.sleep(0.01)
        after.append("ran")

    asyncio.run(main())
    assert after == ["ran"]


def test_a_cancellation_from_elsewhere_passes_through() -> None:
    client = _Client()  # never leaves

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().call_later(0.01, task.cancel)
        async with CancelOnDisconnect(client.receive) as watch:
            await anyio.sleep_forever()
        raise AssertionError(f"not reached (disconnected={watch.disconnected})")

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(main())


def test_a_block_that_ends_first_leaves_no_watcher_behind() -> None:
    client = _Client()

    async def main() -> None:
        async with CancelOnDisconnect(client.receive) as watch:
            await asyncio.sleep(0)
        await asyncio.sleep(0)  # the watcher's cancellation is delivered
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        assert others == []
        assert not watch.disconnected

    asyncio.run(main())
