"""Writing xgrammar EBNF: escaped literals and character classes, and a set of named rules."""

from __future__ import annotations

from collections.abc import Iterable

from dsmlkit.errors import CallerError

_LITERAL_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_CLASS_SPECIAL = "\\]^-["


def _escaped(char: str) -> str:
    if char.isprintable():
        return char
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def literal(text: str) -> str:
    """``text`` as an EBNF string literal."""
    return '"' + "".join(_LITERAL_ESCAPES.get(c) or _escaped(c) for c in text) + '"'


def _class_char(char: str) -> str:
    return "\\" + char if char in _CLASS_SPECIAL else _escaped(char)


def char_class(chars: Iterable[str], *, negated: bool = False) -> str:
    """A character class of ``chars`` (``[^…]`` when ``negated``); runs become ranges."""
    codes = sorted({ord(c) for c in chars})
    parts: list[str] = []
    start = 0
    for i in range(1, len(codes) + 1):
        if i == len(codes) or codes[i] != codes[i - 1] + 1:
            low, high = chr(codes[start]), chr(codes[i - 1])
            if i - start > 2:
                parts.append(f"{_class_char(low)}-{_class_char(high)}")
            else:
                parts.extend(map(_class_char, map(chr, codes[start:i])))
            start = i
    return f"[{'^' if negated else ''}{''.join(parts)}]"


def alternatives(options: Iterable[str]) -> str:
    """``a | b | …``, parenthesised when there is more than one option."""
    unique = list(dict.fromkeys(options))
    return unique[0] if len(unique) == 1 else "(" + " | ".join(unique) + ")"


class RuleSet:
    """Named EBNF rules; ``root`` comes first in the text."""

    def __init__(self) -> None:
        self._bodies: dict[str, str] = {}

    def __contains__(self, name: str) -> bool:
        return name in self._bodies

    def reserve(self, name: str) -> str:
        """Claim ``name`` before its body is known (for recursive rules)."""
        if name in self._bodies:
            raise CallerError(f"rule {name!r} defined twice")
        self._bodies[name] = ""
        return name

    def define(self, name: str, body: str) -> str:
        """Set the body of rule ``name`` (reserving it if needed) and return the name."""
        if self._bodies.get(name):
            raise CallerError(f"rule {name!r} defined twice")
        self._bodies[name] = body
        return name

    def text(self) -> str:
        order = sorted(self._bodies, key=lambda name: name != "root")
        return "".join(f"{name} ::= {self._bodies[name]}\n" for name in order)


def joined(
    rules: RuleSet,
    prefix: str,
    items: list[tuple[str, bool]],
    separator: str,
    repeated: str = "",
) -> str:
    """Items in order, joined by ``separator``; each is ``(expression, required)``.

    Optional items may be left out (the separators stay between the items present);
    ``repeated``, when given, may follow any number of times. Returns an expression.
    """
    if all(required for _, required in items) and not repeated:
        return f" {separator} ".join(expression for expression, _ in items) or '""'
    # first{i}: items i… with none written yet; rest{i}: items i… after one was written.
    rest = f"({separator} {repeated})*" if repeated else '""'
    first = f"({repeated} {rest})?" if repeated else '""'
    for i in range(len(items) - 1, -1, -1):
        expression, required = items[i]
        then = "" if rest == '""' else f" {rest}"
        skip_first, skip_rest = ("", "") if required else (f" | {first}", f" | {rest}")
        first = rules.define(f"{prefix}_first{i}", f"{expression}{then}{skip_first}")
        if i:  # nothing comes before the first item
            rest = rules.define(f"{prefix}_rest{i}", f"{separator} {expression}{then}{skip_rest}")
    return first
