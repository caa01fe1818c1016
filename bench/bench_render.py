"""Render and tokenize a long agent conversation; print the time (not a test).

The conversation is generated deterministically: a system prompt, 60 tools and 200 assistant
turns that call 1-3 tools each, with reasoning, tool results and a user message every 25
turns. It is rendered for V4.1 in thinking mode and tokenized with the bundled tokenizer.

    python bench/bench_render.py [--runs N] [--tokenizer PATH]
    python bench/bench_render.py --peers [--peers-python .peers-venv/bin/python]

``--peers`` also runs vLLM's own V4.1 encoder (``vllm.tokenizers.deepseek_v41_encoding.
encode_messages``, which uses the release effort table) and vLLM's tokenizer wrapper on the
same conversation, in a subprocess with the peers venv's python (made by
``bash bench/peers/peers-install.sh``), and prints both side by side with whether the prompts
and ids are identical. Each run renders afresh (no cache, the library's default); one more
line times the render of the same conversation sent again with a ``RenderCache`` kept, as
the server keeps one. Figures are medians over the runs; CPU time is process CPU time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dsmlkit.dialects import THINK_CLOSE
from dsmlkit.render import RenderCache, RenderResult, render
from dsmlkit.render.tokens import MissingTokenWarning, PromptTokenizer, load_tokenizer

TURNS = 200
TOOLS = 60
USER_EVERY = 25
SEED = 20261130
DEFAULT_PEERS_PYTHON = str(Path(__file__).parent.parent / ".peers-venv" / "bin" / "python")

VERBS = ("read", "write", "search", "list", "fetch", "run", "query", "update", "delete", "check")
NOUNS = ("file", "issue", "branch", "table", "page", "job", "ticket", "metric", "secret", "log")
WORDS = (
    "the build fails on",
    "retry with",
    "café",
    "naïve",
    "日本語のテキスト",
    "line\nbreak",
    'say "hi"',
    "a < b && c > d",
    "tab\there",
    "emoji 🚀",
    "path/to/module.py",
    "0.5",
    "SELECT * FROM users;",
    "{not json}",
    "quoted </think> text",
    "ok",
)


def build_tools(rng: random.Random) -> list[dict[str, Any]]:
    """60 OpenAI-style function tools with mixed parameter types."""
    tools = []
    for index in range(TOOLS):
        name = f"{VERBS[index % 10]}_{NOUNS[index // 10 % 10]}_{index}"
        properties: dict[str, Any] = {
            "target": {"type": "string", "description": f"What to {VERBS[index % 10]}."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 500},
            "recursive": {"type": "boolean", "default": False},
            "tags": {"type": "array", "items": {"type": "string"}},
            "options": {
                "type": "object",
                "properties": {"mode": {"type": "string", "enum": ["fast", "safe"]}},
            },
        }
        keep = rng.sample(sorted(properties), k=rng.randint(2, 5))
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": f"{VERBS[index % 10].title()} a {NOUNS[index // 10 % 10]}. "
                    + " ".join(rng.choice(WORDS[:4]) for _ in range(rng.randint(3, 12))),
                    "parameters": {
                        "type": "object",
                        "properties": {key: properties[key] for key in keep},
                        "required": keep[:1],
                    },
                },
            }
        )
    return tools


def _argument(rng: random.Random, schema: dict[str, Any]) -> Any:
    kind = schema["type"]
    if kind == "string":
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))
    if kind == "integer":
        return rng.randint(1, 500)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        return [rng.choice(WORDS) for _ in range(rng.randint(0, 4))]
    return {"mode": rng.choice(["fast", "safe"])}


def _text(rng: random.Random, lines: int) -> str:
    return "\n".join(
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14))) for _ in range(lines)
    )


def build_conversation(rng: random.Random, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """System, user, then TURNS assistant turns with tool calls and results; ends on a user."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful coding agent.\n" + _text(rng, 20)},
        {"role": "user", "content": "Fix the failing build.\n" + _text(rng, 3)},
    ]
    call_number = 0
    for turn in range(TURNS):
        calls = []
        for _ in range(rng.randint(1, 3)):
            function = rng.choice(tools)["function"]
            properties = function["parameters"]["properties"]
            arguments = {key: _argument(rng, value) for key, value in properties.items()}
            calls.append(
                {
                    "id": f"call_{call_number:05d}",
                    "type": "function",
                    "function": {
                        "name": function["name"],
                        "arguments": json.dumps(arguments, ensure_ascii=False),
                    },
                }
            )
            call_number += 1
        messages.append(
            {
                "role": "assistant",
                "content": _text(rng, rng.randint(0, 2)),
                "reasoning_content": _text(rng, rng.randint(1, 6)),
                "tool_calls": calls,
            }
        )
        for call in calls:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": _text(rng, 12)})
        if turn % USER_EVERY == USER_EVERY - 1:
            messages.append({"role": "user", "content": _text(rng, 2)})
    messages.append({"role": "user", "content": "Summarise what you changed."})
    return messages


def timed(action: Callable[[], Any], runs: int) -> tuple[Any, float, float]:
    """(last result, median wall seconds, median CPU seconds)."""
    walls, cpus = [], []
    result = None
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        result = action()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return result, statistics.median(walls), statistics.median(cpus)


# Runs inside the peers venv: vLLM's V4.1 encoder and vLLM's tokenizer wrapper.
PEER_SCRIPT = r"""
import json, statistics, sys, time
from vllm.tokenizers.deepseek_v41 import DeepseekV41Tokenizer
from vllm.tokenizers.deepseek_v41_encoding import encode_messages

job = json.load(sys.stdin)
messages = job["messages"]
messages[0]["tools"] = job["tools"]  # where vLLM's wrapper puts request tools

def timed(action):
    walls, cpus = [], []
    for _ in range(job["runs"]):
        wall, cpu = time.perf_counter(), time.process_time()
        result = action()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return result, statistics.median(walls), statistics.median(cpus)

prompt, render_wall, render_cpu = timed(
    lambda: encode_messages(messages, thinking_mode="thinking", reasoning_effort=None))
tokenizer = DeepseekV41Tokenizer.from_pretrained(job["tokenizer_folder"])
ids, tokenize_wall, tokenize_cpu = timed(
    lambda: tokenizer.encode(prompt, add_special_tokens=False))
json.dump({"prompt": prompt, "ids": ids, "render": [render_wall, render_cpu],
           "tokenize": [tokenize_wall, tokenize_cpu]}, sys.stdout)
"""


def run_peer(python: str, job: dict[str, Any]) -> dict[str, Any]:
    completed = subprocess.run(
        [python, "-c", PEER_SCRIPT],
        input=json.dumps(job, ensure_ascii=False),
        capture_output=True,
        text=True,
        encoding="utf-8",
        env={**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "ERROR"},
        check=False,
    )
    if completed.returncode != 0:
        sys.exit(f"the vLLM peer failed:\n{completed.stderr[-3000:]}")
    peer: dict[str, Any] = json.loads(completed.stdout)
    return peer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--tokenizer", help="tokenizer.json or model folder (default: bundled)")
    parser.add_argument("--peers", action="store_true", help="also run vLLM's V4.1 encoder")
    parser.add_argument("--peers-python", default=DEFAULT_PEERS_PYTHON)
    args = parser.parse_args()

    rng = random.Random(SEED)
    tools = build_tools(rng)
    messages = build_conversation(rng, tools)
    tokenizer = load_tokenizer(args.tokenizer)

    result, render_wall, render_cpu = timed(
        lambda: render(messages, tools, dialect="v4.1", mode="thinking"), args.runs
    )
    cache = RenderCache()
    _, kept_wall, kept_cpu = timed(
        lambda: render(messages, tools, dialect="v4.1", mode="thinking", cache=cache), args.runs
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingTokenWarning)  # <｜System｜> is not in V4's file
        ids, tokenize_wall, tokenize_cpu = timed(lambda: tokenizer.encode_prompt(result), args.runs)

    print(
        f"conversation: {len(messages)} messages, {TURNS} assistant turns, {TOOLS} tools; "
        f"prompt {len(result.prompt):,} chars, {len(ids):,} tokens ({tokenizer.name})"
    )
    print(f"median of {args.runs} runs, milliseconds (wall / CPU)")
    rows = [("dsmlkit", (render_wall, render_cpu), (tokenize_wall, tokenize_cpu))]
    if args.peers:
        peer = run_peer(
            args.peers_python,
            {
                "messages": messages,
                "tools": tools,
                "runs": args.runs,
                "tokenizer_folder": str(Path(tokenizer.source).parent),
            },
        )
        rows.append(("vLLM 0.33 encode_messages", tuple(peer["render"]), tuple(peer["tokenize"])))
    print(f"{'':28}{'render':>20}{'tokenize':>20}")
    for label, render_times, tokenize_times in rows:
        cells = [
            f"{wall * 1e3:8.2f} / {cpu * 1e3:8.2f}" for wall, cpu in (render_times, tokenize_times)
        ]
        print(f"{label:28}{cells[0]:>20}{cells[1]:>20}")
    kept = f"{kept_wall * 1e3:8.2f} / {kept_cpu * 1e3:8.2f}"
    print(f"{'dsmlkit, sent again (cache)':28}{kept:>20}")
    if args.peers:
        report_peer(peer, result, ids, tokenizer)
        wall_ratio, cpu_ratio = peer["render"][0] / render_wall, peer["render"][1] / render_cpu
        print(f"render speed vs vLLM: {wall_ratio:.2f}x wall, {cpu_ratio:.2f}x CPU")


def report_peer(
    peer: dict[str, Any], result: RenderResult, ids: list[int], tokenizer: PromptTokenizer
) -> None:
    """Whether vLLM's prompt and ids match ours (caller text here quotes </think>)."""
    same_prompt = "yes" if peer["prompt"] == result.prompt else "NO"
    print(f"prompts byte-identical (release effort table): {same_prompt}")
    same_reference = peer["ids"] == tokenizer.encode_prompt(result, reference=True)
    print(f"token ids, reference mode vs vLLM: {'identical' if same_reference else 'DIFFER'}")
    think_close = tokenizer.token_id(THINK_CLOSE)
    assert think_close is not None, "the tokenizer has no </think> token"
    forged = peer["ids"].count(think_close) - ids.count(think_close)
    verdict = (
        "identical" if peer["ids"] == ids else f"differ: vLLM made {forged} {THINK_CLOSE} tokens"
    )
    print(f"token ids, default mode vs vLLM: {verdict} out of caller text")


if __name__ == "__main__":
    main()
