"""Accumulates a prompt as pieces that remember who wrote them.

Template text goes through :meth:`PromptBuilder.template`: every special token in it
(``<｜User｜>``, ``<think>``, the ``｜DSML｜`` marker of tool-call markup …) becomes its own
piece flagged True. Text from users, tools, arguments and schemas goes through
:meth:`PromptBuilder.text` and is never flagged, whatever it contains. Neighbouring
unflagged pieces are joined, so the pieces stay few.
"""

from __future__ import annotations

import functools

from dsmlkit.render.templates import SPECIAL_TOKEN_PATTERN

Piece = tuple[str, bool]


@functools.lru_cache(maxsize=512)
def _split_template(text: str) -> tuple[Piece, ...]:
    pieces: list[Piece] = []
    start = 0
    for match in SPECIAL_TOKEN_PATTERN.finditer(text):
        if match.start() > start:
            pieces.append((text[start : match.start()], False))
        pieces.append((match.group(), True))
        start = match.end()
    if start < len(text):
        pieces.append((text[start:], False))
    return tuple(pieces)


class PromptBuilder:
    """Collects template and data text in order."""

    def __init__(self) -> None:
        self._pieces: list[Piece] = []
        self._text_run: list[str] = []
        #: Characters written so far (an offset into the finished prompt).
        self.length = 0

    def template(self, text: str) -> None:
        """Append text the template writes; its special tokens are flagged."""
        self.length += len(text)
        for piece, is_special in _split_template(text):
            if is_special:
                self._flush()
                self._pieces.append((piece, True))
            else:
                self._text_run.append(piece)

    def text(self, text: str) -> None:
        """Append text that came from the caller (never special)."""
        if text:
            self.length += len(text)
            self._text_run.append(text)

    def pieces(self) -> tuple[Piece, ...]:
        """The pieces so far; their texts concatenate to the prompt."""
        self._flush()
        return tuple(self._pieces)

    def _flush(self) -> None:
        if self._text_run:
            self._pieces.append(("".join(self._text_run), False))
            self._text_run = []
