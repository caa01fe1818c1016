"""Gateway benchmark: concurrent streams through ``dsmlkit serve`` against a test engine.

Processes on loopback: the engine (``--engine raw``, the default: bench/raw_engine.py, SSE
written on raw asyncio, which reports its own CPU per chunk; ``--engine asgi``: the fake
engine of tests/server/fake_engine.py under uvicorn), in a subprocess of this script, the
gateway (``python -m dsmlkit serve --upstream …``), with ``--peers`` the LiteLLM proxy in
front of the same engine, and the clients (asyncio + httpx, a new client for each load).
Every engine chunk that carries visible text is tagged ``~NNNN``; the engine notes when it
sends each tag, the client when it receives the event holding it, so each chunk's
engine→client latency is known. Each load is first sent straight to the engine (the
baseline), then through each gateway; "added latency" is the difference. CPU time comes
from /proc (a process and its children, so ``--workers`` and LiteLLM's workers count).

Phases, each a fixed amount of work (the script stops by itself and prints its figures):

* stream: ``--streams`` concurrent streams, ``--requests`` requests of 110 engine chunks
  (``--sizes``; a thinking-mode V4.1 answer with one streamed tool call), one chunk every
  ``--interval``; gateway CPU per client chunk, latency p50/p99, the first chunk's p50 and
  what the gateway adds; with the raw engine, its own CPU per chunk in the same phase and
  the gateway's CPU per engine chunk beside it (``--requests`` = ``--streams``: one burst);
* small: ``--small`` requests one after another (one user turn, five chunks at once);
  gateway CPU per request: setup, render, tokenize, the upstream request, five chunks;
* together: ``--together`` small requests sent at the same moment, several rounds; the
  spread of their times to the first chunk (what one waits for another's setup), beside
  the same spread straight to the engine;
* hold: ``--hold`` concurrent streams (one chunk every 0.5 s, ten chunks) through a gateway
  started with ``--workers 2``; how many completed, how many were lost;
* agent: ``--agents`` conversations of ``--agent-turns`` tool-call turns each, one after
  another, by a client that sends every call back as Claude Code does (``replace_all:
  false`` added, keys in another order, compact JSON) and drops OpenAI reasoning; the
  prefix reuse of each prompt: how much of the previous prompt plus the model's output it
  starts with, exactly (what an engine's prefix cache can reuse), in characters.

    python bench/bench_gateway.py                 # OpenAI API
    python bench/bench_gateway.py --api anthropic
    python bench/bench_gateway.py --upstream-api chat  # the gateway in front of a chat API
    python bench/bench_gateway.py --peers         # also the LiteLLM proxy (scratch venv)
    python bench/bench_gateway.py --profile /tmp/gw  # py-spy stacks of each gateway
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dsmlkit.dialects import V4_1  # noqa: E402

TAG = re.compile(r"~(\d{4})")
#: Every request's user turn names its kind and number; the engine picks its reply by it.
MARK = re.compile(r"(Stream|Small|Held|Agent) request (\d+):")
#: The sampling profiler for ``--profile`` (``pip install py-spy``, into any venv).
PY_SPY = os.environ.get("PY_SPY", "py-spy")
#: The scratch venv ``--peers`` installs LiteLLM into (gitignored; never a dependency).
LITELLM_VENV = ROOT / ".peers-litellm"
#: The proxy's master key; every client sends it (the open dsmlkit gateway ignores it).
LITELLM_KEY = "sk-bench-" + os.urandom(16).hex()
HOLD_INTERVAL, HOLD_CHUNKS, HOLD_WORKERS = 0.5, 10, 2
USAGE = {"include_usage": True}
#: The engine's listen backlog: the gateway opens a connection per stream, all at once.
BACKLOG = 2048

Job = tuple[str, dict[str, Any], str]  # url, body, request key ("Stream 12")


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


SMALL_PIECES = ("Hi", " ~0000 there", ", how", " can I", " help?")
HELD_PIECES = tuple(f"held ~{n:04d} " for n in range(HOLD_CHUNKS))
#: The load's tool: the ``write_file`` of every reply (the gateway lets through only calls
#: to tools a request declares).
NOTES_TOOL = {
    "name": "write_file",
    "description": "Write a file.",
    "schema": {
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"],
    },
}
#: The agent phase's tool: Claude Code's Edit, whose replace_all the client fills in.
EDIT_TOOL = {
    "name": "Edit",
    "description": "Replace text in a file.",
    "schema": {
        "type": "object",
        "properties": {
            "file_path": {"type": "string"},
            "old_string": {"type": "string"},
            "new_string": {"type": "string"},
            "replace_all": {"type": "boolean", "default": False},
        },
        "required": ["file_path", "old_string", "new_string"],
    },
}
#: What the client answers for each call; the engine counts them to number its steps.
EDITED = "The file was edited: "


def agent_output(step: int) -> str:
    """A thinking-mode V4.1 answer of step ``step``: reasoning, a sentence, one Edit call."""
    parameters = [("file_path", f"src/mod{step}.py"), ("old_string", "x = 1")]
    parameters.append(("new_string", f"x = {step + 2}"))
    written = "".join(
        V4_1.parameter_open(name, True) + value + V4_1.parameter_close() + "\n"
        for name, value in parameters
    )
    return (
        f"Step {step}: mod{step}.py still sets x to 1; I edit it.</think>"
        f"I will edit src/mod{step}.py.\n\n{V4_1.block_open()}\n"
        f"{V4_1.invoke_open('Edit')}\n{written}{V4_1.invoke_close()}\n{V4_1.block_close()}"
    )


# --- the engine subprocess ----------------------------------------------------------------


def serve_engine(
    port: int, timings_path: str, interval: float, sizes: list[int], kind: str
) -> None:
    """Run the engine until SIGTERM, then write when it sent each tag."""
    from tests.server.fake_engine import FakeEngine, Reply

    from dsmlkit.cli.serve_cmd import listening_socket
    from raw_engine import RawEngine

    replies = {
        "Stream": Reply(pieces=reply_pieces(*sizes), interval=interval),
        "Small": Reply(pieces=SMALL_PIECES),
        "Held": Reply(pieces=HELD_PIECES, interval=HOLD_INTERVAL),
    }
    sent: list[tuple[str, int, float]] = []
    #: id(request) -> [agent request key, prompt text, the output text sent]
    agent: dict[int, list[str]] = {}
    kept: list[dict[str, Any]] = []

    def prompt_text(request: dict[str, Any]) -> str:
        prompt = request.get("prompt")
        if isinstance(prompt, list):
            return engine.tokenizer.decode(prompt, skip_special_tokens=False)
        return json.dumps(request.get("messages")) if prompt is None else str(prompt)

    def key_of(request: dict[str, Any]) -> tuple[str, str]:
        found = MARK.search(prompt_text(request))
        return (found[1], f"{found[1]} {found[2]}") if found else ("Stream", "?")

    class BenchEngine(FakeEngine):
        def next_reply(self, request: dict[str, Any]) -> Reply:
            kind, key = key_of(request)
            if kind != "Agent":
                return replies[kind]
            prompt = prompt_text(request)
            kept.append(request)  # alive for the run: its id stays its own
            agent[id(request)] = [key, prompt, ""]
            output = agent_output(prompt.count(EDITED))  # streamed as pieces by either engine
            return Reply(pieces=tuple(output[i : i + 8] for i in range(0, len(output), 8)))

    def on_chunk(request: dict[str, Any], chunk: dict[str, Any]) -> None:
        now = time.monotonic()
        for choice in chunk["choices"]:
            delta = choice.get("delta") or {}
            text = choice.get("text") or delta.get("content") or delta.get("reasoning_content")
            text = text or ""
            if id(request) in agent:
                agent[id(request)][2] += text
            sent.extend((key_of(request)[1], int(tag), now) for tag in TAG.findall(text))

    engine = BenchEngine()
    engine.on_chunk = on_chunk
    sock = listening_socket("127.0.0.1", port)
    sock.listen(BACKLOG)
    if kind == "raw":
        RawEngine(engine).run(sock, BACKLOG)
    else:
        serve_asgi(engine.app, sock)
    Path(timings_path).write_text(json.dumps({"sent": sent, "agent": list(agent.values())}))


def serve_asgi(app: Any, sock: Any) -> None:
    """Serve an ASGI app with uvicorn until SIGTERM."""
    import uvicorn

    config = uvicorn.Config(
        app, interface="asgi3", log_level="warning", access_log=False, backlog=BACKLOG
    )
    server = uvicorn.Server(config)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # for sigwait, in every thread
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]})
    thread.start()
    signal.sigwait({signal.SIGTERM})
    server.should_exit = True
    thread.join()


# --- the client side ----------------------------------------------------------------------


@dataclass
class Load:
    """What the clients saw of one load."""

    arrivals: list[tuple[str, int, float]] = field(default_factory=list)
    first_chunk: list[float] = field(default_factory=list)  # seconds after sending
    events: int = 0
    completed: int = 0
    lost: list[str] = field(default_factory=list)
    most_open: int = 0
    wall: float = 0.0


def finished(line: str) -> bool:
    return line == "data: [DONE]" or line == "event: message_stop"


def failed(line: str) -> bool:
    return line == "event: error" or line.startswith('data: {"error"')


def new_client(connections: int) -> httpx.AsyncClient:
    """A client of the benchmark: room for ``connections``, the LiteLLM key on each request."""
    limits = httpx.Limits(max_connections=connections)
    headers = {"authorization": f"Bearer {LITELLM_KEY}"}
    return httpx.AsyncClient(timeout=300, limits=limits, headers=headers)


async def run_load(jobs: list[Job], streams: int) -> Load:
    """Send ``jobs`` over ``streams`` concurrent workers (all at once if equal).

    Each load has a client of its own, so each starts from an empty pool: httpx's pool walks
    every connection it holds on each request and each release, so the idle connections an
    earlier phase left behind made a later load's client slower (a second burst of 64 on one
    client: first chunk p50 about 280 ms, against about 30 ms on a new client).
    """
    async with new_client(streams) as client:
        return await _run_load(client, jobs, streams)


async def _run_load(client: httpx.AsyncClient, jobs: list[Job], streams: int) -> Load:
    load = Load()
    queue: list[Job] = list(reversed(jobs))
    open_now = 0

    async def one(url: str, body: dict[str, Any], key: str) -> None:
        nonlocal open_now
        sent_at = time.monotonic()
        ended = errored = False
        seen = 0  # data events of this request
        open_now += 1
        load.most_open = max(load.most_open, open_now)
        try:
            async with client.stream("POST", url, json=body) as response:
                if response.status_code != 200:
                    load.lost.append(f"{key}: HTTP {response.status_code}")
                    return
                async for line in response.aiter_lines():
                    ended = ended or finished(line)
                    errored = errored or failed(line)
                    if not line.startswith("data:") or line == "data: [DONE]":
                        continue
                    now = time.monotonic()
                    if not seen:
                        load.first_chunk.append(now - sent_at)
                    seen += 1
                    load.arrivals.extend((key, int(tag), now) for tag in TAG.findall(line))
        except httpx.HTTPError as exc:
            load.lost.append(f"{key}: {type(exc).__name__} {exc}")
            return
        finally:
            open_now -= 1
        load.events += seen
        if ended and not errored:
            load.completed += 1
        else:
            load.lost.append(f"{key}: {'error event' if errored else 'no end of stream'}")

    async def worker() -> None:
        while queue:
            await one(*queue.pop())

    started = time.monotonic()
    gc.disable()  # the client's own full collections (~60 ms here) would pause what it times
    try:
        await asyncio.gather(*(worker() for _ in range(streams)))
    finally:
        gc.enable()
    load.wall = time.monotonic() - started
    return load


def process_tree(pid: int) -> list[int]:
    pids = [pid]
    for task in Path(f"/proc/{pid}/task").iterdir():
        children = (task / "children").read_text().split()
        for child in children:
            pids += process_tree(int(child))
    return pids


def cpu_seconds(pid: int) -> float:
    """CPU time of ``pid`` and its live descendants."""
    total = 0
    for each in process_tree(pid):
        try:
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def wait_until_up(url: str, process: subprocess.Popen[bytes], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{url}: the process exited with {process.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{url} did not come up")


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_profiler(path: str | None, pid: int) -> subprocess.Popen[bytes] | None:
    """py-spy sampling ``pid`` into ``path`` (raw collapsed stacks), if asked for."""
    if path is None:
        return None
    command = [PY_SPY, "record", "--pid", str(pid), "--format", "raw", "--output", path]
    return subprocess.Popen([*command, "--rate", "250", "--nonblocking", "--subprocesses"])


def stop_profiler(profiler: subprocess.Popen[bytes] | None) -> None:
    if profiler is not None:
        profiler.send_signal(signal.SIGINT)
        profiler.wait(timeout=60)


def request_body(api: str, kind: str, number: int) -> dict[str, Any]:
    """A load request, declaring the tool its reply calls."""
    ask = "say hello." if kind == "Small" else "write the notes file."
    messages = [{"role": "user", "content": f"{kind} request {number}: {ask}"}]
    if api == "openai":
        return {"model": "m", "messages": messages, "stream": True, "tools": tools(api, NOTES_TOOL)}
    return {
        "model": "m",
        "max_tokens": 4096,
        "messages": messages,
        "stream": True,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "tools": tools(api, NOTES_TOOL),
    }


def tools(api: str, tool: dict[str, Any]) -> list[dict[str, Any]]:
    """``tool`` (name, description, schema) declared in ``api``'s spelling."""
    name, description, schema = tool["name"], tool["description"], tool["schema"]
    if api == "openai":
        function = {"name": name, "description": description, "parameters": schema}
        return [{"type": "function", "function": function}]
    return [{"name": name, "description": description, "input_schema": schema}]


async def engine_stats(client: httpx.AsyncClient, engine_url: str) -> tuple[float, int] | None:
    """The raw engine's CPU seconds and chunks sent so far (None: the engine does not say)."""
    response = await client.get(engine_url + "/stats")
    if response.status_code != 200:
        return None
    stats = response.json()
    return float(stats["cpu"]), int(stats["chunks"])


def uptime() -> str:
    return "load average " + " ".join(Path("/proc/loadavg").read_text().split()[:3])


# --- the targets --------------------------------------------------------------------------


@dataclass
class Target:
    """Something the load is sent to: the engine itself, the gateway, a peer."""

    name: str
    pid: int
    job: Callable[[str, int], Job]  # (kind, number) -> job; the engine's needs a render first
    figures: dict[str, Any] = field(default_factory=dict)


class Numbers:
    """Request numbers, unique over the whole run (the engine keys its timings by them)."""

    def __init__(self) -> None:
        self.next = 0

    def take(self, count: int) -> range:
        self.next += count
        return range(self.next - count, self.next)


def start_gateway(
    port: int, engine_url: str, workers: int, upstream_api: str
) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "dsmlkit", "serve", "--port", str(port)]
    command += ["--upstream", engine_url, "--upstream-api", upstream_api]
    command += ["--workers", str(workers), "--log-level", "warning"]
    if workers > 1:  # workers share state through a file (memory is one process's own)
        command += ["--state", f"sqlite:{tempfile.gettempdir()}/bench-gateway-{port}.db"]
    # the per-request log lines are written, then dropped
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_litellm(port: int, engine_url: str, workdir: Path) -> subprocess.Popen[bytes]:
    """The LiteLLM proxy with one OpenAI-compatible model, ``m``, on the fake engine."""
    litellm = LITELLM_VENV / "bin" / "litellm"
    if not litellm.exists():
        print(f"installing LiteLLM into {LITELLM_VENV} (a scratch venv, never a dependency)")
        subprocess.run([sys.executable, "-m", "venv", str(LITELLM_VENV)], check=True)
        pip = [str(LITELLM_VENV / "bin" / "pip"), "install", "-q", "litellm[proxy]"]
        subprocess.run(pip, check=True)
    config = workdir / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        "  - model_name: m\n"
        "    litellm_params:\n"
        "      model: openai/deepseek-v4.1\n"
        f"      api_base: {engine_url}/v1\n"
        "      api_key: none\n"
        "litellm_settings:\n"
        "  telemetry: false\n"
        "  drop_params: true\n"
    )
    env = {
        **os.environ,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no download at start-up
        "LITELLM_LOG": "ERROR",
        "LITELLM_MASTER_KEY": LITELLM_KEY,
    }
    env.pop("PYTHONPATH", None)
    command = [str(litellm), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
    return subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=workdir
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--api", choices=("openai", "anthropic"), default="openai")
    parser.add_argument(
        "--engine",
        choices=("raw", "asgi"),
        default="raw",
        help="raw: SSE on raw asyncio, reporting its own CPU per chunk; asgi: the fake "
        "engine of the tests under uvicorn",
    )
    parser.add_argument(
        "--upstream-api",
        choices=("completions", "chat"),
        default="completions",
        help="the gateway's --upstream-api (the direct baseline goes to the same route)",
    )
    parser.add_argument("--interval", type=float, default=0.02, help="engine seconds per chunk")
    parser.add_argument(
        "--sizes",
        type=int,
        nargs=3,
        default=[20, 20, 60],
        metavar=("REASONING", "CONTENT", "ARGUMENT"),
        help="tagged chunks per part of each reply",
    )
    parser.add_argument("--workers", type=int, default=1, help="the gateway's --workers")
    parser.add_argument("--small", type=int, default=100, help="small requests, one at a time")
    parser.add_argument("--together", type=int, default=16, help="small requests sent at once")
    parser.add_argument("--hold", type=int, default=512, help="streams held (0: skip)")
    parser.add_argument("--agents", type=int, default=4, help="agent conversations (0: skip)")
    parser.add_argument("--agent-turns", type=int, default=6, help="tool-call turns of each")
    parser.add_argument("--peers", action="store_true", help="also the LiteLLM proxy")
    parser.add_argument(
        "--profile",
        metavar="PREFIX",
        help="sample each gateway with py-spy in its stream and small phases, raw stacks "
        "into PREFIX.PID.stream and PREFIX.PID.small",
    )
    parser.add_argument(
        "--serve-engine", nargs=2, metavar=("PORT", "TIMINGS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.serve_engine:
        port, path = int(args.serve_engine[0]), args.serve_engine[1]
        serve_engine(port, path, args.interval, args.sizes, args.engine)
        return
    asyncio.run(benchmark(args))


async def benchmark(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp())
    timings = workdir / "engine-times.json"
    ports = {name: free_port() for name in ("engine", "gateway", "hold", "litellm")}
    urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    sizes = [str(size) for size in args.sizes]
    engine = subprocess.Popen(
        [
            *(sys.executable, __file__, "--serve-engine", str(ports["engine"]), str(timings)),
            *("--interval", str(args.interval), "--sizes", *sizes, "--engine", args.engine),
        ],
        cwd=ROOT,
    )
    gateway = start_gateway(ports["gateway"], urls["engine"], args.workers, args.upstream_api)
    processes = [engine, gateway]
    if args.peers:
        processes.append(start_litellm(ports["litellm"], urls["engine"], workdir))
    route = "/v1/chat/completions" if args.api == "openai" else "/v1/messages"
    numbers = Numbers()
    try:
        wait_until_up(urls["engine"] + "/health", engine)
        wait_until_up(urls["gateway"] + "/health", processes[1])
        if args.peers:
            wait_until_up(urls["litellm"] + "/health/liveliness", processes[2], 180)
        async with new_client(64) as client:  # renders, engine figures, agent turns
            rendered: dict[tuple[str, int], Job] = {}

            async def render(kind: str, numbers_: range) -> None:
                for number in numbers_:
                    if args.upstream_api == "chat":  # the gateway's body, as it sends it
                        chat_body = request_body("openai", kind, number)
                        chat_body.update(model="deepseek-v4.1", stream_options=USAGE)
                        url = urls["engine"] + "/v1/chat/completions"
                        rendered[kind, number] = url, chat_body, f"{kind} {number}"
                        continue
                    body = request_body(args.api, kind, number)
                    url = urls["gateway"] + route + "/render"
                    shown = (await client.post(url, json=body)).json()
                    ids = shown["token_ids"]
                    prompt = ids if ids is not None else shown["prompt"]
                    upstream_body = {
                        "model": "deepseek-v4.1",
                        "prompt": prompt,
                        "stream": True,
                        "stream_options": USAGE,
                        **shown["sampling_params"],
                    }
                    if ids is None:
                        upstream_body["add_special_tokens"] = False  # as the gateway sends it
                    rendered[kind, number] = (
                        urls["engine"] + "/v1/completions",
                        upstream_body,
                        f"{kind} {number}",
                    )

            def through(base: str) -> Callable[[str, int], Job]:
                def job(kind: str, number: int) -> Job:
                    return base + route, request_body(args.api, kind, number), f"{kind} {number}"

                return job

            targets = [
                Target("direct to engine", engine.pid, lambda kind, n: rendered[kind, n]),
                Target("dsmlkit gateway", processes[1].pid, through(urls["gateway"])),
            ]
            if args.peers:
                targets.append(Target("LiteLLM proxy", processes[2].pid, through(urls["litellm"])))
            for target in targets:
                await measure(client, target, args, numbers, render, urls["engine"])
            if args.agents and args.upstream_api == "completions":
                await agent_conversations(client, args, numbers, urls["gateway"] + route)
            hold = None
            if args.hold:
                hold = await hold_streams(args, numbers, urls, ports)
    finally:
        for process in processes[1:]:
            process.terminate()
        engine.send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(timeout=60)
    engine_notes = json.loads(timings.read_text())
    report(args, targets, hold, engine_notes["sent"])
    if args.agents and args.upstream_api == "completions":
        report_agents(args, engine_notes["agent"])
    elif args.agents:
        print("  agent: skipped (chat mode: the engine renders the prompt itself)")


async def measure(
    client: httpx.AsyncClient,
    target: Target,
    args: argparse.Namespace,
    numbers: Numbers,
    render: Callable[[str, range], Any],
    engine_url: str,
) -> None:
    """The stream, small and together phases against one target."""
    direct = target.name == "direct to engine"

    async def jobs(kind: str, count: int) -> list[Job]:
        taken = numbers.take(count)
        if direct:
            await render(kind, taken)
        return [target.job(kind, number) for number in taken]

    await run_load(await jobs("Stream", 4), 4)  # warm up
    await run_load(await jobs("Small", 4), 1)
    load_before = uptime()
    stream_jobs = await jobs("Stream", args.requests)
    profile = None if direct or args.profile is None else f"{args.profile}.{target.pid}"
    profiler = start_profiler(profile and profile + ".stream", target.pid)
    before, engine_before = cpu_seconds(target.pid), await engine_stats(client, engine_url)
    stream = await run_load(stream_jobs, args.streams)
    target.figures["stream_cpu"] = cpu_seconds(target.pid) - before
    engine_after = await engine_stats(client, engine_url)
    if engine_before is not None and engine_after is not None:  # (CPU s, chunks) in the phase
        (cpu_0, chunks_0), (cpu_1, chunks_1) = engine_before, engine_after
        target.figures["engine"] = cpu_1 - cpu_0, chunks_1 - chunks_0
    stop_profiler(profiler)
    target.figures.update(stream=stream, load=f"{load_before} → {uptime()}")
    small_jobs = await jobs("Small", args.small)
    profiler = start_profiler(profile and profile + ".small", target.pid)
    before = cpu_seconds(target.pid)
    small = await run_load(small_jobs, 1)
    target.figures.update(small=small, small_cpu=cpu_seconds(target.pid) - before)
    stop_profiler(profiler)
    spreads = []
    for _ in range(5):
        together = await run_load(await jobs("Small", args.together), args.together)
        spreads.append(max(together.first_chunk) - min(together.first_chunk))
        target.figures.setdefault("together_lost", []).extend(together.lost)
    target.figures["spread"] = statistics.median(spreads)
    target.figures["together_first"] = together.first_chunk


def agent_body(api: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """A thinking-mode request of an agent conversation, with the Edit tool."""
    if api == "openai":
        return {"model": "m", "messages": messages, "tools": tools(api, EDIT_TOOL)}
    return {
        "model": "m",
        "max_tokens": 4096,
        "messages": messages,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "tools": tools(api, EDIT_TOOL),
    }


def as_claude_code_sends(arguments: dict[str, Any]) -> dict[str, Any]:
    """Arguments as the client sends them back: its default added, the keys reversed."""
    return {"replace_all": False, **dict(reversed(arguments.items()))}


def echoed_turn(api: str, answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The answer's assistant turn and the call's result, as the agent client sends them."""
    if api == "openai":
        message = answer["choices"][0]["message"]
        call = message["tool_calls"][0]
        arguments = as_claude_code_sends(json.loads(call["function"]["arguments"]))
        function = {
            "name": call["function"]["name"],
            "arguments": json.dumps(arguments, separators=(",", ":")),
        }
        assistant = {
            "role": "assistant",  # the reasoning dropped, as many OpenAI clients do
            "content": message["content"],
            "tool_calls": [{"id": call["id"], "type": "function", "function": function}],
        }
        result = {
            "role": "tool",
            "tool_call_id": call["id"],
            "content": EDITED + arguments["file_path"],
        }
        return [assistant, result]
    blocks = [
        {**block, "input": as_claude_code_sends(block["input"])}
        if block["type"] == "tool_use"
        else block
        for block in answer["content"]
    ]
    use = next(block for block in blocks if block["type"] == "tool_use")
    answered = {
        "type": "tool_result",
        "tool_use_id": use["id"],
        "content": EDITED + use["input"]["file_path"],
    }
    return [{"role": "assistant", "content": blocks}, {"role": "user", "content": [answered]}]


async def agent_conversations(
    client: httpx.AsyncClient, args: argparse.Namespace, numbers: Numbers, url: str
) -> None:
    """``--agents`` conversations of ``--agent-turns`` answers each, one after another."""
    for number in numbers.take(args.agents):
        messages = [{"role": "user", "content": f"Agent request {number}: fix the modules."}]
        for _ in range(args.agent_turns):
            response = await client.post(url, json=agent_body(args.api, messages))
            response.raise_for_status()
            messages += echoed_turn(args.api, response.json())


def report_agents(args: argparse.Namespace, seen: list[list[str]]) -> None:
    """Prefix reuse of each agent prompt after the first of its conversation: the share of
    the previous prompt plus the model's output that it starts with, exactly."""
    by_conversation: dict[str, list[tuple[str, str]]] = {}
    for key, prompt, output in seen:
        by_conversation.setdefault(key, []).append((prompt, output))
    turns: list[list[float]] = [[] for _ in range(args.agent_turns - 1)]
    reread = []
    for prompts in by_conversation.values():
        for turn, ((before, output), (prompt, _)) in enumerate(itertools.pairwise(prompts)):
            extended = before + output
            kept = next(
                (at for at, (a, b) in enumerate(zip(prompt, extended, strict=False)) if a != b),
                min(len(prompt), len(extended)),
            )
            turns[turn].append(kept / len(extended))
            reread.append(len(extended) - kept)
    shares = [share for turn in turns for share in turn]
    print(
        f"  agent: {len(by_conversation)} conversations of {args.agent_turns} tool-call turns "
        f"({args.api} API; the client adds replace_all: false, reverses the keys, compacts "
        "the JSON, drops OpenAI reasoning)"
    )
    print(
        "    prefix reuse (prompt = previous prompt + model output), per turn: "
        + " ".join(f"{statistics.mean(turn) * 100:.2f}%" for turn in turns if turn)
        + f"; {sum(share == 1 for share in shares)}/{len(shares)} turns at 100%, "
        f"{statistics.mean(reread):.0f} characters of it re-read per turn"
    )


async def hold_streams(
    args: argparse.Namespace,
    numbers: Numbers,
    urls: dict[str, str],
    ports: dict[str, int],
) -> tuple[Load, float, str]:
    """``--hold`` streams at once through a gateway with ``--workers 2``."""
    gateway = start_gateway(ports["hold"], urls["engine"], HOLD_WORKERS, args.upstream_api)
    try:
        wait_until_up(urls["hold"] + "/health", gateway)
        route = "/v1/chat/completions" if args.api == "openai" else "/v1/messages"
        jobs = [
            (urls["hold"] + route, request_body(args.api, "Held", n), f"Held {n}")
            for n in numbers.take(args.hold + 4)
        ]
        await run_load(jobs[:4], 4)  # both workers warm
        load_before = uptime()
        before = cpu_seconds(gateway.pid)
        load = await run_load(jobs[4:], args.hold)
        return load, cpu_seconds(gateway.pid) - before, f"{load_before} → {uptime()}"
    finally:
        gateway.terminate()
        gateway.wait(timeout=60)


def report(
    args: argparse.Namespace,
    targets: list[Target],
    hold: tuple[Load, float, str] | None,
    sent_list: list[list[Any]],
) -> None:
    sent = {(key, index): at for key, index, at in sent_list}
    engine_chunks = len(reply_pieces(*args.sizes)) + 2  # + the finish and usage chunks
    print(
        f"gateway benchmark ({args.api} API, streamed): {args.streams} concurrent streams, "
        f"{args.requests} requests of {engine_chunks} engine chunks, one every "
        f"{args.interval * 1000:g} ms; gateway --workers {args.workers} --upstream-api "
        f"{args.upstream_api}; {args.engine} engine"
    )
    base: dict[str, float] = {}
    goals: list[str] = []
    for target in targets:
        f = target.figures
        stream: Load = f["stream"]
        ms = [(at - sent[key, tag]) * 1000 for key, tag, at in stream.arrivals]
        p50, p99 = statistics.median(ms), percentile(ms, 0.99)
        spread = f["spread"] * 1000
        first = statistics.median(stream.first_chunk) * 1000
        if not base:
            base = {"p50": p50, "p99": p99, "spread": spread, "first": first}
        print(f"  {target.name}  ({f['load']})")
        print(
            f"    stream  : {stream.events / stream.wall:7.0f} chunks/s, latency p50 {p50:6.2f} "
            f"ms p99 {p99:7.2f} ms, first chunk p50 {first:.1f} ms; "
            f"{stream.completed}/{args.requests} streams complete"
            + (f", lost: {stream.lost[:3]}" if stream.lost else "")
        )
        if target is not targets[0]:
            small: Load = f["small"]
            per_chunk = f["stream_cpu"] / stream.events * 1e6
            print(
                f"    added   : p50 {p50 - base['p50']:.2f} ms, p99 {p99 - base['p99']:.2f} ms "
                f"per chunk, first chunk p50 {first - base['first']:+.1f} ms; CPU "
                f"{per_chunk:.0f} us per client chunk ({stream.events} chunks, "
                f"{f['stream_cpu']:.2f} s)"
            )
            print(
                f"    small   : {f['small_cpu'] / args.small * 1000:.2f} ms CPU per request "
                f"(setup, render, tokenize, upstream request, 5 chunks); first chunk p50 "
                f"{statistics.median(small.first_chunk) * 1000:.2f} ms"
            )
        if target is not targets[0]:
            goals.append(goal_line(target, args, p99 - base["p99"], first - base["first"]))
        if "engine" in f:
            engine_cpu, engine_chunks = f["engine"]
            engine_per_chunk = engine_cpu / engine_chunks * 1e6
            print(
                f"    engine  : CPU {engine_per_chunk:.0f} us per engine chunk ({engine_chunks} "
                f"chunks, {engine_cpu:.2f} s)"
                + (
                    ""
                    if target is targets[0]
                    else f"; {target.name} {f['stream_cpu'] / engine_chunks * 1e6:.0f} us per "
                    f"engine chunk, {f['stream_cpu'] / engine_cpu:.1f}x the engine's"
                )
            )
        lost = f.get("together_lost") or []
        over = (
            f" ({spread - base['spread']:+.2f} ms over direct)" if target is not targets[0] else ""
        )
        print(
            f"    together: {args.together} small requests at once, first-chunk spread "
            f"{spread:.2f} ms (median of 5 rounds){over}" + (f", lost: {lost[:3]}" if lost else "")
        )
    if hold is not None:
        load, cpu, loadavg = hold
        print(
            f"  hold: {args.hold} streams at once through the gateway with --workers "
            f"{HOLD_WORKERS} ({HOLD_CHUNKS} chunks, one every {HOLD_INTERVAL:g} s)  ({loadavg})"
        )
        print(
            f"    {load.completed} completed, {len(load.lost)} lost, at most {load.most_open} "
            f"open at once, {load.wall:.1f} s, gateway CPU {cpu:.2f} s"
            + (f"; lost: {load.lost[:3]}" if load.lost else "")
        )
    print("  goals (issue 18), the goal in brackets:")
    for line in goals:
        print(f"    {line}")
    if hold is not None:
        held = hold[0]
        print(f"    hold: {held.completed}/{args.hold} streams complete, {len(held.lost)} lost (0)")


def goal_line(target: Target, args: argparse.Namespace, p99_over: float, first_over: float) -> str:
    """A target's figures beside the goals (in brackets): CPU per engine chunk against the
    engine's own, CPU per small request, and what it adds to a burst's latencies."""
    f = target.figures
    ratio = ""
    if "engine" in f:
        engine_cpu, engine_chunks = f["engine"]
        own = engine_cpu / engine_chunks * 1e6
        ratio = (
            f"CPU per engine chunk {f['stream_cpu'] / engine_chunks * 1e6:.0f} us, engine "
            f"{own:.0f} us: {f['stream_cpu'] / engine_cpu:.1f}x (2x), "
        )
    return (
        f"{target.name}: {ratio}small request {f['small_cpu'] / args.small * 1000:.2f} ms "
        f"(2 ms), burst first chunk p50 {first_over:+.0f} ms (+40 ms), per-chunk p99 "
        f"{p99_over:+.1f} ms (+10 ms) over direct"
    )


if __name__ == "__main__":
    main()
