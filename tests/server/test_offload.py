"""run_for_body: small requests' work inline on the event loop, large ones in a thread."""

from __future__ import annotations

import threading

import anyio

from dsmlkit.server.offload import THREADED_BODY_BYTES, run_for_body


def _thread_of(body_bytes: int) -> threading.Thread:
    async def main() -> threading.Thread:
        return await run_for_body(body_bytes, threading.current_thread)

    return anyio.run(main)


def test_small_bodies_run_inline_and_large_ones_in_a_worker_thread() -> None:
    assert _thread_of(THREADED_BODY_BYTES - 1) is threading.current_thread()
    assert _thread_of(THREADED_BODY_BYTES) is not threading.current_thread()
