"""Recognising one tag at a ``<``: DSML tags, ``<think>``/``</think>`` and EOS.

:func:`TagScanner.scan` looks at the text starting at a ``<`` and answers one of

* a :class:`Tag` — a complete tag (its kind, attributes and where it ends);
* :data:`NO_TAG` — this ``<`` does not start a tag the grammar accepts: it is text;
* :data:`PENDING` — the buffer ends inside something that may still become a tag.

Both are members of :class:`Mark`, the one set of sentinels the scanner and the parser
answer with wherever there is no tag or position to give.

Tags are short (capped at :data:`MAX_TAG_LENGTH` characters), so scanning one from its
``<`` again when more text arrives costs a bounded amount; the parser never rescans
anything else. :meth:`TagScanner.find` tells the parser where the next ``<`` that may
start a tag is, so it never scans a ``<`` that cannot (most of those in HTML or code).

The grammar is data built from a :class:`~dsmlkit.dialects.Dialect` and the ``strict``
flag. Lenient (default): every dialect's tag names with 0–2 spaces after the marker,
``｜``/``|`` markers with one or two bars, and the spellings seen in the field, each
flagged in ``Tag.typo``: ``toolcalls`` and other block-name drift (``tool_use``…), doubled
bars, ``‖`` (U+2016) bars, spaces around the bars (``< | DSML | tool_calls>``), truncated
closers such as ``</｜DSML｜inv>``, a block opener with no ``>`` (``<｜DSML｜tool_calls`` right
before the next tag) and, inside a value only, a plain ``</parameter>``. Strict: only the
configured dialect's names and spacing, with ``｜DSML｜`` or ``|DSML|``.

A tag is at most :data:`MAX_TAG_LENGTH` characters; the answer depends only on the text
within that window from the ``<`` (and on whether the text ends inside it), so a tag parses
the same however the text was split.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Final

from dsmlkit.dialects import ASCII_MARKER, DIALECTS, EOS, MARKER, THINK_CLOSE, THINK_OPEN, Dialect

#: Longest tag (from ``<`` to ``>``) accepted; a longer candidate is text.
MAX_TAG_LENGTH: Final = 512

_BARS = "｜|"
_LENIENT_BARS = "｜|‖"
#: Spaces accepted around the bars of a lenient marker (``< | DSML | …``).
_MAX_MARKER_SPACES = 2
_PLAIN_PARAM_CLOSE = "parameter>"


class TagKind(enum.Enum):
    BLOCK_OPEN = "block_open"
    BLOCK_CLOSE = "block_close"
    INVOKE_OPEN = "invoke_open"
    INVOKE_CLOSE = "invoke_close"
    PARAM_OPEN = "parameter_open"
    PARAM_CLOSE = "parameter_close"
    THINK_OPEN = "think_open"
    THINK_CLOSE = "think_close"
    EOS = "eos"


class Mark(enum.Enum):
    """What a look at the text found when it is not a tag (or not a position)."""

    PENDING = "pending"  # the text ends inside what may still become a tag or a follower
    NO_TAG = "no tag"  # no tag (or closing sequence) here: it is text
    CUT_OFF = "cut off"  # a ``length`` cut-off inside what may have been a tag
    END = "end of output"  # the output ended where a follower was expected
    BRACE = "brace"  # a ``{`` follows: a JSON body
    UNKNOWN = "unknown"  # not looked for yet


# The members as module constants: reading an enum member off its class is slow in 3.11.
PENDING: Final = Mark.PENDING
NO_TAG: Final = Mark.NO_TAG


@dataclass(frozen=True, slots=True)
class Tag:
    """A recognised tag ``text[start:end]``."""

    kind: TagKind
    start: int
    end: int
    name: str = ""
    is_string: bool = True
    typo: str = ""


_BLOCK, _INVOKE, _PARAM = "block", "invoke", "parameter"

# ---------------------------------------------------------------------------------------
# Attribute grammar. Each atom is (full regex, regex of any prefix of it); the prefix regex
# of a sequence tells whether the text so far could still grow into a complete tag.

_Atom = tuple[str, str]


def _literal(text: str) -> _Atom:
    prefix = ""
    for char in reversed(text):
        prefix = f"(?:{re.escape(char)}{prefix})?"
    return re.escape(text), prefix


def _prefix_regex(atoms: list[_Atom]) -> str:
    if not atoms:
        return ""
    full, prefix = atoms[0]
    return f"(?:{prefix}|{full}{_prefix_regex(atoms[1:])})"


_WS1: _Atom = (r"\s+", r"\s*")
_WS0: _Atom = (r"\s*", r"\s*")
_NAME_VALUE: _Atom = (r'"([^"\n]*)"', r'(?:"[^"\n]*)?')
_BOOL_VALUE: _Atom = (r'"(true|false)"', r'(?:"(?:t(?:r(?:ue?)?)?|f(?:a(?:l(?:se?)?)?)?)?)?')
_EQ = [_WS0, _literal("="), _WS0]
_NAME_ATTR = [_WS1, _literal("name"), *_EQ, _NAME_VALUE]
_STRING_ATTR = [_WS1, _literal("string"), *_EQ, _BOOL_VALUE]
_END = [_WS0, _literal(">")]


def _attr_patterns(atoms: list[_Atom]) -> tuple[re.Pattern[str], re.Pattern[str]]:
    full = "".join(atom[0] for atom in atoms)
    return re.compile(full), re.compile(_prefix_regex(atoms))


def _optional(atoms: list[_Atom]) -> _Atom:
    return f"(?:{''.join(atom[0] for atom in atoms)})?", _prefix_regex(atoms)


# Lenient parameter openers also take a missing or odd ``string`` attribute (seen in the
# field); anything but "false" then means a string value.
_ANY_VALUE: _Atom = (r'"([^"\n]*)"', r'(?:"[^"\n]*)?')
_LOOSE_STRING_ATTR = [_WS1, _literal("string"), *_EQ, _ANY_VALUE]

# Where a tag may start: a '<' followed by a marker's bars (after an optional '/' and up to
# three spaces; EOS starts that way too), by ``think>``/``/think>`` or a plain
# ``/parameter>``, or by a prefix of one of these that the text ends in. Every '<' that
# ``TagScanner.scan`` answers with anything but NO_TAG matches, in every grammar.
_SPACES = f" {{1,{_MAX_MARKER_SPACES + 1}}}"
_MARKER_START = f"[{_LENIENT_BARS}]|{_SPACES}(?:[{_LENIENT_BARS}]|\\Z)"
_THINK_START = f"t(?:hink>|{_literal('hink')[1]}\\Z)"
_PLAIN_START = f"p(?:arameter>|{_literal('arameter')[1]}\\Z)"
_TAG_START = re.compile(
    f"<(?:{_MARKER_START}|/(?:{_MARKER_START}|{_THINK_START}|{_PLAIN_START}|\\Z)"
    f"|{_THINK_START}|\\Z)"
)
#: Past this many characters after a '<', ``TagScanner.find`` looks for the rarer
#: characters a tag needs (its bars, ``think>``, ``</parameter>``) instead of at each '<'.
_FAR = 256
#: A '<' this close to the end may start a tag that is still arriving.
_NEAR_END = 1 + len(_PLAIN_PARAM_CLOSE) + 1
#: How far before its first bar a marker's '<' can be (``</   |``).
_BAR_REACH = 2 + _MAX_MARKER_SPACES + 1
_THINK_WORD = THINK_OPEN[1:]
_PLAIN_CLOSE_TAG = "</" + _PLAIN_PARAM_CLOSE
# Keys of what ``find`` remembers besides the needles it searched for (no needle is empty).
_MARKER_KEY, _THINK_KEY = "marker", "think tag"

_CLOSE_ATTRS = _attr_patterns(_END)
_INVOKE_ATTRS = _attr_patterns(_NAME_ATTR + _END)
_PARAM_ATTRS = _attr_patterns(_NAME_ATTR + _STRING_ATTR + _END)
_LOOSE_PARAM_ATTRS = _attr_patterns([*_NAME_ATTR, _optional(_LOOSE_STRING_ATTR), *_END])
# Lenient block openers may lack their '>' (group 1 is then None) when the next tag follows.
_LOOSE_BLOCK_ATTRS = (re.compile(r"\s*(>)|\|?(?=\s*<)"), re.compile(r"\s*>?|\|\s*"))


@dataclass(frozen=True)
class Grammar:
    """Which spellings a parser accepts."""

    names: dict[str, str]  # tag name without leading spaces -> block/invoke/parameter
    typo_names: dict[str, str]
    spaces: tuple[int, ...]  # accepted counts of spaces between marker and name
    lenient: bool

    @classmethod
    def for_dialect(cls, dialect: Dialect, *, strict: bool) -> Grammar:
        if strict:
            names = {
                dialect.block.lstrip(" "): _BLOCK,
                dialect.invoke.lstrip(" "): _INVOKE,
                dialect.parameter.lstrip(" "): _PARAM,
            }
            spaces = (len(dialect.block) - len(dialect.block.lstrip(" ")),)
            return cls(names=names, typo_names={}, spaces=spaces, lenient=False)
        names = {  # every known dialect's spellings, and this one's
            name.lstrip(" "): kind
            for known in (*DIALECTS.values(), dialect)
            for name, kind in (
                (known.block, _BLOCK),
                (known.invoke, _INVOKE),
                (known.parameter, _PARAM),
            )
        }
        typos = {
            name: _BLOCK
            for name in (
                "toolcalls",
                "functioncalls",
                "tool_use",
                "tool_call",
                "function_call",
                "tool_ccalls",
                "tool_cs",
            )
        }
        return cls(names=names, typo_names=typos, spaces=(0, 1, 2), lenient=True)


_OPEN_KIND = {_BLOCK: TagKind.BLOCK_OPEN, _INVOKE: TagKind.INVOKE_OPEN, _PARAM: TagKind.PARAM_OPEN}
_CLOSE_KIND = {
    _BLOCK: TagKind.BLOCK_CLOSE,
    _INVOKE: TagKind.INVOKE_CLOSE,
    _PARAM: TagKind.PARAM_CLOSE,
}
_ATTRS = {
    TagKind.BLOCK_OPEN: _CLOSE_ATTRS,
    TagKind.INVOKE_OPEN: _INVOKE_ATTRS,
    TagKind.PARAM_OPEN: _PARAM_ATTRS,
}
_MIN_TRUNCATED = 3
_LITERALS = (
    (THINK_OPEN, TagKind.THINK_OPEN),
    (THINK_CLOSE, TagKind.THINK_CLOSE),
    (EOS, TagKind.EOS),
)


class TagScanner:
    """Recognises tags for one :class:`Grammar`; see the module docstring."""

    def __init__(self, grammar: Grammar) -> None:
        self._grammar = grammar
        self._all_names = {**grammar.names, **grammar.typo_names}
        self._longest_name = max(map(len, self._all_names))
        # What may follow '<' in any tag (a fast "not a tag" for ordinary '<' in text).
        bars = _LENIENT_BARS + " " if grammar.lenient else _BARS
        self._second = frozenset(bars + "/" + THINK_OPEN[1] + EOS[1])
        self._text = ""  # the text ``find`` last searched far ahead in, and what it found
        self._found: dict[str, tuple[int, int]] = {}

    def find(self, text: str, start: int) -> int:
        """Index of the first ``<`` at or after ``start`` that may start a tag, or -1.

        :meth:`scan` answers NO_TAG at every ``<`` before it (the ``<`` found may still start
        no tag). One regex looks at the next :data:`_FAR` characters; past them the search
        jumps between the characters every tag needs, so an ordinary ``<`` costs nothing.
        What it found in a text is remembered: searching one text from left to right reads
        it once.
        """
        lt = text.find("<", start)
        if lt < 0:
            return lt
        # In the window, a tag cut by the window's end still matches (as a prefix at \Z);
        # a match that reaches that end is checked against the whole text.
        window = lt + _FAR
        match = _TAG_START.search(text, lt, window)
        while match is not None:
            if match.end() < window or window >= len(text):
                return match.start()
            if _TAG_START.match(text, match.start()):
                return match.start()
            match = _TAG_START.search(text, match.start() + 1, window)
        lt = text.find("<", window)
        if lt < 0:
            return lt
        if text is not self._text:
            self._text, self._found = text, {}
        found = [
            at
            for at in (
                self._after_bar(text, lt),
                self._think(text, lt),
                self._next(text, _PLAIN_CLOSE_TAG, lt),
                text.find("<", max(lt, len(text) - _NEAR_END)),
            )
            if at >= 0
        ]
        return min(found, default=-1)

    def _remembered(self, key: str, at: int) -> int | None:
        """The first ``key`` at or after ``at`` if an earlier search of this text tells."""
        searched_from, position = self._found.get(key, (-1, -1))
        if 0 <= searched_from <= at and (position < 0 or position >= at):
            return position
        return None

    def _next(self, text: str, needle: str, at: int) -> int:
        """``text.find(needle, at)``, answered from memory when an earlier search covers it."""
        position = self._remembered(needle, at)
        if position is None:
            position = text.find(needle, at)
            self._found[needle] = (at, position)
        return position

    def _after_bar(self, text: str, lt: int) -> int:
        """The first '<' from ``lt`` that the bars of a marker follow (see ``_TAG_START``)."""
        found = self._remembered(_MARKER_KEY, lt)
        if found is None:
            found = self._marker_from(text, lt)
            self._found[_MARKER_KEY] = (lt, found)
        return found

    def _marker_from(self, text: str, lt: int) -> int:
        while True:
            bars = [b for b in (self._next(text, bar, lt + 1) for bar in _LENIENT_BARS) if b >= 0]
            if not bars:
                return -1
            bar = min(bars)
            before = text.rfind("<", max(lt, bar - _BAR_REACH), bar)
            if before >= 0 and _TAG_START.match(text, before):
                return before
            # A marker whose bars come later starts after this bar.
            lt = text.find("<", bar + 1)
            if lt < 0:
                return -1

    def _think(self, text: str, lt: int) -> int:
        """The first ``<think>`` or ``</think>`` from ``lt``."""
        found = self._remembered(_THINK_KEY, lt)
        if found is not None:
            return found
        at = lt + 1
        while True:
            word = self._next(text, _THINK_WORD, at)
            if word < 0:
                found = -1
                break
            before = text.rfind("<", max(lt, word - 2), word)
            if before >= 0 and text[before + 1 : word] in ("", "/"):
                found = before
                break
            at = word + 1
        self._found[_THINK_KEY] = (lt, found)
        return found

    def scan(self, text: str, start: int, final: bool, *, in_value: bool = False) -> Tag | Mark:
        """Recognise the tag at ``text[start] == "<"``.

        ``final`` means no more text will come, so nothing is pending. ``in_value``: the
        ``<`` is inside a parameter value, where a lenient grammar also takes a plain
        ``</parameter>`` as a parameter closer.
        """
        n = len(text)
        if start + 1 < n and text[start + 1] not in self._second:
            return NO_TAG
        limit = start + MAX_TAG_LENGTH
        if n >= limit:  # the window is complete: nothing can be pending
            result = self._scan(text, start, limit, in_value)
            return NO_TAG if result is PENDING else result
        result = self._scan(text, start, n, in_value)
        return NO_TAG if result is PENDING and final else result

    def _scan(self, text: str, start: int, n: int, in_value: bool) -> Tag | Mark:
        """The tag in ``text[start:n]`` (``n`` is the end of the window)."""
        for literal, kind in _LITERALS:  # each far shorter than the window
            if text.startswith(literal, start):
                return Tag(kind, start, start + len(literal))
            if n - start < len(literal) and literal.startswith(text[start:n]):
                return PENDING
        i = start + 1
        if i >= n:
            return PENDING
        closing = text[i] == "/"
        if closing:
            i += 1
        # The marker: |DSML| or ｜DSML｜ (lenient: see _scan_lenient_marker).
        mark = i
        if self._grammar.lenient:
            after, marker_typo = self._scan_lenient_marker(text, i, n)
        else:
            after, marker_typo = self._scan_marker(text, i, n)
        if isinstance(after, Mark):
            if after is NO_TAG and closing and in_value and self._grammar.lenient:
                return self._plain_param_close(text, start, mark, n)
            return after
        i = after
        spaces = 0
        while i < n and text[i] == " " and spaces <= 2:
            i += 1
            spaces += 1
        if i >= n:
            return PENDING if spaces <= max(self._grammar.spaces) else NO_TAG
        if spaces not in self._grammar.spaces:
            return NO_TAG
        name_start = i
        longest = name_start + self._longest_name
        while i < n and i <= longest and (text[i].isalpha() or text[i] == "_"):
            i += 1
        word = text[name_start:i]
        if i >= n:
            viable = any(name.startswith(word) for name in self._all_names)
            return PENDING if viable else NO_TAG
        role, typo = self._classify_name(word, closing)
        if role is None:
            return NO_TAG
        kind = (_CLOSE_KIND if closing else _OPEN_KIND)[role]
        if kind is TagKind.PARAM_OPEN and self._grammar.lenient:
            full, prefix = _LOOSE_PARAM_ATTRS
        elif kind is TagKind.BLOCK_OPEN and self._grammar.lenient:
            full, prefix = _LOOSE_BLOCK_ATTRS
        else:
            full, prefix = _CLOSE_ATTRS if closing else _ATTRS[kind]
        match = full.match(text, i, n)
        if match is None:
            return PENDING if prefix.fullmatch(text, i, n) else NO_TAG
        if kind is TagKind.PARAM_OPEN:
            name, flag = match.group(1), match.group(2)
            is_string = flag != "false"
            if flag not in ("true", "false"):
                attribute = "no string attribute" if flag is None else f"string={flag!r}"
                typo = ", ".join(t for t in (typo, attribute) if t)
        else:
            name, is_string = (match.group(1) if kind is TagKind.INVOKE_OPEN else ""), True
            if full is _LOOSE_BLOCK_ATTRS[0] and match.group(1) is None:
                typo = ", ".join(t for t in (typo, "block opener without '>'") if t)
        typo = ", ".join(t for t in (marker_typo, typo) if t)
        return Tag(kind, start, match.end(), name, is_string, typo)

    @staticmethod
    def _plain_param_close(text: str, start: int, i: int, n: int) -> Tag | Mark:
        """A plain ``</parameter>`` inside a value (lenient grammars only)."""
        piece = text[i : min(n, i + len(_PLAIN_PARAM_CLOSE))]
        if piece == _PLAIN_PARAM_CLOSE:
            end = i + len(piece)
            return Tag(TagKind.PARAM_CLOSE, start, end, typo="plain '</parameter>' closer")
        return PENDING if _PLAIN_PARAM_CLOSE.startswith(piece) else NO_TAG

    @staticmethod
    def _scan_marker(text: str, i: int, n: int) -> tuple[int | Mark, str]:
        """Strict: index after ``｜DSML｜`` or ``|DSML|`` (PENDING, or NO_TAG if no marker)."""
        for marker in (MARKER, ASCII_MARKER):
            piece = text[i : min(n, i + len(marker))]
            if piece == marker:
                return i + len(marker), ""
            if len(piece) < len(marker) and marker.startswith(piece):
                return PENDING, ""
        return NO_TAG, ""

    @staticmethod
    def _scan_lenient_marker(text: str, i: int, n: int) -> tuple[int | Mark, str]:
        """Lenient: one or two bars (``｜``, ``|`` or ``‖``) each side of ``DSML``, with up
        to two spaces around each group of bars; index after it (PENDING, or NO_TAG if no marker)
        and a typo note."""
        j = i
        spaced = False
        if j < n and text[j] == " ":
            j = _skip_spaces(text, j, n)
            if j - i > _MAX_MARKER_SPACES:
                return NO_TAG, ""
            spaced = True
        if j >= n:
            return PENDING, ""
        lead = j
        while j < n and j - lead < 2 and text[j] in _LENIENT_BARS:
            j += 1
        if j == lead:
            return NO_TAG, ""
        k = j
        if k < n and text[k] == " ":
            k = _skip_spaces(text, k, n)
            if k - j > _MAX_MARKER_SPACES:
                return NO_TAG, ""
            spaced = True
        body = text[k : k + 4] if k + 4 <= n else text[k:n]
        if body != "DSML":
            return (PENDING if len(body) < 4 and "DSML".startswith(body) else NO_TAG), ""
        m = k + 4
        if m < n and text[m] == " ":
            m = _skip_spaces(text, m, n)
            if m - k - 4 > _MAX_MARKER_SPACES:
                return NO_TAG, ""
            spaced = True
        if m >= n:
            return PENDING, ""
        trail = m
        while m < n and m - trail < 2 and text[m] in _LENIENT_BARS:
            m += 1
        if m == trail:
            return NO_TAG, ""
        if m >= n and m - trail < 2:
            return PENDING, ""
        if not spaced and j - lead == 1 and m - trail == 1:
            marker = text[lead] + "DSML" + text[trail]
            if marker in (MARKER, ASCII_MARKER):
                return m, ""
        return m, f"marker spelled {text[i:m]!r}"

    def _classify_name(self, word: str, closing: bool) -> tuple[str | None, str]:
        role = self._grammar.names.get(word)
        if role is not None:
            return role, ""
        role = self._grammar.typo_names.get(word)
        if role is not None:
            return role, f"tag name {word!r}"
        if closing and self._grammar.lenient and len(word) >= _MIN_TRUNCATED:
            roles = {r for name, r in self._grammar.names.items() if name.startswith(word)}
            if len(roles) == 1:
                return roles.pop(), f"truncated closer {word!r}"
        return None, ""


def _skip_spaces(text: str, i: int, n: int) -> int:
    """Index after at most ``_MAX_MARKER_SPACES + 1`` spaces from ``i`` (bounded look)."""
    stop = min(n, i + _MAX_MARKER_SPACES + 1)
    while i < stop and text[i] == " ":
        i += 1
    return i
