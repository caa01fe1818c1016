"""Output readers: how the choices one upstream kind streams back become parser events.

A reader is made per answer by its upstream kind (:mod:`.upstream_kinds`). The fold stage
(:mod:`.fold`) gives it each upstream choice (:meth:`UpstreamReader.feed`), asks it after
each upstream stream whether another request follows (:meth:`UpstreamReader.after_stream`:
:class:`Continue` or :class:`Done`), and closes it once (:meth:`UpstreamReader.close`).

* :class:`CompletionsReader`: the raw text of an engine's ``/v1/completions`` into one
  parser; a forced call and one call only are its options (:mod:`.forced`).
* :class:`ChatReader`: a hosted ``/v1/chat/completions`` delta, its ``tool_calls`` kept and
  DSML leaked into its texts repaired (:mod:`dsmlkit.parse.chat_repair`).
* :class:`MessagesReader`: a hosted Anthropic ``/v1/messages`` stream, whose events it
  reads as the chat deltas they stand for (:meth:`UpstreamReader.choices`), repaired by the
  same :class:`~dsmlkit.parse.chat_repair.ChatRepair`; it keeps the thinking block's
  ``signature`` (:attr:`UpstreamReader.reasoning_signature`) and passes every other block
  on whole (:class:`~dsmlkit.parse.UpstreamBlock`).

How a chunk of the upstream stream is read (its choices, its usage) is the reader's too:
the OpenAI shape (``choices``, ``usage``) unless the reader says otherwise.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from dsmlkit.api.common import Usage
from dsmlkit.dialects import THINK_CLOSE, Dialect
from dsmlkit.encoding import OutputReader
from dsmlkit.parse import Diagnostic, Event, ReasoningEnd, ToolCallStart, UpstreamBlock
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
    another id for (filled as the answer streams; :mod:`.call_ids`);
    ``reasoning_signature``: the upstream's own signature of the answer's reasoning, which
    goes back with it on the next turn (None: the upstream gave none).
    """

    opening: list[Event]
    upstream_ids: Mapping[str, str]

    @property
    def reasoning_signature(self) -> str | None:
        return None

    def choices(self, chunk: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
        """The choices of one upstream chunk, each given to :meth:`feed`; its
        ``finish_reason`` ends the upstream stream (``stop_reason``: the stop string met)."""
        choices: Sequence[Mapping[str, Any]] = chunk.get("choices") or ()
        return choices

    def usage(self, chunk: Mapping[str, Any]) -> Usage | None:
        """The token counts one upstream chunk reports (None: it reports none)."""
        usage = chunk.get("usage")
        if not isinstance(usage, Mapping):
            return None
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
        return Usage(
            count(usage.get("prompt_tokens")), count(usage.get("completion_tokens")), count(cached)
        )

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


def count(value: Any) -> int:
    """A token count as an upstream reports it (anything but a count: 0)."""
    return value if isinstance(value, int) and value >= 0 else 0


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


#: Anthropic stop reasons as chat finish reasons (others pass as they are and are reported).
FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
}


#: The content blocks :class:`MessagesReader` reads; it passes on any other whole.
READ_BLOCKS = frozenset(("text", "thinking", "tool_use"))
#: The key of a :meth:`MessagesReader.choices` item that carries a whole upstream block.
_BLOCK = "upstream_block"


@dataclass
class _OpenBlock:
    """An upstream block being streamed that the reader does not read: how it started,
    and its deltas so far."""

    start: Mapping[str, Any]
    deltas: list[Mapping[str, Any]] = field(default_factory=list)

    def whole(self) -> tuple[UpstreamBlock, list[Diagnostic]]:
        """The block as it ended: its ``input_json_delta`` fragments (the only delta
        Anthropic streams for a server tool's blocks) joined into its ``input``; any other
        delta reaches a streamed client only. A joined input that is not JSON leaves the
        ``input`` it started with, and a diagnostic says so."""
        block = dict(self.start)
        fragments = [
            delta.get("partial_json")
            for delta in self.deltas
            if delta.get("type") == "input_json_delta"
        ]
        text = "".join(item for item in fragments if isinstance(item, str))
        found: list[Diagnostic] = []
        if text.strip():
            try:
                block["input"] = json.loads(text)
            except (ValueError, RecursionError):
                found.append(
                    Diagnostic(
                        "upstream_block_input",
                        f"the upstream's input for a {block.get('type')!r} block is not JSON",
                        text,
                    )
                )
        return UpstreamBlock(self.start, tuple(self.deltas), block), found


class MessagesReader(ChatReader):
    """One messages-mode answer: a hosted Anthropic ``/v1/messages`` stream.

    Each event stands for the chat delta it carries (:meth:`choices`): ``text_delta`` is
    ``content`` and ``thinking_delta`` ``reasoning_content`` (both repaired of leaked DSML
    as in chat mode), a ``tool_use`` block is an upstream call (its ``input_json_delta``
    its arguments) and ``message_delta`` the finish (``stop_reason`` mapped by
    :data:`FINISH_REASONS`, ``stop_sequence`` the stop string met). The thinking block's
    ``signature_delta`` is kept as :attr:`reasoning_signature`. ``ping``,
    ``content_block_stop`` and ``message_stop`` carry nothing; an ``error`` event fails the
    stream where it is decoded (:mod:`.upstream`).

    A block of any other type (a hosted endpoint's server-tool blocks: ``server_tool_use``,
    ``web_search_tool_result`` …, or one of a type new to us) is kept with its deltas
    and, at its ``content_block_stop``, passed on whole as one
    :class:`~dsmlkit.parse.UpstreamBlock` in its place (:meth:`ChatRepair.pass_on`) when
    ``pass_blocks`` (the client's answer can hold it: Messages); else a diagnostic stands
    for it.
    """

    def __init__(self, repair: ChatRepair, ids: AnswerIds, *, pass_blocks: bool = False) -> None:
        super().__init__(repair, ids)
        self._calls: dict[int, int] = {}  # block index → the upstream call's index
        self._signature: list[str] = []
        self._pass_blocks = pass_blocks
        self._open: dict[int, _OpenBlock] = {}  # block index → a block passed on

    @property
    def reasoning_signature(self) -> str | None:
        return "".join(self._signature) or None

    def choices(self, chunk: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
        kind = chunk.get("type")
        index = chunk.get("index")
        index = index if isinstance(index, int) else None
        if kind == "content_block_start":
            delta = self._block_start(index, chunk.get("content_block"))
        elif kind == "content_block_delta":
            delta = self._block_delta(index, chunk.get("delta"))
        elif kind == "content_block_stop":
            return [{_BLOCK: self._open.pop(index)}] if index in self._open else ()
        elif kind == "message_delta":
            return [self._finish(chunk.get("delta"))]
        else:
            return ()
        return [{"delta": delta}] if delta else ()

    def feed(self, choice: Mapping[str, Any]) -> list[Event]:
        block = choice.get(_BLOCK)
        if isinstance(block, _OpenBlock):
            return self._pass_on(block)
        return super().feed(choice)

    def close(self, finish: str) -> list[Event]:
        """A block the stream never stopped goes on as it got."""
        out: list[Event] = []
        for block in self._open.values():
            out += self._pass_on(block)
        self._open.clear()
        return out + super().close(finish)

    def _pass_on(self, open_block: _OpenBlock) -> list[Event]:
        block, found = open_block.whole()
        if self._pass_blocks:
            return self._repair.pass_on([block, *found])
        text = json.dumps(block.block, ensure_ascii=False)
        dropped = Diagnostic(
            "upstream_block_dropped",
            f"the upstream returned a {block.block.get('type')!r} block, which only a "
            "Messages answer can hold",
            text,
        )
        return self._repair.pass_on([dropped])

    def usage(self, chunk: Mapping[str, Any]) -> Usage | None:
        """``message_start`` (``message.usage``: the prompt) and ``message_delta``
        (``usage``: the output so far); the prompt counts the cached tokens too."""
        kind = chunk.get("type")
        message = chunk.get("message")
        if kind == "message_start" and isinstance(message, Mapping):
            usage = message.get("usage")
        elif kind == "message_delta":
            usage = chunk.get("usage")
        else:
            return None
        if not isinstance(usage, Mapping):
            return None
        cached = count(usage.get("cache_read_input_tokens"))
        prompt = count(usage.get("input_tokens")) + cached
        prompt += count(usage.get("cache_creation_input_tokens"))
        return Usage(prompt, count(usage.get("output_tokens")), cached)

    def _block_start(self, index: Any, block: Any) -> dict[str, Any]:
        if not isinstance(block, Mapping):
            return {}
        kind = block.get("type")
        if kind not in READ_BLOCKS and isinstance(index, int):
            self._open[index] = _OpenBlock(block)
            return {}
        if kind == "tool_use":
            call = self._calls.setdefault(index, len(self._calls))
            function = {"name": block.get("name"), "arguments": ""}
            return {"tool_calls": [{"index": call, "id": block.get("id"), "function": function}]}
        if kind == "thinking":
            self._signature = []  # a later thinking block's signature is the one kept
            self._signed(block.get("signature"))
            return {"reasoning_content": block.get("thinking")}
        if kind == "text":
            return {"content": block.get("text")}
        return {}

    def _block_delta(self, index: Any, delta: Any) -> dict[str, Any]:
        if not isinstance(delta, Mapping):
            return {}
        if index in self._open:
            self._open[index].deltas.append(delta)
            return {}
        kind = delta.get("type")
        if kind == "text_delta":
            return {"content": delta.get("text")}
        if kind == "thinking_delta":
            return {"reasoning_content": delta.get("thinking")}
        if kind == "signature_delta":
            self._signed(delta.get("signature"))
            return {}
        if kind == "input_json_delta" and index in self._calls:
            function = {"arguments": delta.get("partial_json")}
            return {"tool_calls": [{"index": self._calls[index], "function": function}]}
        return {}

    def _signed(self, signature: Any) -> None:
        if isinstance(signature, str):
            self._signature.append(signature)

    def _finish(self, delta: Any) -> dict[str, Any]:
        delta = delta if isinstance(delta, Mapping) else {}
        reason = delta.get("stop_reason")
        said = delta.get("stop_sequence")
        finish = FINISH_REASONS.get(reason, reason) if isinstance(reason, str) else None
        return {"delta": {}, "finish_reason": finish, "stop_reason": said}
