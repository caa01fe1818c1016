"""CPU-bound request work off the event loop, when it is large enough to be worth a thread."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import anyio.to_thread

T = TypeVar("T")

#: Requests whose body has at least this many bytes are decoded and rendered in a worker
#: thread; smaller ones run inline, where the hop to a thread and back costs more than the
#: work (docs/server.md, Benchmark, gives the figures).
THREADED_BODY_BYTES = 256 * 1024


async def run_for_body(body_bytes: int, work: Callable[..., T], *args: Any) -> T:
    """``work(*args)`` for a request of ``body_bytes``: inline below
    :data:`THREADED_BODY_BYTES`, else in a worker thread (the event loop serves on)."""
    if body_bytes < THREADED_BODY_BYTES:
        return work(*args)
    return await anyio.to_thread.run_sync(work, *args)
