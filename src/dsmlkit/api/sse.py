"""Server-sent-event framing for both APIs (bytes on the wire are the server's business)."""

from __future__ import annotations

import json
from typing import Any

#: The frame that ends an OpenAI stream. Anthropic streams never send it.
SSE_DONE = "data: [DONE]\n\n"


def _compact(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def sse_openai(chunk: dict[str, Any]) -> str:
    """One OpenAI frame: ``data: <json>``."""
    return f"data: {_compact(chunk)}\n\n"


def sse_anthropic(event: str, data: dict[str, Any]) -> str:
    """One Anthropic frame: ``event: <name>`` then ``data: <json>``."""
    return f"event: {event}\ndata: {_compact(data)}\n\n"
