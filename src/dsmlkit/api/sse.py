"""Server-sent-event framing for every API (bytes on the wire are the server's business).

Most frames of a stream differ from each other in one JSON string only (the text of a
delta). :class:`TextFrames` serialises such a frame once per shape and afterwards only
escapes the text, so a streamed delta costs one string escape and one concatenation.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Hashable
from json.encoder import encode_basestring
from typing import Any, Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)

#: The frame that ends an OpenAI stream. Anthropic streams never send it.
SSE_DONE = "data: [DONE]\n\n"

#: One JSON string as ``json.dumps(text, ensure_ascii=False)`` writes it (the C escape).
json_string: Callable[[str], str] = encode_basestring


def _compact(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def sse_openai(chunk: dict[str, Any]) -> str:
    """One OpenAI frame: ``data: <json>``."""
    return f"data: {_compact(chunk)}\n\n"


def sse_anthropic(event: str, data: dict[str, Any]) -> str:
    """One Anthropic frame: ``event: <name>`` then ``data: <json>``."""
    return f"event: {event}\ndata: {_compact(data)}\n\n"


#: A Responses frame is framed the same way: ``event: <type>`` then ``data: <json>``.
sse_event = sse_anthropic


class TextFrames(Generic[Key]):
    """Frames that differ only in one string, byte-identical to framing each one in full.

    ``build(key, text)`` is the full framing of a frame of shape ``key`` holding ``text``
    (as one JSON string value). It is called once per key, with a random marker for the
    text; the frame is split around the marker and :meth:`frame` fills the gap.
    """

    def __init__(self, build: Callable[[Key, str], str]) -> None:
        self._build = build
        self._split: dict[Key, tuple[str, str]] = {}

    def frame(self, key: Key, text: str) -> str:
        """The frame of shape ``key`` holding ``text``."""
        split = self._split.get(key)
        if split is None:
            split = self._split[key] = self._split_around_marker(key)
        return f"{split[0]}{encode_basestring(text)}{split[1]}"

    def _split_around_marker(self, key: Key) -> tuple[str, str]:
        while True:  # a marker that the rest of the frame (ids, model name) does not hold
            marker = secrets.token_hex(16)
            frame = self._build(key, marker)
            before, found, after = frame.partition(encode_basestring(marker))
            if not found:
                raise ValueError(f"the frame of {key!r} does not hold its text as one string")
            if marker not in before and marker not in after:
                return before, after
