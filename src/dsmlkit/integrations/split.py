"""Hand a model output over from an engine's reasoning parser to its tool parser.

Engines such as vLLM run two parsers in turn: a reasoning parser until reasoning ends,
then a tool parser on the raw text that follows. :class:`ReasoningSplit` is the first
half with dsmlkit's rules: it feeds a :class:`~dsmlkit.parse.Parser` started in
reasoning and, when that parser ends reasoning (``</think>``, or a tool-call block or
invoke opened inside reasoning), returns the raw text from that point on, so that a
second dsmlkit parser started in content gives the same content and calls as one parser
over the whole output.

Reasoning text is the model's text verbatim except for the DSML closers the parser drops
with a diagnostic (which carries their text); the newlines before a block opener belong
to the opener and stay in the handed-over text. Only the text not yet accounted for is
kept, so memory is bounded by the parser's hold-back.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsmlkit.dialects import THINK_CLOSE, Dialect
from dsmlkit.encoding import Encoding
from dsmlkit.errors import CallerError
from dsmlkit.parse import Diagnostic, Event, ReasoningDelta, ReasoningEnd


@dataclass(frozen=True, slots=True)
class SplitStep:
    """What one delta decided: reasoning text, and the raw text after reasoning once it ended.

    ``after`` is ``None`` while reasoning goes on; once reasoning ended it is the raw text
    that follows it (possibly empty), handed over exactly once.
    """

    reasoning: str
    after: str | None


class ReasoningSplit:
    """Reasoning up to where dsmlkit ends it, then the raw rest (one per model output)."""

    def __init__(self, dialect: str | Dialect, *, strict: bool = False) -> None:
        self._parser = Encoding.named(dialect).parser("reasoning", strict=strict)
        self._unaccounted = ""
        self.ended = False

    def feed(self, text: str) -> SplitStep:
        """Consume one delta of model output."""
        if self.ended:
            raise CallerError("reasoning already ended: feed the rest to the tool parser")
        self._unaccounted += text
        return self._account(self._parser.feed(text))

    def close(self) -> SplitStep:
        """The output is over; reasoning may end here too (a closer held back to the end)."""
        if self.ended:
            return SplitStep("", None)
        return self._account(self._parser.close())

    def _account(self, events: list[Event]) -> SplitStep:
        parts: list[str] = []
        used = 0
        for event in events:
            if isinstance(event, ReasoningDelta):
                parts.append(event.text)
                used += len(event.text)
            elif isinstance(event, Diagnostic):
                used += len(event.text)
            elif isinstance(event, ReasoningEnd):
                after = self._unaccounted[used:]
                if after.startswith(THINK_CLOSE):
                    after = after[len(THINK_CLOSE) :]
                self.ended = True
                self._unaccounted = ""
                return SplitStep("".join(parts), after)
        self._unaccounted = self._unaccounted[used:]
        return SplitStep("".join(parts), None)
