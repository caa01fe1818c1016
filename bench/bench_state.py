"""State-store benchmark: what the reasoning round trip costs a request, per store.

For an agent-loop history of N assistant tool-call turns that all dropped their reasoning,
it times the restore stage on the typed request (``dsmlkit.server.restore.restore``: one
batched lookup, the conversation rebuilt) and
:meth:`ReasoningMemory.remember` (one batched write), against the memory store, a SQLite
file and a real Redis (a private ``redis-server`` on a free loopback port, when it is on
PATH). The baseline is the same history with its reasoning kept (its calls are still looked
up, for the model's own words).
A fixed number of rounds runs; the script stops by itself and prints its figures:

Then the memory store's byte bound in a real ``dsmlkit serve --state memory`` process (in
front of the fake engine, tests/server/fake_engine.py, in a thread here): ``--responses``
Responses requests with ``store`` on, each holding ``--response-mb`` of an earlier turn's
reasoning (stored with the turn; the renderer leaves the reasoning of a closed turn out of
the prompt, so the engine sees a few hundred bytes), for each ``--state-max-mb`` of
``--caps`` (``default``: the flag left out); it prints the server's resident memory
(VmRSS) before and after and its peak (VmHWM).

A fixed amount of work runs; the script stops by itself and prints its figures:

    python bench/bench_state.py                 # 50 turns, 300 rounds; 300 x 1 MB
    python bench/bench_state.py --turns 200 --caps default,64,16
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from tests.server.fake_engine import FakeEngine, Reply  # noqa: E402
from tests.server.loopback import serve_in_thread  # noqa: E402

from dsmlkit.api import ChatRequest, parse_request  # noqa: E402
from dsmlkit.parse import ReasoningDelta, ToolCallEnd  # noqa: E402
from dsmlkit.server.fold import AnswerTracker  # noqa: E402
from dsmlkit.server.reasoning_store import Digests, ReasoningMemory, ThinkingSigner  # noqa: E402
from dsmlkit.server.restore import restore  # noqa: E402
from dsmlkit.server.state_store import StateStore, open_store  # noqa: E402

REASONING = "I should look at the file before editing it. " * 20  # ~900 characters


def history(turns: int, keep_reasoning: bool) -> ChatRequest:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the bug."}]
    for turn in range(turns):
        call_id = f"call_{turn:024d}"
        call = {"id": call_id, "type": "function", "function": {"name": "read", "arguments": "{}"}}
        assistant: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
        if keep_reasoning:
            assistant["reasoning_content"] = REASONING
        messages += [assistant, {"role": "tool", "tool_call_id": call_id, "content": "ok"}]
    return parse_request("openai", {"model": "m", "messages": messages})


def answer(call_id: str) -> AnswerTracker:
    """The answer that issued ``call_id``: the reasoning, then ``read({})``."""
    tracker = AnswerTracker()
    tracker.add([ReasoningDelta(REASONING), ToolCallEnd(0, call_id, "read", {}, "{}")])
    return tracker


async def timed(rounds: int, work: Callable[[], Awaitable[Any]]) -> list[float]:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        await work()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def row(name: str, samples: list[float]) -> str:
    samples.sort()
    p50 = statistics.median(samples)
    p99 = samples[int(len(samples) * 0.99) - 1]
    return f"  {name:<34} p50 {p50:8.3f} ms   p99 {p99:8.3f} ms"


async def bench_store(store: StateStore, turns: int, rounds: int) -> list[str]:
    memory = ReasoningMemory(store, ThinkingSigner())
    ids = [f"call_{turn:024d}" for turn in range(turns)]
    none = Digests(())
    for call_id in ids:
        await memory.remember(answer(call_id).calls(), none)
    dropped = history(turns, keep_reasoning=False)
    restored = await restore(memory, dropped)
    assert (restored.reasoning, restored.error) == (turns, None), restored
    assert restored.req.conversation.messages[1].reasoning == REASONING
    kept = history(turns, keep_reasoning=True)
    lines = [
        row(
            "restore, reasoning kept (baseline)",
            await timed(rounds, lambda: restore(memory, kept)),
        ),
        row(
            f"restore {turns} dropped turns",
            await timed(rounds, lambda: restore(memory, dropped)),
        ),
        row(
            "remember one answer (1 call)",
            await timed(rounds, lambda: memory.remember(answer(ids[0]).calls(), none)),
        ),
    ]
    await store.aclose()
    return lines


def memory_mb(pid: int) -> dict[str, float]:
    """``VmRSS`` and ``VmHWM`` of process ``pid``, in MB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) / 1024
    return fields


def bench_rss(engine_url: str, cap: str, responses: int, size_mb: float) -> str:
    """One ``dsmlkit serve --state memory`` process given ``responses`` stored responses."""
    port = free_port()
    command = [sys.executable, "-m", "dsmlkit", "serve", "--port", str(port)]
    command += ["--upstream", engine_url, "--tokenizer", "none", "--log-level", "warning"]
    command += [] if cap == "default" else ["--state-max-mb", cap]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    server = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(url + "/health", timeout=1)
                break
            except httpx.TransportError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("dsmlkit serve did not start") from None
                time.sleep(0.1)
        before = memory_mb(server.pid)["VmRSS"]
        thought = "I weigh every option before I answer. " * int(size_mb * 1024 * 1024 / 39)
        closed_turn = [
            {"role": "user", "content": "Hello?"},
            {
                "type": "reasoning",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": thought}],
            },
            {"role": "assistant", "content": "Hello."},
        ]
        started = time.perf_counter()
        with httpx.Client(base_url=url, timeout=60) as client:
            for number in range(responses):
                body = {
                    "model": "m",
                    "input": [*closed_turn, {"role": "user", "content": f"Question {number}?"}],
                }
                answer = client.post("/v1/responses", json=body)
                answer.raise_for_status()
        took = time.perf_counter() - started
        after = memory_mb(server.pid)
    finally:
        server.terminate()
        server.wait(15)
    shown = "(default)" if cap == "default" else f"{cap} MB"
    return (
        f"  --state-max-mb {shown:<10} RSS {before:6.0f} MB -> {after['VmRSS']:6.0f} MB, "
        f"peak {after['VmHWM']:6.0f} MB ({took:.1f} s)"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--responses", type=int, default=300)
    parser.add_argument("--response-mb", type=float, default=1.0)
    parser.add_argument("--caps", default="default,64", help="--state-max-mb values")
    args = parser.parse_args()
    print(
        f"reasoning round trip: {args.turns} tool turns, {args.rounds} rounds, "
        f"~{len(REASONING)} characters of reasoning each"
    )
    with tempfile.TemporaryDirectory() as folder:
        settings = ["memory", f"sqlite:{folder}/state.db"]
        redis = None
        binary = shutil.which("redis-server")
        if binary:
            port = free_port()
            redis = subprocess.Popen(
                [
                    binary,
                    "--port",
                    str(port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ],
                stdout=subprocess.DEVNULL,
            )
            time.sleep(0.5)
            settings.append(f"redis://127.0.0.1:{port}/0")
        else:
            print("  (redis-server is not on PATH: Redis skipped)")
        try:
            for setting in settings:
                store = open_store(setting)
                print(f"{store.description.split(':')[0]}:")
                for line in await bench_store(store, args.turns, args.rounds):
                    print(line)
        finally:
            if redis is not None:
                redis.terminate()
                redis.wait(5)
    print(
        f"memory store in a dsmlkit serve process: {args.responses} stored responses of "
        f"{args.response_mb:g} MB"
    )
    engine = FakeEngine(default=Reply(text="Fine.</think>Noted."))
    with serve_in_thread(engine.app) as engine_url:
        for cap in args.caps.split(","):
            print(bench_rss(engine_url, cap, args.responses, args.response_mb))


if __name__ == "__main__":
    asyncio.run(main())
