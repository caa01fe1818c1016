"""Shared helpers for the parser tests: write DSML the way the reference encoder does."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from dsmlkit.api.seal import SealError
from dsmlkit.dialects import ASCII_MARKER, DIALECTS, MARKER, Dialect
from dsmlkit.parse import MessageCollector, ParsedMessage, Parser
from dsmlkit.render.tokens import bundled_tokenizer_path

ALL_DIALECTS = tuple(DIALECTS.values())
MARKERS = (MARKER, ASCII_MARKER)


def counter_ids() -> Callable[[], str]:
    """Deterministic call ids, so two parses of one text compare equal."""
    count = iter(range(1_000_000))
    return lambda: f"call_{next(count)}"


def write_invoke(dialect: Dialect, name: str, arguments: dict[str, Any], marker: str) -> str:
    params = "\n".join(
        dialect.parameter_open(key, isinstance(value, str), marker)
        + (value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
        + dialect.parameter_close(marker)
        for key, value in arguments.items()
    )
    return f"{dialect.invoke_open(name, marker)}\n{params}\n{dialect.invoke_close(marker)}"


def write_block(
    dialect: Dialect, calls: Sequence[tuple[str, dict[str, Any]]], marker: str = MARKER
) -> str:
    invokes = "\n".join(write_invoke(dialect, name, args, marker) for name, args in calls)
    return f"\n\n{dialect.block_open(marker)}\n{invokes}\n{dialect.block_close(marker)}"


def parse_chunks(
    chunks: Sequence[str] | Iterator[str],
    dialect: str | Dialect,
    *,
    finish_reason: str | None = None,
    **options: Any,
) -> ParsedMessage:
    parser = Parser(dialect, id_factory=counter_ids(), **options)
    collector = MessageCollector()
    for chunk in chunks:
        collector.add(parser.feed(chunk))
    collector.add(parser.close(finish_reason))
    return collector.message()


def random_chunks(text: str, rng: random.Random, max_size: int = 12) -> list[str]:
    chunks, i = [], 0
    while i < len(text):
        size = rng.randint(1, max_size)
        chunks.append(text[i : i + size])
        i += size
    return chunks


def summary(message: ParsedMessage) -> dict[str, Any]:
    return {
        "content": message.content,
        "reasoning": message.reasoning,
        "calls": [{"name": c.name, "arguments": c.arguments} for c in message.calls],
    }


#: The V4.1 template tokens the bundled V4 ``tokenizer.json`` lacks, and the ids the tests'
#: V4.1 tokenizer gives them: ``<｜System｜>`` has V4.1's own id (deepseek-recipe refuses to
#: encode a V4.1 prompt without it); the image placeholder takes the next free id.
V41_ADDED_TOKENS = {"<｜System｜>": 129280, "<｜deepseek_image｜>": 129281}


def v41_tokenizer_text() -> str:
    """The tests' one V4.1 ``tokenizer.json``: the bundled V4 file plus
    :data:`V41_ADDED_TOKENS` (the gateway's tokenizer and the fake engine's are both this)."""
    spec = json.loads(bundled_tokenizer_path().read_text(encoding="utf-8"))
    spec["added_tokens"] += [
        {
            "id": token_id,
            "content": content,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": False,
        }
        for content, token_id in V41_ADDED_TOKENS.items()
    ]
    return json.dumps(spec, ensure_ascii=False)


def v41_tokenizer_file(folder: Path) -> Path:
    """:func:`v41_tokenizer_text` written to ``folder/tokenizer.json`` (tests take the
    session fixture ``v41_tokenizer`` of tests/conftest.py instead)."""
    path = folder / "tokenizer.json"
    path.write_text(v41_tokenizer_text(), encoding="utf-8")
    return path


class MarkedSealer:
    """A deterministic stand-in :class:`~dsmlkit.api.seal.Sealer` for the adapters' tests:
    no secrecy at all (the model and text as JSON behind a marker), so two streams of one
    output stay equal. The gateway's AES-GCM key ring is tested in ``tests/server``."""

    def seal(self, text: str, model: str) -> str:
        return "sealed:" + json.dumps([model, text])

    def open(self, token: str, model: str) -> str:
        try:
            sealed_for, text = json.loads(token.removeprefix("sealed:"))
        except (TypeError, ValueError):
            raise SealError("not a test token") from None
        if not token.startswith("sealed:") or sealed_for != model:
            raise SealError("sealed for another model")
        return str(text)
