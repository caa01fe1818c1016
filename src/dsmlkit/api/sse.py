"""Server-sent-event framing for every API, and JSON text of whole bodies (bytes on the
wire are the server's business).

Most frames of a stream differ from each other in one JSON string only (the text of a
delta). :class:`TextFrames` serialises such a frame once per shape and afterwards only
escapes the text, so a streamed delta costs one string escape and one concatenation.

A non-streamed body is small but for its model output: :func:`json_body` writes the long
strings apart (escaped once, by the cheapest escape that fits them) and embeds
:class:`RawJSON` values (argument JSON the parser already wrote) as they are.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Hashable
from json.encoder import encode_basestring, encode_basestring_ascii
from typing import Any, Generic, TypeVar

from dsmlkit.errors import CallerError
from dsmlkit.parse.arguments import escaped_utf8

Key = TypeVar("Key", bound=Hashable)

#: The frame that ends an OpenAI stream. Anthropic streams never send it.
SSE_DONE = "data: [DONE]\n\n"

#: One JSON string as ``json.dumps(text, ensure_ascii=False)`` writes it (the C escape).
json_string: Callable[[str], str] = encode_basestring


#: From this length a body's string is written apart from the rest by :func:`json_body`.
LONG_STRING = 1024
_MARKER = re.compile('"dsmlkit-([0-9a-f]{32})"')


class RawJSON:
    """JSON text that :func:`json_body` writes into a body as it is (not as a string)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def json_utf8(text: str) -> bytes:
    """``text`` as one JSON string in UTF-8: the bytes of :data:`json_string`, but that
    DEL may come as ``\\u007f``.

    A text whose only control characters are tab, newline and carriage return (argument
    JSON, code, prose) is escaped by :func:`~dsmlkit.parse.arguments.escaped_utf8`, faster
    than the C escape on long text. Any other text goes through the C escape, the ASCII one
    for an ASCII text. docs/api-adapters.md (§6) gives the figures.
    """
    data = text.encode()
    escaped = escaped_utf8(data)
    if escaped is not None:
        return b"".join((b'"', escaped, b'"'))  # one copy of the long text, not two ``+``
    written = encode_basestring_ascii(text) if text.isascii() else encode_basestring(text)
    return written.encode()


def json_body(body: Any) -> bytes:
    """``body`` as compact UTF-8 JSON, JSON-equal to ``json.dumps(body)`` (what a
    ``JSONResponse`` writes) but written once: strings of :data:`LONG_STRING` characters or more
    are escaped apart by :func:`json_utf8`, :class:`RawJSON` values are embedded as they
    are, and the rest (small) goes through ``json.dumps``."""
    pieces: dict[str, bytes] = {}
    skeleton = _compact(_marked(body, pieces))
    if not pieces:
        return skeleton.encode()
    # Only the skeleton is searched for markers: the pieces are inserted, never scanned.
    parts = _MARKER.split(skeleton)
    written = [parts[0].encode()]
    for at in range(1, len(parts), 2):
        marker = parts[at]
        written.append(pieces.get(marker) or f'"dsmlkit-{marker}"'.encode())
        written.append(parts[at + 1].encode())
    return b"".join(written)


def _marked(value: Any, pieces: dict[str, bytes]) -> Any:
    """``value`` with a marker string in place of each long string and raw JSON (their
    JSON text in ``pieces``); containers without either are returned as they are."""
    kind = type(value)
    if kind is str:
        if len(value) < LONG_STRING:
            return value
        return _piece(json_utf8(value), pieces)
    if kind is RawJSON:
        return _piece(value.text.encode(), pieces)
    if kind is dict or kind is list:
        # copied on the first change only: most of a body is small and stays as it is
        copied: Any = None
        for key, item in value.items() if kind is dict else enumerate(value):
            if type(item) in _PLAIN or (type(item) is str and len(item) < LONG_STRING):
                continue
            marked = _marked(item, pieces)
            if marked is not item:
                copied = copied if copied is not None else kind(value)
                copied[key] = marked
        return value if copied is None else copied
    return value


#: Values that hold no string.
_PLAIN = frozenset((int, float, bool, type(None)))


def _piece(text: bytes, pieces: dict[str, bytes]) -> str:
    marker = secrets.token_hex(16)
    pieces[marker] = text
    return f"dsmlkit-{marker}"


def _compact(data: Any) -> str:
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
    """Frames that differ only in one string (and a number before it), byte-identical to
    framing each one in full.

    ``build(key, text)`` is the full framing of a frame of shape ``key`` holding ``text``
    (as one JSON string value); for :meth:`numbered` frames it is ``build(key, number,
    text)``, ``number`` standing where a JSON number goes (a Responses event's
    ``sequence_number``). It is called once per key, with random markers (strings) for the
    values; the frame is cut at the markers, and :meth:`frame` / :meth:`numbered` fill the
    gaps, so a frame costs one string escape and one concatenation.
    """

    def __init__(self, build: Callable[[Key, str], str] | Callable[[Key, str, str], str]) -> None:
        self._build = build
        self._parts: dict[Key, tuple[str, ...]] = {}

    def frame(self, key: Key, text: str) -> str:
        """The frame of shape ``key`` holding ``text``."""
        parts = self._parts.get(key) or self.parts(key)
        return f"{parts[0]}{encode_basestring(text)}{parts[1]}"

    def numbered(self, key: Key, number: int, text: str) -> str:
        """The frame of shape ``key`` holding ``number`` and ``text``."""
        parts = self._parts.get(key) or self.parts(key, 2)
        return f"{parts[0]}{number}{parts[1]}{encode_basestring(text)}{parts[2]}"

    def parts(self, key: Key, gaps: int = 1) -> tuple[str, ...]:
        """The frame of shape ``key`` cut at its ``gaps`` values (made once per key).

        A frame is these parts with the values in between, the text as
        :data:`json_string` writes it: what a stream's hot path splices itself.
        """
        parts = self._parts.get(key)
        if parts is None:
            parts = self._parts[key] = self._cut(key, gaps)
        return parts

    def _cut(self, key: Key, gaps: int) -> tuple[str, ...]:
        """The frame of ``key`` cut at its ``gaps`` values (in the order they are passed)."""
        while True:  # markers that the rest of the frame (ids, model name) does not hold
            markers = [secrets.token_hex(16) for _ in range(gaps)]
            rest = self._build(key, *markers)
            parts: list[str] = []
            for marker in markers:
                before, found, rest = rest.partition(encode_basestring(marker))
                if not found:
                    raise CallerError(
                        f"the frame of {key!r} does not hold its values as strings, in order"
                    )
                parts.append(before)
            parts.append(rest)
            if not any(marker in part for marker in markers for part in parts):
                return tuple(parts)
