"""Gateway benchmark: concurrent streams through ``dsmlkit serve`` against the fake engine.

Three processes on loopback: the fake engine (tests/server/fake_engine.py, in a subprocess
of this script), the gateway (``python -m dsmlkit serve --upstream …``) and the clients
(here, asyncio + httpx). Every engine chunk that carries visible text is tagged
``~NNNN`` (its position); the engine notes when it sends each chunk, the client when it
receives the gateway event holding the tag, so each chunk's engine→client latency is known.
The same load is first sent straight to the engine (the baseline), then through the gateway;
"added latency" is the difference. The gateway's CPU time comes from /proc.

A fixed number of requests is sent; the script stops by itself and prints its figures:

    python bench/bench_gateway.py                 # 64 streams, 256 requests, OpenAI API
    python bench/bench_gateway.py --api anthropic
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dsmlkit.dialects import V4_1  # noqa: E402

TAG = re.compile(r"~(\d{4})")


def reply_pieces(reasoning: int, content: int, argument: int) -> tuple[str, ...]:
    """A thinking-mode V4.1 output in chunks: reasoning, answer text, then one call whose
    string argument streams; text chunks carry their position as a ``~NNNN`` tag."""
    pieces: list[str] = []

    def tagged(count: int, word: str) -> None:
        pieces.extend(f"{word} ~{len(pieces):04d} " for _ in range(count))

    tagged(reasoning, "thinking")
    pieces.append("</think>")
    tagged(content, "answer")
    pieces += [
        "\n\n" + V4_1.block_open() + "\n",
        V4_1.invoke_open("write_file") + "\n",
        V4_1.parameter_open("path", True) + "notes.md" + V4_1.parameter_close() + "\n",
        V4_1.parameter_open("content", True),
    ]
    tagged(argument, "line")
    pieces += [V4_1.parameter_close() + "\n", V4_1.invoke_close() + "\n", V4_1.block_close()]
    return tuple(pieces)


def prompt_key(prompt: Any) -> str:
    return hashlib.sha1(json.dumps(prompt).encode()).hexdigest()


# --- the engine subprocess ----------------------------------------------------------------


def serve_engine(port: int, timings_path: str, interval: float, sizes: list[int]) -> None:
    """Run the fake engine until SIGTERM, then write its send times."""
    import uvicorn
    from tests.server.fake_engine import FakeEngine, Reply

    from dsmlkit.cli.serve_cmd import listening_socket

    sent: list[tuple[str, int, float]] = []
    engine = FakeEngine(default=Reply(pieces=reply_pieces(*sizes), interval=interval))
    engine.on_chunk = lambda request, index: sent.append(
        (prompt_key(request["prompt"]), index, time.monotonic())
    )
    sock = listening_socket("127.0.0.1", port)
    config = uvicorn.Config(engine.app, interface="asgi3", log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # for sigwait, in every thread
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]})
    thread.start()
    signal.sigwait({signal.SIGTERM})
    server.should_exit = True
    thread.join()
    Path(timings_path).write_text(json.dumps(sent))


# --- the client side ----------------------------------------------------------------------


async def run_load(
    client: httpx.AsyncClient,
    jobs: list[tuple[str, dict[str, Any], str]],
    streams: int,
) -> tuple[list[tuple[str, int, float]], int, float]:
    """Send ``jobs`` (url, body, prompt key) over ``streams`` concurrent workers.

    Returns (tag arrivals, SSE events received, wall seconds).
    """
    arrivals: list[tuple[str, int, float]] = []
    events = 0
    queue: asyncio.Queue[tuple[str, dict[str, Any], str]] = asyncio.Queue()
    for job in jobs:
        queue.put_nowait(job)

    async def worker() -> None:
        nonlocal events
        while not queue.empty():
            url, body, key = queue.get_nowait()
            async with client.stream("POST", url, json=body) as response:
                response.raise_for_status()
                async for line in response.aiter_lines():
                    if not line.startswith("data:") or line == "data: [DONE]":
                        continue
                    now = time.monotonic()
                    events += 1
                    arrivals.extend((key, int(tag), now) for tag in TAG.findall(line))

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(streams)))
    return arrivals, events, time.monotonic() - started


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def wait_until_up(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{url}: the process exited with {process.returncode}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not come up")


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def request_body(api: str, number: int) -> dict[str, Any]:
    messages = [{"role": "user", "content": f"Request {number}: write the notes file."}]
    if api == "openai":
        return {"model": "m", "messages": messages, "stream": True}
    return {
        "model": "m",
        "max_tokens": 4096,
        "messages": messages,
        "stream": True,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--api", choices=("openai", "anthropic"), default="openai")
    parser.add_argument("--interval", type=float, default=0.02, help="engine seconds per chunk")
    parser.add_argument(
        "--sizes",
        type=int,
        nargs=3,
        default=[20, 20, 60],
        metavar=("REASONING", "CONTENT", "ARGUMENT"),
        help="tagged chunks per part of each reply",
    )
    parser.add_argument(
        "--serve-engine", nargs=2, metavar=("PORT", "TIMINGS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.serve_engine:
        serve_engine(int(args.serve_engine[0]), args.serve_engine[1], args.interval, args.sizes)
        return
    asyncio.run(benchmark(args))


async def benchmark(args: argparse.Namespace) -> None:
    engine_port, gateway_port = free_port(), free_port()
    engine_url = f"http://127.0.0.1:{engine_port}"
    gateway_url = f"http://127.0.0.1:{gateway_port}"
    timings = Path(tempfile.mkdtemp()) / "engine-times.json"
    python = sys.executable
    sizes = [str(size) for size in args.sizes]
    engine = subprocess.Popen(
        [
            python,
            __file__,
            "--serve-engine",
            str(engine_port),
            str(timings),
            "--interval",
            str(args.interval),
            "--sizes",
            *sizes,
        ],
        cwd=ROOT,
    )
    gateway = subprocess.Popen(
        [python, "-m", "dsmlkit", "serve", "--port", str(gateway_port), "--upstream", engine_url],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,  # the per-request log lines are written, then dropped
    )
    try:
        wait_until_up(engine_url + "/", engine)
        wait_until_up(gateway_url + "/health", gateway)
        route = "/v1/chat/completions" if args.api == "openai" else "/v1/messages"
        limits = httpx.Limits(max_connections=args.streams * 2)
        async with httpx.AsyncClient(timeout=120, limits=limits) as client:
            direct_jobs, gateway_jobs = [], []
            for number in range(2 * args.requests + 4):
                body = request_body(args.api, number)
                shown = (await client.post(gateway_url + route + "/render", json=body)).json()
                key = prompt_key(shown["token_ids"])
                if number < args.requests:
                    upstream_body = {
                        "model": "deepseek-v4.1",
                        "prompt": shown["token_ids"],
                        "stream": True,
                        **shown["sampling_params"],
                    }
                    direct_jobs.append((engine_url + "/v1/completions", upstream_body, key))
                else:
                    gateway_jobs.append((gateway_url + route, body, key))
            warmup, gateway_jobs = gateway_jobs[-4:], gateway_jobs[:-4]
            await run_load(client, warmup, 4)
            engine_before = cpu_seconds(engine.pid)
            direct, direct_events, direct_wall = await run_load(client, direct_jobs, args.streams)
            engine_cpu = cpu_seconds(engine.pid) - engine_before
            cpu_before = cpu_seconds(gateway.pid)
            through, events, wall = await run_load(client, gateway_jobs, args.streams)
            cpu = cpu_seconds(gateway.pid) - cpu_before
    finally:
        gateway.terminate()
        engine.send_signal(signal.SIGTERM)
        engine.wait(timeout=60)
        gateway.wait(timeout=60)
    sent = {(key, index): at for key, index, at in json.loads(timings.read_text())}
    direct_ms = [(at - sent[key, index]) * 1000 for key, index, at in direct]
    through_ms = [(at - sent[key, index]) * 1000 for key, index, at in through]
    engine_chunks = len(reply_pieces(*args.sizes)) + 2  # + the finish and usage chunks
    print(
        f"gateway benchmark: {args.streams} concurrent streams, {args.requests} requests "
        f"({args.api} API, stream), engine chunk every {args.interval * 1000:g} ms, "
        f"{engine_chunks} engine chunks per request"
    )
    print(
        f"  direct to engine : {direct_events / direct_wall:9.0f} chunks/s   "
        f"latency p50 {statistics.median(direct_ms):6.2f} ms  p99 "
        f"{percentile(direct_ms, 0.99):6.2f} ms"
    )
    print(
        f"  through gateway  : {events / wall:9.0f} chunks/s   "
        f"latency p50 {statistics.median(through_ms):6.2f} ms  p99 "
        f"{percentile(through_ms, 0.99):6.2f} ms   ({events} chunks in {wall:.2f} s)"
    )
    added_p50 = statistics.median(through_ms) - statistics.median(direct_ms)
    added_p99 = percentile(through_ms, 0.99) - percentile(direct_ms, 0.99)
    print(f"  added latency    : p50 {added_p50:.2f} ms  p99 {added_p99:.2f} ms per chunk")
    engine_total = args.requests * engine_chunks
    print(
        f"  gateway CPU      : {cpu:.2f} s = {cpu / events * 1e6:.0f} ms per 1,000 client "
        f"chunks ({cpu / engine_total * 1e6:.0f} ms per 1,000 engine chunks)"
    )
    print(
        f"  for scale        : the fake engine (a bare uvicorn SSE app) spends "
        f"{engine_cpu / engine_total * 1e6:.0f} ms per 1,000 chunks it sends"
    )


if __name__ == "__main__":
    main()
