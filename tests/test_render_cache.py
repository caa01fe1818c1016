"""A RenderCache changes nothing but speed: reading and rendering with one (fresh, or kept
from earlier requests) gives what reading and rendering without one gives, the cache stays
within its bounds, and two caches share nothing."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from dsmlkit.api.openai import parse_openai_request
from dsmlkit.render import RenderCache, RenderResult, render
from tests.test_render_golden import GOLDEN, _cases, _options

MODEL = "DeepSeek-V4.1-Flash"
WORDS = ("ok", "café", "日本語", "line\nbreak", 'say "hi"', "a < b", "</think>", "<｜User｜>")
#: Values a call's argument may take; some hold DSML, which is written piece by piece.
VALUES: tuple[Any, ...] = (
    "plain",
    "multi\nline",
    7,
    True,
    None,
    [1, "two"],
    {"mode": "fast"},
    "<｜DSML｜parameter>",
    "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
)


def seen(result: RenderResult) -> tuple[Any, ...]:
    """Everything a caller gets from a render."""
    return (
        result.prompt,
        result.pieces,
        result.output_starts_in,
        result.stop,
        result.notes,
        result.dialect,
        result.output_prefix,
    )


def _golden(dialect: str, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    folder = GOLDEN / dialect
    meta = json.loads((folder / f"{name}.meta.json").read_text(encoding="utf-8"))
    data = json.loads((folder / f"{name}.input.json").read_text(encoding="utf-8"))
    return ({"messages": data} if isinstance(data, list) else data), _options(dialect, meta)


#: One cache for every golden case, so that each also meets what the others kept.
SHARED = RenderCache()


@pytest.mark.parametrize(("dialect", "name"), _cases())
def test_golden_case_renders_alike_with_and_without_a_cache(dialect: str, name: str) -> None:
    data, options = _golden(dialect, name)
    args = (data["messages"], data.get("tools"))
    expected = seen(render(*args, **options))
    fresh = RenderCache()
    for cache in (fresh, fresh, SHARED, SHARED):  # first sight, then sent again
        assert seen(render(*args, **options, cache=cache)) == expected


def _words(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 4)))


def _conversation(rng: random.Random) -> list[dict[str, Any]]:
    """A short agent history: calls with JSON-text arguments, results, user turns."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": _words(rng)}]
    messages.append({"role": "user", "content": _words(rng)})
    for turn in range(rng.randint(0, 6)):
        calls = []
        for i in range(rng.randint(0, 2)):
            arguments = {f"k{j}": rng.choice(VALUES) for j in range(rng.randint(0, 3))}
            function = {"name": rng.choice(("read", "write")), "arguments": json.dumps(arguments)}
            calls.append({"id": f"c{turn}_{i}", "type": "function", "function": function})
        assistant: dict[str, Any] = {"role": "assistant", "content": _words(rng)}
        if rng.random() < 0.7:
            assistant["reasoning_content"] = _words(rng)
        if calls:
            assistant["tool_calls"] = calls
        messages.append(assistant)
        for call in calls:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": _words(rng)})
        if not calls or rng.random() < 0.3:
            messages.append({"role": "user", "content": _words(rng)})
    return messages


TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name in ("read", "write")
]


def _cases_random(count: int) -> list[tuple[list[dict[str, Any]], dict[str, Any]]]:
    rng = random.Random(20261201)
    histories = [_conversation(rng) for _ in range(count)]
    # Agents resend: some histories are earlier ones grown by a turn.
    histories += [[*history, {"role": "user", "content": "go on"}] for history in histories[::3]]
    dialects = ("v3.2", "v4", "v4.1")
    return [
        (history, {"dialect": rng.choice(dialects), "mode": rng.choice(("thinking", "chat"))})
        for history in histories
    ]


@pytest.mark.slow
def test_random_conversations_render_alike_with_and_without_a_cache() -> None:
    shared = RenderCache(message_chars=2_000, blocks=16)  # small: it starts again often
    for messages, options in _cases_random(150):
        expected = seen(render(messages, TOOLS, **options))
        for cache in (shared, RenderCache(), shared):
            assert seen(render(messages, TOOLS, **options, cache=cache)) == expected


def test_the_chat_reader_reads_alike_with_and_without_a_cache() -> None:
    shared = RenderCache()
    for messages, _ in _cases_random(60):
        body = {"model": MODEL, "messages": messages, "tools": TOOLS}
        expected = parse_openai_request(body)
        for _ in range(2):
            req = parse_openai_request(body, cache=shared)
            assert req.conversation == expected.conversation


def _history(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "start"}]
    for turn in range(turns):
        function = {"name": "read", "arguments": json.dumps({"path": f"file{turn}.py"})}
        call = {"id": f"c{turn}", "type": "function", "function": function}
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{turn}", "content": "x" * 50})
    return messages


def test_the_cache_stays_within_its_bounds() -> None:
    cache = RenderCache(message_chars=1_000, blocks=5, block_chars=30)
    for turns in range(1, 40):
        messages = _history(turns)
        parse_openai_request({"model": MODEL, "messages": messages}, cache=cache)
        render(messages, TOOLS, cache=cache)
        kept, chars, blocks = cache.sizes
        assert chars <= 1_000 and blocks <= 5
        assert kept > 0 and blocks > 0
    long_value = {"name": "read", "arguments": json.dumps({"path": "p" * 40})}
    call = {"id": "long", "type": "function", "function": long_value}
    cache.clear()
    render([{"role": "assistant", "content": "", "tool_calls": [call]}], cache=cache)
    assert cache.sizes[2] == 0  # its arguments text passes block_chars


def test_two_caches_share_nothing() -> None:
    first, second = RenderCache(), RenderCache()
    messages = _history(5)
    render(messages, TOOLS, cache=first)
    assert first.sizes[0] > 0 and first.sizes[2] > 0
    assert second.sizes == (0, 0, 0)
    render(messages, TOOLS, cache=second)
    kept = second.sizes
    first.clear()
    assert first.sizes == (0, 0, 0) and second.sizes == kept
