"""Text that never contains any of a few patterns, as EBNF rules (one per automaton state).

A pattern is a sequence of atoms; an atom is a set of characters that occurs once, at most
once (``"?"``) or any number of times (``"*"``). :func:`guarded_text` builds the automaton
that reads text and stops being live when a pattern has matched, and writes each live
state as a rule: ``s ::= "" | [chars] s' | …``. This is how a DSML string value may hold
closing-tag text except where the parser would take it for the end of the value.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dsmlkit.grammar.ebnf import RuleSet, char_class, literal


@dataclass(frozen=True)
class Atom:
    chars: frozenset[str]
    repeat: str = ""  # "", "?" or "*"


Pattern = tuple[Atom, ...]

_OTHER = ""  # the symbol for every character no pattern names


def pattern(*parts: str | frozenset[str] | tuple[str | frozenset[str], str]) -> Pattern:
    """Build a pattern: a str is its characters in order; a set is one atom; a pair adds a
    repeat mark to one atom (``(" ", "?")``)."""
    atoms: list[Atom] = []
    for part in parts:
        repeat = ""
        if isinstance(part, tuple):
            part, repeat = part
        if isinstance(part, frozenset):
            atoms.append(Atom(part, repeat))
        elif repeat:
            atoms.append(Atom(frozenset(part), repeat))
        else:
            atoms.extend(Atom(frozenset(c)) for c in part)
    return tuple(atoms)


_Position = tuple[int, int]  # (pattern index, atoms matched)
_State = frozenset[_Position]


class _Automaton:
    """Subset construction over the positions of all patterns (searched anywhere)."""

    def __init__(self, patterns: Sequence[Pattern]) -> None:
        self.patterns = patterns
        self.symbols = sorted({c for p in patterns for atom in p for c in atom.chars})
        self.start = self._closure((i, 0) for i in range(len(patterns)))
        self.states: list[_State] = [self.start]
        self.moves: list[dict[str, int | None]] = []
        index = {self.start: 0}
        for state in self.states:  # grows while we walk it
            row: dict[str, int | None] = {}
            for symbol in [*self.symbols, _OTHER]:
                target = self._step(state, symbol)
                if target is None:
                    row[symbol] = None
                    continue
                if target not in index:
                    index[target] = len(self.states)
                    self.states.append(target)
                row[symbol] = index[target]
            self.moves.append(row)

    def _closure(self, positions: Iterable[_Position]) -> _State:
        todo = list(positions)
        seen: set[_Position] = set()
        while todo:
            p, i = todo.pop()
            if (p, i) in seen:
                continue
            seen.add((p, i))
            atoms = self.patterns[p]
            if i < len(atoms) and atoms[i].repeat in ("?", "*"):
                todo.append((p, i + 1))
        return frozenset(seen)

    def _step(self, state: _State, symbol: str) -> _State | None:
        """The next state, or None once a pattern has matched."""
        reached: list[_Position] = [(i, 0) for i in range(len(self.patterns))]
        for p, i in state:
            atoms = self.patterns[p]
            if i == len(atoms) or symbol not in atoms[i].chars:
                continue
            reached.append((p, i) if atoms[i].repeat == "*" else (p, i + 1))
        closed = self._closure(reached)
        if any(i == len(self.patterns[p]) for p, i in closed):
            return None
        return closed


@dataclass(frozen=True)
class Alphabet:
    """Where the guarded text lives: characters it may never hold at all, and an EBNF
    expression (such as a JSON escape) that counts as one character no pattern names."""

    forbidden: frozenset[str] = frozenset()
    neutral: str = ""


def guarded_text(
    rules: RuleSet,
    name: str,
    patterns: Sequence[Pattern],
    alphabet: Alphabet = Alphabet(),
) -> str:
    """Define rules ``{name}0…`` (one per automaton state) for text holding no pattern;
    return the first one's name. The text may stop in any state.

    Right-linear rules keep xgrammar's matcher deterministic and fast; its compile time
    grows with the number of rules, so the patterns are kept short.
    """
    automaton = _Automaton(patterns)
    named = set(automaton.symbols)
    for state, row in enumerate(automaton.moves):
        by_target: dict[int, list[str]] = {}
        for symbol, target in row.items():
            if target is not None and symbol not in alphabet.forbidden:
                by_target.setdefault(target, []).append(symbol)
        options = ['""']
        for target, symbols in by_target.items():
            follow = f" {name}{target}"
            if _OTHER in symbols:
                excluded = (named - set(symbols)) | alphabet.forbidden
                options.append(char_class(excluded, negated=True) + follow)
                if alphabet.neutral:
                    options.append(alphabet.neutral + follow)
            elif len(symbols) == 1:
                options.append(literal(symbols[0]) + follow)
            else:
                options.append(char_class(symbols) + follow)
        rules.define(f"{name}{state}", " | ".join(options))
    return f"{name}0"
