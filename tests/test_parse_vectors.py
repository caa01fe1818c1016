"""Every public parse vector, fed whole, char by char, at every split and in random chunks."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import parse_chunks, random_chunks

VECTORS = json.loads((Path(__file__).parent / "data" / "parse.json").read_text("utf-8"))["vectors"]


def _options(vector: dict[str, Any]) -> dict[str, Any]:
    return {
        "start_in": "reasoning" if vector["mode"] == "thinking" else "content",
        "strict": vector.get("options", {}).get("strict", False),
    }


def _expected(vector: dict[str, Any]) -> dict[str, Any]:
    expected = vector["expected"]
    return {
        "content": expected.get("content") or "",
        "reasoning": expected.get("reasoning") or "",
        "calls": expected["calls"],
    }


@pytest.fixture(params=VECTORS, ids=[v["id"] for v in VECTORS])
def vector(request: pytest.FixtureRequest) -> dict[str, Any]:
    return request.param  # type: ignore[no-any-return]


def test_vector_non_streaming(vector: dict[str, Any]) -> None:
    message = parse_chunks([vector["text"]], vector["version"], **_options(vector))
    got = {
        "content": message.content,
        "reasoning": message.reasoning,
        "calls": [{"name": c.name, "arguments": c.arguments} for c in message.calls],
    }
    assert got == _expected(vector)
    assert message.finish_reason == ("tool_calls" if message.calls else "stop")
    for call in message.calls:
        assert json.loads(call.arguments_json) == call.arguments


@pytest.mark.slow
def test_vector_every_chunking(vector: dict[str, Any]) -> None:
    text, dialect, options = vector["text"], vector["version"], _options(vector)
    whole = parse_chunks([text], dialect, **options)
    assert parse_chunks(list(text), dialect, **options) == whole
    for split in range(len(text) + 1):
        assert parse_chunks([text[:split], text[split:]], dialect, **options) == whole, split
    rng = random.Random(vector["id"])
    for _ in range(25):
        assert parse_chunks(random_chunks(text, rng), dialect, **options) == whole
