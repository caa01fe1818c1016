"""Output readers: how the choices one upstream kind streams back become parser events.

A reader is made per answer by its upstream kind (:mod:`.upstream_kinds`). The fold stage
(:mod:`.fold`) gives it each upstream choice (:meth:`UpstreamReader.feed`), asks it after
each upstream stream whether another request follows (:meth:`UpstreamReader.after_stream`:
:class:`Continue` or :class:`Done`), and closes it once (:meth:`UpstreamReader.close`).

* :class:`CompletionsReader`: the raw text of an engine's ``/v1/completions`` into one
  parser; a forced call and one call only are its options (:mod:`.forced`).
* :class:`ChatReader`: a hosted ``/v1/chat/completions`` delta, its ``tool_calls`` kept and
  DSML leaked into its texts repaired (:mod:`.chat_repair`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from dsmlkit.dialects import THINK_CLOSE, Dialect
from dsmlkit.encoding import OutputReader
from dsmlkit.parse import Event, ReasoningEnd, ToolCallStart
from dsmlkit.parse.chat_repair import ChatRepair
from dsmlkit.render.builder import Piece, PromptBuilder
from dsmlkit.render.tokens import PromptTokenizer
from dsmlkit.server.call_ids import AnswerIds

UpstreamPrompt = list[int] | str


@dataclass(frozen=True)
class Continue:
    """After an upstream stream: ``events`` to add, then ``body`` is sent upstream next."""

    events: list[Event]
    body: dict[str, Any]


@dataclass(frozen=True)
class Done:
    """After an upstream stream: ``events`` to add, then the reader is closed."""

    events: list[Event] = field(default_factory=list)


class UpstreamReader(ABC):
    """One answer's upstream output read into parser events.

    ``opening``: events of text the gateway wrote into the answer before the upstream's
    first token; ``upstream_ids``: the upstream's own id of each call the client got
    another id for (filled as the answer streams; :mod:`.call_ids`).
    """

    opening: list[Event]
    upstream_ids: Mapping[str, str]

    @abstractmethod
    def feed(self, choice: Mapping[str, Any]) -> list[Event]:
        """Events for one upstream choice."""

    @abstractmethod
    def after_stream(
        self, finish: str, stop_reason: str | None, completion_tokens: int
    ) -> Continue | Done:
        """What follows an upstream stream that ended normally with ``finish``."""

    @abstractmethod
    def close(self, finish: str) -> list[Event]:
        """The last events, ending with one :class:`~dsmlkit.parse.OutputEnd`."""


class BodyMaker(Protocol):
    """The upstream request body for a prompt (``extra_stop`` added to its stop strings)."""

    def __call__(self, prompt: UpstreamPrompt, extra_stop: Sequence[str]) -> dict[str, Any]: ...


def _text(pieces: Sequence[Piece]) -> str:
    return "".join(text for text, _ in pieces)


class CompletionsReader(UpstreamReader):
    """One completions-mode answer: the raw text the engine writes after ``prompt``, read
    by ``parser`` (which starts in ``starts_in``).

    Options: ``opener``, the call opener a forced call writes into the answer (empty: no
    call is forced; :func:`.forced.call_opener`): in chat mode it ends the first prompt and
    opens the answer, in thinking mode a second request writes it after the reasoning.
    ``one_call``: the invoke closer is a stop string, and the closers are written here when
    the engine stopped inside an invoke. ``stop_sequences``: the client's own stop strings.
    ``tokenizer`` encodes what is added to a prompt of ids; ``bodies`` makes the upstream
    bodies. ``body`` is the first upstream request.
    """

    def __init__(
        self,
        parser: OutputReader,
        dialect: Dialect,
        prompt: UpstreamPrompt,
        starts_in: str,
        tokenizer: PromptTokenizer | None,
        bodies: BodyMaker,
        *,
        opener: tuple[Piece, ...] = (),
        one_call: bool = False,
        stop_sequences: Sequence[str] = (),
    ) -> None:
        self._parser = parser
        self._dialect = dialect
        self._tokenizer = tokenizer
        self._bodies = bodies
        self._opener = opener
        self._one_call = one_call
        self._stop_sequences = stop_sequences
        self._stage: list[str] = []  # the engine's text in this upstream request
        self._call_seen = False
        self._reasoning_ended = starts_in != "reasoning"
        self._prompt = prompt
        #: Reasoning first, then a second request that opens the call block.
        self._thinking_first = bool(opener) and starts_in == "reasoning"
        self.opening: list[Event] = []
        self.upstream_ids: Mapping[str, str] = {}
        if opener and not self._thinking_first:
            self._prompt = self._extended(opener)
            self.opening = self._feed_own(_text(opener))
        extra = [THINK_CLOSE] if self._thinking_first else []
        self.body = bodies(self._prompt, extra + self._one_call_stop())

    def feed(self, choice: Mapping[str, Any]) -> list[Event]:
        text = choice.get("text")
        if not isinstance(text, str) or not text:
            return []
        self._stage.append(text)
        return self._feed_own(text)

    def after_stream(
        self, finish: str, stop_reason: str | None, completion_tokens: int
    ) -> Continue | Done:
        """The second request of thinking mode follows only a normal stop while the answer
        is still in reasoning with no call (an engine that ignored the ``</think>`` stop
        and answered on is not asked again; the missing call is reported as usual)."""
        if finish != "stop" or stop_reason in self._stop_sequences:
            return Done()  # cut off, or the client's own stop string
        if self._thinking_first and not (self._call_seen or self._reasoning_ended):
            return self._open_call_after_reasoning(completion_tokens)
        if self._one_call and self._parser.in_call:
            closers = f"{self._dialect.invoke_close()}\n{self._dialect.block_close()}"
            return Done(self._feed_own(closers))
        return Done()

    def close(self, finish: str) -> list[Event]:
        return self._parser.close(finish)

    def _open_call_after_reasoning(self, completion_tokens: int) -> Continue:
        """Stage two: the prompt plus the reasoning, ``</think>`` and the opener."""
        self._thinking_first = False
        out = PromptBuilder()
        out.text("".join(self._stage))
        out.template(THINK_CLOSE)
        suffix = (*out.pieces(), *self._opener)
        self._prompt = self._extended(suffix)
        self._stage = []
        events = self._feed_own(THINK_CLOSE + _text(self._opener))
        body = self._bodies(self._prompt, self._one_call_stop())
        if isinstance(body.get("max_tokens"), int):
            body["max_tokens"] = max(1, body["max_tokens"] - completion_tokens)
        return Continue(events, body)

    def _feed_own(self, text: str) -> list[Event]:
        events = self._parser.feed(text)
        for event in events:
            self._call_seen = self._call_seen or isinstance(event, ToolCallStart)
            self._reasoning_ended = self._reasoning_ended or isinstance(event, ReasoningEnd)
        return events

    def _extended(self, pieces: Sequence[Piece]) -> UpstreamPrompt:
        """The current prompt followed by ``pieces`` (ids when the prompt is ids)."""
        if isinstance(self._prompt, str) or self._tokenizer is None:
            return str(self._prompt) + _text(pieces)
        encode = self._tokenizer.encode_text
        return self._prompt + [i for text, special in pieces for i in encode(text, special)]

    def _one_call_stop(self) -> list[str]:
        return [self._dialect.invoke_close()] if self._one_call else []


class ChatReader(UpstreamReader):
    """One chat-mode answer: each choice's ``delta`` through ``repair``, whose upstream
    calls get their client ids from ``ids``. One upstream request makes the answer."""

    def __init__(self, repair: ChatRepair, ids: AnswerIds) -> None:
        self._repair = repair
        self.opening: list[Event] = []
        self.upstream_ids = ids.upstream

    def feed(self, choice: Mapping[str, Any]) -> list[Event]:
        delta = choice.get("delta")
        return self._repair.feed(delta) if isinstance(delta, Mapping) else []

    def after_stream(
        self, finish: str, stop_reason: str | None, completion_tokens: int
    ) -> Continue | Done:
        return Done()

    def close(self, finish: str) -> list[Event]:
        return self._repair.close(finish)
