"""Engine benchmark: dsmlkit's vLLM and SGLang plugins against the engines' own parsers.

    bash .ci/engines                     # builds .engines-venv-vllm0.33 and -vllm0.34 once
    PYTHONPATH=src:. .engines-venv-vllm0.33/bin/python bench/bench_engines.py [--kb 20]

Every parser runs on the engine's own served path (``tests/engines/drivers.py``):
vLLM through ``ParserManager`` and ``ChatStreamProcessor.step`` per detokenized token;
SGLang through ``ReasoningParser`` then ``FunctionCallParser`` as ``OpenAIServingChat``
feeds them, and for its own V4/V4.1 parsers the ``dsv4``/``dsv41`` chat-encoding
adapter's deepseek-recipe output parser fed token ids (``deepseek-recipe`` installed).
Texts are tokenized with the bundled DeepSeek V4 tokenizer. Prints figures; asserts
nothing.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from tests.engines import drivers
from tests.engines.vectors import (
    VECTORS,
    dialect_of,
    prompt_ids,
    thinking,
    token_deltas,
    tools_for,
)

Deltas = list[tuple[str, list[int]]]
# (dialect, thinking, tools, text, deltas, prompt ids) -> result
Runner = Callable[[str, bool, list[dict[str, Any]], str, Deltas, list[int]], dict[str, Any]]

VLLM_OWN = {
    "v3.2": ("deepseek_v32", "deepseek_v3"),
    "v4": ("deepseek_v4",),
    "v4.1": ("deepseek_v41",),
}
SGLANG_OWN = {
    "v3.2": ("deepseekv32", "deepseek-v3"),
    "v4": ("deepseekv4", "deepseek-v4"),
    "v4.1": ("deepseekv41", "deepseek-v41"),
}
DSMLKIT = {"v3.2": "dsmlkit_v32", "v4": "dsmlkit_v4", "v4.1": "dsmlkit_v41"}


def _vllm(names: Mapping[str, tuple[str, ...]], streamed: bool) -> Runner:
    def run(dialect: str, think: bool, tools: list[dict[str, Any]], text: str,
            deltas: Deltas, prompt: list[int]) -> dict[str, Any]:  # fmt: skip
        parser_cls = drivers.vllm_parser_class(*names[dialect])
        request = drivers.vllm_request(parser_cls, tools, think)
        if streamed:
            return drivers.vllm_stream(parser_cls, request, deltas, prompt)
        return drivers.vllm_whole(parser_cls, request, text, prompt)

    return run


def _sglang(names: Mapping[str, tuple[str, ...]], streamed: bool, recipe: bool) -> Runner:
    def run(dialect: str, think: bool, tools: list[dict[str, Any]], text: str,
            deltas: Deltas, prompt: list[int]) -> dict[str, Any]:  # fmt: skip
        if recipe and dialect != "v3.2":
            stream = deltas if streamed else [(text, [i for _, ids in deltas for i in ids])]
            return drivers.sglang_recipe_stream(dialect, stream, think)
        tool_name, *reasoning = names[dialect]
        reasoning_name = reasoning[0] if reasoning else None
        request = drivers.sglang_request(tools, think)
        if streamed:
            return drivers.sglang_stream(tool_name, request, deltas, think, reasoning_name)
        return drivers.sglang_whole(tool_name, request, text, think, reasoning_name)

    return run


def peers() -> dict[str, tuple[Runner, Runner]]:
    """name -> (streamed runner, whole runner)."""
    ours = {d: (n,) for d, n in DSMLKIT.items()}
    return {
        "vLLM 0.33.0 own (deepseek_v*)": (_vllm(VLLM_OWN, True), _vllm(VLLM_OWN, False)),
        "vLLM + dsmlkit plugin": (_vllm(ours, True), _vllm(ours, False)),
        "SGLang 0.5.23 own (V3.2 detector, V4/V4.1 recipe)": (
            _sglang(SGLANG_OWN, True, recipe=True),
            _sglang(SGLANG_OWN, False, recipe=True),
        ),
        "SGLang + dsmlkit plugin": (
            _sglang(ours, True, recipe=False),
            _sglang(ours, False, recipe=False),
        ),
    }


def expected(vector: dict[str, Any]) -> dict[str, Any]:
    want = vector["expected"]
    return {
        "content": want.get("content") or "",
        "reasoning": want.get("reasoning") or "",
        "calls": want["calls"],
    }


def _safe(run: Runner, *args: Any) -> dict[str, Any]:
    try:
        return run(*args)
    except Exception as error:  # an engine that raises counts as a wrong answer
        return {"error": f"{type(error).__name__}: {error}"}


def agreement(streamed: Runner, whole: Runner) -> tuple[int, int, int, list[str]]:
    """Vectors (lenient ones) whose expected answer the parser gives, streamed and whole."""
    lenient = [v for v in VECTORS if not v.get("options")]
    ok_stream = ok_whole = 0
    wrong: list[str] = []
    for vector in lenient:
        args = (
            dialect_of(vector), thinking(vector), tools_for(vector), vector["text"],
            token_deltas(vector["text"]), prompt_ids(vector),
        )  # fmt: skip
        good_stream = _safe(streamed, *args) == expected(vector)
        good_whole = _safe(whole, *args) == expected(vector)
        ok_stream += good_stream
        ok_whole += good_whole
        if not (good_stream and good_whole):
            wrong.append(vector["id"])
    return ok_stream, ok_whole, len(lenient), wrong


WRITE_TOOL = [
    {
        "type": "function",
        "function": {
            "name": "write",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            },
        },
    }
]


def call_text(dialect: str, reasoning: str, content: str) -> str:
    from dsmlkit.dialects import get_dialect

    d = get_dialect(dialect)
    return (
        f"{reasoning}</think>Writing the file.\n\n{d.block_open()}\n"
        f"{d.invoke_open('write')}\n"
        f"{d.parameter_open('path', True)}index.html{d.parameter_close()}\n"
        f"{d.parameter_open('content', True)}{content}{d.parameter_close()}\n"
        f"{d.invoke_close()}\n{d.block_close()}"
    )


def html(size: int) -> str:
    row = '<tr class="r"><td><a href="/x?a=1&b=2">item</a></td><td>&lt;b&gt;</td></tr>\n'
    return ("<table>\n" + row * (size // len(row) + 1))[:size]


def timed(run: Runner, dialect: str, text: str, deltas: Deltas, value: str) -> tuple[float, bool]:
    """CPU seconds to stream ``deltas`` (thinking prompt), and whether ``value`` came out."""
    prompt = prompt_ids({"mode": "thinking"})
    start = time.process_time()
    result = _safe(run, dialect, True, WRITE_TOOL, text, deltas, prompt)
    cpu = time.process_time() - start
    calls = result.get("calls") or []
    arguments = calls[0].get("arguments") if calls else None
    return cpu, isinstance(arguments, dict) and arguments.get("content") == value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kb", type=int, default=20, help="size of the '>'-dense value")
    args = parser.parse_args()
    logging.getLogger("sglang").setLevel(logging.ERROR)
    drivers.sglang_register()
    table = peers()
    for runners in table.values():  # warm up: imports and first lookups
        _safe(runners[0], "v4.1", False, WRITE_TOOL, "hi", token_deltas("hi"), [])

    print("Parse vectors (tests/data/parse.json, the lenient ones): expected answer given")
    print(f"{'parser':44} {'streamed/token':>15} {'whole':>7}  wrong")
    for name, (streamed, whole) in table.items():
        ok_s, ok_w, total, wrong = agreement(streamed, whole)
        shown = ", ".join(wrong[:4]) + (f" (+{len(wrong) - 4})" if len(wrong) > 4 else "")
        print(f"{name:44} {ok_s:>9}/{total:<5} {ok_w:>3}/{total:<3}  {shown}")

    small, big = "<p>hello</p>\n" * 80, html(args.kb * 1000)
    workloads = [
        ("typical V4.1 call, µs/token", "v4.1", "Plan the page. " * 60, small, True),
        (f"{args.kb} KB '>'-dense V4.1 value, CPU s", "v4.1", "Plan.", big, False),
        (f"{args.kb} KB '>'-dense V3.2 value, CPU s", "v3.2", "Plan.", big, False),
    ]
    print()
    print("Streaming cost on the served path, per detokenized token (CPU time, this machine)")
    for label, dialect, reasoning, value, per_token in workloads:
        text = call_text(dialect, reasoning, value)
        deltas = token_deltas(text)
        print(f"{label} ({len(text)} chars, {len(deltas)} tokens)")
        for name, (streamed, _) in table.items():
            cpu, ok = timed(streamed, dialect, text, deltas, value)
            figure = f"{cpu / len(deltas) * 1e6:10.1f}" if per_token else f"{cpu:10.2f}"
            print(f"  {name:44} {figure}  {'value whole' if ok else 'VALUE WRONG'}")


if __name__ == "__main__":
    main()
