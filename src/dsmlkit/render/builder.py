"""Accumulates a prompt as texts that remember who wrote them.

Template text goes through :meth:`PromptBuilder.template`: every special token in it
(``<｜User｜>``, ``<think>``, the ``｜DSML｜`` marker of tool-call markup …) is flagged.
Text from users, tools, arguments and schemas goes through :meth:`PromptBuilder.text` and
is never flagged, whatever it contains. The texts are kept as written and joined once;
the ``(text, is_special)`` pieces are made only when asked for.
"""

from __future__ import annotations

from dsmlkit.dialects import MARKER
from dsmlkit.render.templates import SPECIAL_TOKEN_PATTERN, SPECIAL_TOKENS

Piece = tuple[str, bool]

_SPECIAL = frozenset(SPECIAL_TOKENS)


class PromptBuilder:
    """Collects template and data text in order."""

    def __init__(self) -> None:
        self._texts: list[str] = []
        #: Indexes into _texts of flagged texts, in order: special tokens, and the marked.
        self._flagged: list[int] = []
        #: The flagged texts in which every marker is special (and nothing else).
        self._marked: set[int] = set()
        #: Characters written so far (an offset into the finished prompt).
        self.length = 0

    def template(self, text: str) -> None:
        """Append text the template writes; its special tokens are flagged."""
        texts = self._texts
        self.length += len(text)
        if text in _SPECIAL:
            self._flagged.append(len(texts))
            texts.append(text)
            return
        start = 0
        for match in SPECIAL_TOKEN_PATTERN.finditer(text):
            if match.start() > start:
                texts.append(text[start : match.start()])
            self._flagged.append(len(texts))
            texts.append(match.group())
            start = match.end()
        if start < len(text):
            texts.append(text[start:])

    def text(self, text: str) -> None:
        """Append text that came from the caller (never special)."""
        self.length += len(text)
        self._texts.append(text)

    def marked(self, text: str) -> None:
        """Append markup and caller text in one write: every ``｜DSML｜`` marker in ``text``
        is the template's (the caller's parts hold none), and it holds no other special
        token that is."""
        self.length += len(text)
        self._flagged.append(len(self._texts))
        self._marked.add(len(self._texts))
        self._texts.append(text)

    def prompt(self) -> str:
        """The text so far."""
        return "".join(self._texts)

    def pieces(self) -> tuple[Piece, ...]:
        """The pieces so far: their texts concatenate to the prompt, neighbouring unflagged
        texts joined, none empty."""
        texts, marked = self._texts, self._marked
        pieces: list[Piece] = []
        carry = ""  # unflagged text that the next piece continues
        start = 0
        for index in self._flagged:
            before = carry + "".join(texts[start:index])
            start = index + 1
            if index not in marked:
                _plain(pieces, before)
                pieces.append((texts[index], True))
                carry = ""
                continue
            *runs, carry = texts[index].split(MARKER)
            if not runs:
                carry = before + carry
                continue
            _plain(pieces, before + runs[0])
            for run in runs[1:]:
                pieces.append(_MARKER_PIECE)
                _plain(pieces, run)
            pieces.append(_MARKER_PIECE)
        _plain(pieces, carry + "".join(texts[start:]))
        return tuple(pieces)


_MARKER_PIECE: Piece = (MARKER, True)


def _plain(pieces: list[Piece], text: str) -> None:
    if text:
        pieces.append((text, False))
