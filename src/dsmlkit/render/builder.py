"""Accumulates a prompt as pieces that remember who wrote them.

Template text goes through :meth:`PromptBuilder.template`: every special token in it
(``<｜User｜>``, ``<think>``, the ``｜DSML｜`` marker of tool-call markup …) becomes its own
piece flagged True. Text from users, tools, arguments and schemas goes through
:meth:`PromptBuilder.text` and is never flagged, whatever it contains. Neighbouring
unflagged pieces are joined, so the pieces stay few.
"""

from __future__ import annotations

from collections.abc import Sequence

from dsmlkit.render.templates import SPECIAL_TOKEN_PATTERN

Piece = tuple[str, bool]

#: Template text split into pieces (None: no special token in it), by text. Only template
#: strings land here, and the templates are a fixed set of constants, so it stays small.
_SPLITS: dict[str, tuple[Piece, ...] | None] = {}


def _split_template(text: str) -> tuple[Piece, ...] | None:
    pieces: list[Piece] = []
    start = 0
    for match in SPECIAL_TOKEN_PATTERN.finditer(text):
        if match.start() > start:
            pieces.append((text[start : match.start()], False))
        pieces.append((match.group(), True))
        start = match.end()
    if not pieces:
        return None
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
        try:
            split = _SPLITS[text]
        except KeyError:
            split = _SPLITS[text] = _split_template(text)
        if split is None:
            if text:
                self._text_run.append(text)
            return
        run = self._text_run
        for piece, is_special in split:
            if not is_special:
                run.append(piece)
                continue
            if run:
                self._pieces.append(("".join(run), False))
                run.clear()
            self._pieces.append((piece, True))

    def text(self, text: str) -> None:
        """Append text that came from the caller (never special)."""
        if text:
            self.length += len(text)
            self._text_run.append(text)

    def between(self, token: str, runs: Sequence[str]) -> None:
        """Append ``runs`` with the special ``token`` between neighbours; the runs hold no
        special token (nor ``token``), the middle ones are not empty.

        What template and text writes of the same text give, in one write: a caller who
        knows where the template's tokens are (a block whose caller text holds no copy of
        ``token``) splits it there and hands over the runs.
        """
        last = len(runs) - 1
        self.length += sum(map(len, runs)) + len(token) * last
        if last < 1:
            if runs and runs[0]:
                self._text_run.append(runs[0])
            return
        text_run = self._text_run
        if runs[0]:
            text_run.append(runs[0])
        pieces = self._pieces
        if text_run:
            pieces.append(("".join(text_run), False))
            text_run.clear()
        special = (token, True)
        append = pieces.append
        append(special)
        for i in range(1, last):
            append((runs[i], False))
            append(special)
        if runs[last]:
            text_run.append(runs[last])

    def extend(self, pieces: Sequence[Piece], length: int) -> None:
        """Append what another builder wrote: its ``pieces``, ``length`` characters."""
        if not pieces:
            return
        self.length += length
        first, last = 0, len(pieces)
        if not pieces[0][1]:
            self._text_run.append(pieces[0][0])
            first = 1
        if first < last and not pieces[-1][1]:
            last -= 1
        if first < last:
            if self._text_run:
                self._pieces.append(("".join(self._text_run), False))
                self._text_run.clear()
            self._pieces.extend(pieces[first:last])
            if last < len(pieces):
                self._text_run.append(pieces[last][0])

    def pieces(self) -> tuple[Piece, ...]:
        """The pieces so far; their texts concatenate to the prompt."""
        if self._text_run:
            self._pieces.append(("".join(self._text_run), False))
            self._text_run.clear()
        return tuple(self._pieces)
