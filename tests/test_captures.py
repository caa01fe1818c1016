"""Request bodies real clients sent (tests/data/captures/) all render."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dsmlkit.api import parse_request
from dsmlkit.render import render_conversation

CAPTURES = sorted((Path(__file__).parent / "data" / "captures").glob("*.json"))


def capture_api(path: Path) -> str:
    return "anthropic" if path.name.startswith("claude-code") else "openai"


def load(path: Path) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(path.read_text("utf-8"))
    return body


def _texts(value: Any) -> list[str]:
    """The text a message carries: string content, text blocks, tool_result content."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [text for item in value for text in _texts(item)]
    if isinstance(value, dict):
        if value.get("type") == "text":
            return [value["text"]]
        return _texts(value.get("content"))
    return []


@pytest.mark.parametrize("path", CAPTURES, ids=[p.stem for p in CAPTURES])
@pytest.mark.parametrize("dialect", ["v3.2", "v4", "v4.1"])
def test_every_capture_renders(path: Path, dialect: str) -> None:
    body = load(path)
    req = parse_request(capture_api(path), body, dialect=dialect)
    result = render_conversation(req.conversation, req.render)
    texts = [text for text in _texts(body["messages"][-1]) if text.strip()]
    assert texts
    assert all(text in result.prompt for text in texts)
    for tool in req.conversation.tools:
        assert tool.name in result.prompt or tool.deferred
    assert req.resolved_max_tokens() == body["max_tokens"]


def test_claude_code_fields_without_effect_are_noted() -> None:
    path = next(p for p in CAPTURES if p.stem == "claude-code-2.1.197-first-request")
    req = parse_request("anthropic", load(path))
    notes = " ".join(req.conversation.notes)
    for field in ("metadata", "context_management", "cache_control"):
        assert f"{field}" in notes
