"""The incremental DSML parser: the markup state machine.

Theory of operation
===================

One :class:`Parser` per model output. ``feed(text)`` appends a delta to a buffer and runs
the state machine as far as the text decides; ``close()`` runs it once more knowing that
nothing else will come, then finishes. The non-streaming :func:`parse` is the same machine
fed once. Everything the machine has not decided stays in the buffer (the *hold-back*);
everything decided is consumed and turned into events at once.

The machine is :class:`State` plus the handler of each state (``_handlers``); a handler
reads from ``_pos``, emits events, moves ``_pos`` and may change state (every change goes
through ``_go``, which raises on one missing from ``TRANSITIONS``). It returns False when it
needs more text. Data that only some states need lives in objects of its own, set while
they need it: the open block (:class:`_Block`, from its opener to its close, through
``BLOCK``, ``INVOKE``, ``VALUE``, ``JSON_BODY`` and ``AFTER_BLOCK``), a JSON body being read
(:class:`_JsonBody`), a tentative block close and the text kept after it
(:class:`_Tentative`), and the reading again at the end (:class:`_Settling`, once set kept
to the end); the call being built is the :class:`ArgumentsBuilder`. Where the scanner finds
no tag it answers with a :class:`~dsmlkit.parse.scanner.Mark` (what to do next) rather than
``None``.

::

    TEXT ──block opener + invoke follows──▶ BLOCK ◀──────────────┐
      │  (content or reasoning channel)       │ invoke opener    │ invoke closer
      │                                       ▼                  │ (structural)
      └──direct invoke opener──────────────▶ INVOKE ──param──▶ VALUE
            ▲                                 │  ▲ JSON body        │ param closer
            │                                 │  └──── JSON_BODY    │ (structural)
            └── AFTER_CALLS ◀── block closed, direct invoke closed  │
                   ▲                                                 ▼
                   └── stands ── AFTER_BLOCK ── value text (rewind) ─▶ VALUE
    TEXT ──closer──▶ CLOSERS ──text or the end follows──▶ TEXT
    after EOS: DONE

CLOSERS holds a run of DSML closers met in text (no call open), whitespace between them,
until what follows the run arrives (docs/streaming.md; vllm#56184): if only whitespace and the
end of the output (or EOS) follow, the run is a model's trailing glitch
(``answer</D invoke></D calls>``) and its closers are dropped (``stray_closer``; the
whitespace stays text); if anything else follows, the run is prose that quotes the format
and is released verbatim (``closer_in_text``, a note only). The run is consumed as it
grows (kept aside, never read again), so a long run costs linear work; while it is held,
no later text is emitted.

AFTER_CALLS (also after an empty block) drops the whitespace after the calls unless text
follows it, and drops closers right after the calls whatever follows them: a block's
orphaned closing tail is markup, not prose. AFTER_BLOCK follows
a tentative block close (a parameter closer in ``VALUE`` whose followers reach the block
closer: below): it keeps the text until a new block opener that an invoke opener follows
(the close stands, the kept text is read again as content) or ``close()``. Once an EOS has
been kept there, no later block opener counts: the output ended before it.

The machine finds markup only; what a call's arguments are is the business of
:class:`~dsmlkit.parse.arguments.ArgumentsBuilder`, which it feeds (parameter opened, value
text, closed, JSON body, call ended).

Scanning is linear: text states and values jump with ``TagScanner.find`` (``str.find``
and one compiled regex) to the next ``<`` that may start a tag, so any other ``<`` (HTML,
code) costs nothing; at such a ``<`` the :class:`~dsmlkit.parse.scanner.TagScanner`
recognises at most one tag of bounded length (a tag read as a follower is not read again
as the next tag). What is held back and read again is bounded: up to two
newlines (the ``\\n\\n`` before a block opener belongs to the markup), the whitespace right
after the calls, one tag, or a closer plus the tags that decide it (each gap at most
:data:`MAX_FOLLOWER_GAP` whitespace characters). Text kept aside without being read again:
the text after a tentative block close (below) and a run of closers in text (CLOSERS).

Structural closing tags (parsing.md §2). Inside a value only a parameter closer can end
the value, and only when what follows it (after whitespace) is a complete parameter
opener, or an invoke closer that is itself followed by an invoke opener, the block closer
or the end of the output (a direct invoke's closer needs no follower). Anything else means
the closer is value text. Until the followers arrive the closer is held back, in both
modes alike. A block closer reached that way is *tentative*: the call stays open until
``close()`` or until a new block opens, and the rest of the output is kept. If, with no
new block, the text after it ends with another closing sequence, the first one was value
text. Every later tentative close shares that
same end, so one rule settles them all in a single pass over the kept text (``_settle``):
each is value text unless only whitespace follows it. ``length`` makes every one value
text (the output was cut off).
"""

from __future__ import annotations

import enum
import re
import secrets
from collections.abc import Callable, Iterable, Mapping
from json.encoder import encode_basestring
from typing import Any, Final, Literal

from dsmlkit.dialects import DEFAULT_DIALECT, EOS, Dialect, get_dialect
from dsmlkit.errors import CallerError, InternalError
from dsmlkit.parse.arguments import ArgumentsBuilder, arguments_delta
from dsmlkit.parse.events import (
    ContentDelta,
    Diagnostic,
    Event,
    FinishReason,
    MessageCollector,
    OutputEnd,
    ParsedMessage,
    ReasoningDelta,
    ReasoningEnd,
    ToolCallStart,
)
from dsmlkit.parse.scanner import NO_TAG, PENDING, Grammar, Mark, Tag, TagKind, TagScanner

StartIn = Literal["reasoning", "content"]


class State(enum.IntEnum):
    """Where the machine is (see the module docstring)."""

    TEXT = 0
    BLOCK = 1
    INVOKE = 2
    VALUE = 3
    JSON_BODY = 4
    AFTER_CALLS = 5
    AFTER_BLOCK = 6
    CLOSERS = 7
    DONE = 8


_S = State
#: Every state change the machine makes.
TRANSITIONS: Final[dict[State, frozenset[State]]] = {
    _S.TEXT: frozenset({_S.BLOCK, _S.INVOKE, _S.CLOSERS, _S.DONE}),
    _S.BLOCK: frozenset({_S.INVOKE, _S.AFTER_CALLS, _S.DONE}),
    _S.INVOKE: frozenset({_S.VALUE, _S.JSON_BODY, _S.BLOCK, _S.AFTER_CALLS, _S.DONE}),
    _S.VALUE: frozenset({_S.INVOKE, _S.BLOCK, _S.AFTER_CALLS, _S.AFTER_BLOCK, _S.DONE}),
    _S.JSON_BODY: frozenset({_S.INVOKE}),
    _S.AFTER_CALLS: frozenset({_S.TEXT}),
    # A tentative block close is value text after all (the rewind) or stands.
    _S.AFTER_BLOCK: frozenset({_S.VALUE, _S.AFTER_CALLS}),
    # A run of closers in text is prose (kept) or ends the output (dropped).
    _S.CLOSERS: frozenset({_S.TEXT}),
    _S.DONE: frozenset(),
}

# The states as module constants: reading an enum member off its class is slow in 3.11.
_TEXT: Final = State.TEXT
_BLOCK: Final = State.BLOCK
_INVOKE: Final = State.INVOKE
_VALUE: Final = State.VALUE
_JSON_BODY: Final = State.JSON_BODY
_AFTER_CALLS: Final = State.AFTER_CALLS
_AFTER_BLOCK: Final = State.AFTER_BLOCK
_CLOSERS: Final = State.CLOSERS
_DONE: Final = State.DONE

#: Whitespace allowed between a closer and the tag that decides it.
MAX_FOLLOWER_GAP: Final = 512

_WS = re.compile(r"\s*")


def _skip_whitespace(text: str, start: int) -> int:
    match = _WS.match(text, start)
    return match.end() if match else start


_JSON_SPECIAL = re.compile(r'[{}"\\]')


#: The closing tags that, outside any call, are a stray run or quoted prose (``_closers``).
_CLOSER_KINDS: Final = frozenset({TagKind.PARAM_CLOSE, TagKind.INVOKE_CLOSE, TagKind.BLOCK_CLOSE})

_CUT_OFF: Final = Mark.CUT_OFF
_END: Final = Mark.END
_BRACE: Final = Mark.BRACE
_UNKNOWN: Final = Mark.UNKNOWN


def _default_id() -> str:
    return "call_" + secrets.token_hex(12)


def _tool_properties(tools: Iterable[Mapping[str, Any]] | None) -> dict[str, set[str]] | None:
    if tools is None:
        return None
    table: dict[str, set[str]] = {}
    for index, tool in enumerate(tools):
        if not isinstance(tool, Mapping):
            raise CallerError(f"tools[{index}] must be an object, got {type(tool).__name__}")
        function = tool.get("function", tool)
        name = function.get("name") if isinstance(function, Mapping) else None
        if not isinstance(name, str):
            raise CallerError(f"tools[{index}] has no function name")
        schema = function.get("parameters") or function.get("input_schema") or {}
        properties = schema.get("properties") if isinstance(schema, Mapping) else None
        table[name] = set(properties) if isinstance(properties, Mapping) else set()
    return table


class _Block:
    """The open tool-call block's data (BLOCK, and the calls inside it)."""

    __slots__ = ("calls",)

    def __init__(self) -> None:
        self.calls = 0  # invokes opened in it


class _JsonBody:
    """JSON_BODY's data: the body read so far and where the reader is in it."""

    __slots__ = ("depth", "in_string", "parts")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.depth = 0
        self.in_string = False


class _Tentative:
    """AFTER_BLOCK's data: the tentative closing sequence and the text kept after it."""

    __slots__ = ("ended", "first_closer", "kept", "sequence")

    def __init__(self, sequence: str, first_closer: int) -> None:
        self.sequence = sequence  # the parameter, invoke and block closers
        self.first_closer = first_closer  # the length of the parameter closer
        self.kept: list[str] = []  # the text after it, until something decides
        self.ended = False  # an EOS was kept: no new block can open any more


class _Settling:
    """What ``_settle`` knows about the kept text while it reads it again."""

    __slots__ = ("cut_off", "eos", "last_text", "sequence_start")

    def __init__(self, cut_off: bool) -> None:
        self.cut_off = cut_off
        self.eos = -1  # where the output ends (its first EOS after the reader)
        self.last_text = 0  # end of the last non-whitespace character before ``eos``
        # Start of the closing sequence that ends there (NO_TAG: none does).
        self.sequence_start: int | Mark = _UNKNOWN


class Parser:
    """Incremental, sans-IO parser for one DeepSeek model output.

    ``dialect``: ``"v3.2"``, ``"v4"`` or ``"v4.1"`` (by default every dialect's spellings
    are accepted; ``strict=True`` accepts only this one's). ``start_in``: ``"reasoning"``
    when the prompt ended with ``<think>``, else ``"content"``. ``tools``: the request's
    tools (OpenAI or Anthropic style), used for the recoveries that need a schema.
    ``id_factory``: returns a fresh tool-call id (default ``call_`` + random hex).

    ``work`` counts the characters handed to the machine: each delta plus whatever was
    held back from before (read again), plus the text ``close()`` reads again. It stays
    within a constant times the output's length whatever the output and the deltas.
    """

    def __init__(
        self,
        dialect: str | Dialect = DEFAULT_DIALECT,
        *,
        start_in: StartIn = "content",
        strict: bool = False,
        tools: Iterable[Mapping[str, Any]] | None = None,
        id_factory: Callable[[], str] | None = None,
    ) -> None:
        if start_in not in ("reasoning", "content"):
            raise CallerError(f"start_in must be 'reasoning' or 'content', not {start_in!r}")
        self.dialect = get_dialect(dialect)
        self._scanner = TagScanner(Grammar.for_dialect(self.dialect, strict=strict))
        self._tools = _tool_properties(tools)
        self._new_id = id_factory or _default_id
        self.work = 0
        self._buf = ""
        self._pos = 0
        self._out: list[Event] = []
        self._final = False
        self._closed = False
        self._failed: str | None = None  # why an earlier call raised
        self._state = _TEXT
        self._reasoning = start_in == "reasoning"
        self._fresh = True  # nothing consumed yet (a leading <think> opens reasoning)
        self._literal_think = False  # a <think> in content was text: so is its </think>
        # Each state's own data: None outside the states it belongs to.
        self._open_block: _Block | None = None  # the open block
        self._after_block_close = False  # AFTER_CALLS: the block that just closed
        self._body: _JsonBody | None = None  # JSON_BODY
        self._tentative: _Tentative | None = None  # AFTER_BLOCK
        self._run_of_closers: list[str] = []  # CLOSERS: closer, whitespace, closer, ...
        self._call: ArgumentsBuilder | None = None
        self._calls_ended = 0
        self._next_index = 0
        self._stray: list[str] = []  # unexpected text inside a block or invoke
        self._after_eos_text: list[str] = []
        self._settling: _Settling | None = None
        # The last tag scanned in a buffer, and where: followers are scanned again as tags.
        self._scanned_buf = ""
        self._scanned_key = (0, False)  # never scanned in "": a scan starts at a '<'
        self._scanned: Tag | Mark = NO_TAG
        # The machine waits only for the end of ``_gap`` characters of trailing whitespace.
        self._gap: int | None = None
        self._engine_finish: str | None = None
        self._handlers = (
            self._text,
            self._block,
            self._invoke,
            self._value,
            self._json_body,
            self._after_calls,
            self._after_block,
            self._closers,
            self._after_eos,
        )

    # ------------------------------------------------------------------ public API

    @property
    def in_call(self) -> bool:
        """The output has opened an invoke and not closed it yet (its name was read)."""
        return self._call is not None

    def feed(self, text: str) -> list[Event]:
        """Consume one delta of model output; return the events it decided."""
        if self._closed or self._failed is not None:
            self._refuse("feed")
        if not isinstance(text, str):
            self._failed = "an earlier feed() was given a non-str"
            raise CallerError(f"feed() takes str, not {type(text).__name__}")
        self.work += len(text)
        if not self._buf and "<" not in text and text:
            # Hot path: nothing held back and no tag can start in this delta.
            state = self._state
            call = self._call
            if state == _VALUE and call is not None and call.live:
                fragment = encode_basestring(text)[1:-1]
                call.parts.append(fragment)
                return [arguments_delta(call.index, fragment)]
            if state == _TEXT and text[-1] != "\n":
                self._fresh = False
                return [ReasoningDelta(text) if self._reasoning else ContentDelta(text)]
        if self._gap is not None and self._gap + len(text) <= MAX_FOLLOWER_GAP and text.isspace():
            self._buf += text  # more whitespace decides nothing: no need to read again
            self._gap += len(text)
            return []
        try:
            self.work += len(self._buf) - self._pos
            self._buf = self._buf[self._pos :] + text if self._pos else self._buf + text
            self._pos = 0
            self._run()
            if self._pos == len(self._buf):
                self._buf, self._pos = "", 0
        except BaseException as error:
            self._failed = f"an earlier feed() raised {type(error).__name__}"
            raise
        return self._take_events()

    def close(self, finish_reason: str | None = None) -> list[Event]:
        """End of output. ``finish_reason`` is the engine's (``"length"`` matters)."""
        if self._closed or self._failed is not None:
            self._refuse("close")
        try:
            self._final = True
            self._engine_finish = finish_reason
            self._run()
            if self._state == _AFTER_BLOCK:
                self._settle(finish_reason == "length")
            if self._state == _CLOSERS:  # a run of closers that ends the output
                self._decide_closers(True)
            self._closed = True
            self._finish(finish_reason)
        except BaseException as error:
            self._failed = f"an earlier close() raised {type(error).__name__}"
            raise
        return self._take_events()

    def _take_events(self) -> list[Event]:
        out, self._out = self._out, []
        if self._call is not None:
            self._call.out = self._out
        return out

    def _refuse(self, method: str) -> None:
        if self._failed is not None:
            raise CallerError(f"Parser.{method}() refused: {self._failed}; make a new Parser")
        if method == "feed":
            raise CallerError("Parser.feed() called after close(); make a new Parser")
        raise CallerError("Parser.close() called twice; make a new Parser for the next output")

    # ------------------------------------------------------------------ the machine

    def _run(self) -> None:
        handlers = self._handlers
        self._gap = None
        while self._pos < len(self._buf) and handlers[self._state]():
            self._gap = None

    def _go(self, state: State) -> None:
        """Change state; a change not in ``TRANSITIONS`` is a parser bug and raises."""
        if state not in TRANSITIONS[self._state]:
            raise InternalError(f"parser bug: no transition {self._state.name} -> {state.name}")
        self._state = state

    def _text(self) -> bool:
        buf, pos = self._buf, self._pos
        lt = pos - 1
        tag: Tag | Mark = NO_TAG
        find = self._scanner.find
        while tag is NO_TAG:  # a '<' that starts no tag is text: look further
            lt = find(buf, lt + 1)
            if lt < 0:
                break
            tag = self._scan(buf, lt)
        end = len(buf) if lt < 0 else lt
        newlines = 0
        while newlines < 2 and end - newlines > pos and buf[end - newlines - 1] == "\n":
            newlines += 1
        if lt < 0:
            self._text_until(end if self._final else end - newlines)
            return self._final
        gap_start = lt - newlines  # the newlines belong to an opener, if one follows
        if tag is _CUT_OFF:
            self._text_until(gap_start)
            self._diagnose(
                "truncated_markup", "the output was cut off inside a tag", buf[gap_start:]
            )
            self._pos = len(buf)
            return False
        if tag is PENDING:
            self._text_until(gap_start)
            return False
        assert isinstance(tag, Tag)
        kind = tag.kind
        if kind is TagKind.BLOCK_OPEN or kind is TagKind.INVOKE_OPEN:
            confirmed = self._opener_confirmed(tag)
            if confirmed is PENDING:
                self._text_until(gap_start)
                return False
            if not confirmed:
                self._text_until(lt + 1)
                return True
            self._text_until(gap_start)
            self._end_reasoning()
            self._note_typo(tag)
            self._fresh = False
            if kind is TagKind.BLOCK_OPEN:
                self._open_block = _Block()
                self._go(_BLOCK)
            else:
                self._start_call(tag.name)
                self._go(_INVOKE)
            self._pos = tag.end
            return True
        # Every other tag keeps the newlines before it as text.
        self._text_until(lt)
        self._pos = tag.end
        if kind is TagKind.THINK_CLOSE:
            if self._reasoning:
                self._end_reasoning()
            elif self._literal_think:
                self._literal_think = False
                self._emit_text(buf[lt : tag.end])
            else:
                self._diagnose("stray_think_close", "dropped a '</think>' outside reasoning", "")
        elif kind is TagKind.THINK_OPEN:
            if self._fresh and lt == 0:
                self._reasoning = True  # opens reasoning, or echoes the prompt's opener
            else:
                self._literal_think = not self._reasoning
                self._emit_text(buf[lt : tag.end])
        elif kind is TagKind.EOS:
            self._go(_DONE)
        elif kind is TagKind.PARAM_OPEN:
            self._emit_text(buf[lt : tag.end])
        else:  # a DSML closer: what follows the run it starts decides (``_closers``)
            self._run_of_closers = [buf[lt : tag.end]]
            self._go(_CLOSERS)
        self._fresh = False
        return True

    def _opener_confirmed(self, tag: Tag) -> bool | Mark:
        """Is a block or direct-invoke opener markup? (Decided by what follows it.)"""
        follower = self._follower(self._buf, tag.end)
        if follower is PENDING:
            return PENDING
        if tag.kind is TagKind.BLOCK_OPEN:
            wanted = (TagKind.INVOKE_OPEN, TagKind.BLOCK_CLOSE)
            ends_output = follower is _END
        else:
            wanted = (TagKind.PARAM_OPEN, TagKind.INVOKE_CLOSE)
            ends_output = follower is _END and self._engine_finish == "length"
        return (
            (isinstance(follower, Tag) and follower.kind in wanted)
            or ends_output
            or (tag.kind is TagKind.INVOKE_OPEN and follower is _BRACE)
        )

    def _block(self) -> bool:
        return self._between_tags(in_invoke=False)

    def _invoke(self) -> bool:
        return self._between_tags(in_invoke=True)

    def _between_tags(self, in_invoke: bool) -> bool:
        """Inside a block (between invokes) or an invoke (between parameters)."""
        buf = self._buf
        pos = self._pos if self._stray else _skip_whitespace(buf, self._pos)
        self._pos = pos
        if pos >= len(buf):
            return False
        call = self._call
        if buf[pos] == "<":
            tag = self._scan(buf, pos)
            if tag is PENDING:
                return False
            if tag is _CUT_OFF:
                self._stray.append(buf[pos:])
                self._pos = len(buf)
                return False
            if isinstance(tag, Tag) and self._between_tags_tag(tag, in_invoke):
                return True
        elif in_invoke and buf[pos] == "{" and call is not None and not self._stray:
            self._body = _JsonBody()
            self._go(_JSON_BODY)
            return True
        lt = self._scanner.find(buf, pos + 1)
        end = len(buf) if lt < 0 else lt
        self._stray.append(buf[pos:end])
        self._pos = end
        return True

    def _between_tags_tag(self, tag: Tag, in_invoke: bool) -> bool:
        """Act on a tag between invokes/parameters; False if it is stray text."""
        kind = tag.kind
        call = self._call
        if kind is TagKind.EOS:
            self._flush_stray()
            self._pos = tag.end
            self._go(_DONE)
            return True
        if in_invoke and call is not None:
            if kind is TagKind.PARAM_OPEN:
                self._flush_stray()
                self._note_typo(tag)
                call.open_parameter(tag.name, tag.is_string)
                self._pos = tag.end
                self._go(_VALUE)
                return True
            if kind is TagKind.INVOKE_CLOSE:
                self._flush_stray()
                self._note_typo(tag)
                self._end_call(call)
                self._pos = tag.end
                self._go(_AFTER_CALLS if self._open_block is None else _BLOCK)
                return True
            if kind is TagKind.INVOKE_OPEN or kind is TagKind.BLOCK_CLOSE:
                self._flush_stray()
                self._diagnose(
                    "missing_invoke_close",
                    f"call {call.name!r} was not closed before the next tag; closed it",
                    "",
                )
                self._end_call(call)
                self._go(_AFTER_CALLS if self._open_block is None else _BLOCK)
                if self._open_block is not None or kind is TagKind.INVOKE_OPEN:
                    return True  # the block/direct state handles the tag
                self._diagnose("stray_closer", "dropped a block closer with no open block", "")
                self._pos = tag.end
                return True
            return False
        if kind is TagKind.INVOKE_OPEN:
            self._flush_stray()
            self._note_typo(tag)
            self._start_call(tag.name)
            self._pos = tag.end
            self._go(_INVOKE)
            return True
        if kind is TagKind.BLOCK_CLOSE:
            self._flush_stray()
            self._note_typo(tag)
            self._pos = tag.end
            self._close_block()
            return True
        return False

    def _value(self) -> bool:
        buf = self._buf
        call = self._call
        assert call is not None
        find = self._scanner.find
        start = search = self._pos
        while True:
            lt = find(buf, search)
            if lt < 0:
                call.value_text(buf[start:])
                self._pos = len(buf)
                return False
            tag = self._scan(buf, lt, in_value=True)
            verdict: Tag | Mark = NO_TAG
            if isinstance(tag, Tag):
                if tag.kind is TagKind.PARAM_CLOSE:
                    verdict = self._judge_param_close(tag)
                elif tag.kind is TagKind.EOS or (
                    tag.kind is TagKind.PARAM_OPEN
                    and self._closes_by_declared_opener(call, tag.name)
                ):
                    verdict = tag
            elif tag is PENDING:
                verdict = PENDING
            if verdict is NO_TAG:  # value text
                search = lt + 1
                continue
            call.value_text(buf[start:lt])
            if verdict is PENDING:  # hold the rest until more text decides it
                self._pos = lt
                return False
            assert isinstance(tag, Tag)
            if tag.kind is TagKind.PARAM_OPEN:
                self._diagnose(
                    "missing_parameter_close",
                    f"parameter {call.param_name!r} was not closed before declared "
                    f"parameter {tag.name!r}; closed it",
                    "",
                )
                call.close_parameter()
                call.open_parameter(tag.name, tag.is_string)
                start = search = self._pos = tag.end
                continue
            if tag.kind is TagKind.EOS:
                self._pos = tag.end
                self._go(_DONE)
                return True
            if self._apply_param_close(call, tag, verdict):
                return True
            start, search = tag.start, tag.end  # the closer was value text after all

    def _judge_param_close(self, tag: Tag) -> Tag | Mark:
        """Does the parameter closer ``tag`` end the value? (parsing.md §2)

        NO_TAG: it is value text. PENDING: the followers have not arrived. Otherwise what
        decided it: a parameter or invoke opener (the parameter ends), an invoke closer (the
        invoke ends too), a block closer (a tentative end of block) or END (the output's).
        """
        buf = self._buf
        follower = self._follower(buf, tag.end)
        if follower is PENDING:
            return PENDING
        if self._finished_here(follower):
            return _END
        if not isinstance(follower, Tag):
            return NO_TAG
        kind = follower.kind
        if kind in (TagKind.PARAM_OPEN, TagKind.INVOKE_OPEN):
            return follower
        if kind is TagKind.BLOCK_CLOSE:
            return NO_TAG if self._open_block is None else follower
        if kind is not TagKind.INVOKE_CLOSE:
            return NO_TAG
        if self._open_block is None:
            return follower  # a direct invoke's closer needs no follower
        after = self._follower(buf, follower.end)
        if after is PENDING:
            return PENDING
        if isinstance(after, Tag) and after.kind is TagKind.BLOCK_CLOSE:
            return after
        if self._finished_here(after) or (
            isinstance(after, Tag) and after.kind is TagKind.INVOKE_OPEN
        ):
            return follower
        return NO_TAG

    def _apply_param_close(self, call: ArgumentsBuilder, tag: Tag, decider: Tag | Mark) -> bool:
        """The parameter closer ``tag`` ends the value; ``decider`` says how far it reaches.

        False when the closer turns out to be value text (a tentative block close that
        ``_settle`` decides at once).
        """
        if isinstance(decider, Tag) and decider.kind is TagKind.BLOCK_CLOSE:
            settling = self._settling
            if settling is None:
                self._note_typo(tag)
                self._tentative = _Tentative(
                    self._buf[tag.start : decider.end], tag.end - tag.start
                )
                self._pos = decider.end
                self._go(_AFTER_BLOCK)
                return True
            if self._tentative_is_value_text(settling, decider.end):
                self._closers_were_value_text(call, settling)
                return False
            self._note_typo(tag)
            self._pos = decider.end
            self._stand_call(call)
            return True
        self._note_typo(tag)
        call.close_parameter()
        self._pos = tag.end
        self._go(_INVOKE)
        if isinstance(decider, Tag) and decider.kind is TagKind.INVOKE_CLOSE:
            self._note_typo(decider)
            self._end_call(call)
            self._pos = decider.end
            self._go(_AFTER_CALLS if self._open_block is None else _BLOCK)
        return True

    def _json_body(self) -> bool:
        """A JSON-object invoke body; closers inside JSON strings are data."""
        buf, pos = self._buf, self._pos
        call, body = self._call, self._body
        assert call is not None and body is not None
        i = pos
        depth, in_string = body.depth, body.in_string
        n = len(buf)
        while depth or i == pos:
            match = _JSON_SPECIAL.search(buf, i)
            if match is None:
                i = n
                break
            i = match.end()
            char = match.group()
            if char == "\\":
                if i >= n:
                    i -= 1
                    break
                i += 1
            elif char == '"':
                in_string = not in_string
            elif not in_string:
                depth += 1 if char == "{" else -1
        body.parts.append(buf[pos:i])
        self._pos = i
        body.depth, body.in_string = depth, in_string
        if depth:
            return False
        self._body = None
        call.body("".join(body.parts))
        self._go(_INVOKE)
        return True

    def _after_calls(self) -> bool:
        """After a block (empty or not) or direct invoke: the whitespace that follows belongs
        to the markup unless text (not a tag) follows it: then it stays with that text,
        content after the calls (after a block, with a ``text_after_block`` note), and so
        does a run longer than :data:`MAX_FOLLOWER_GAP`. A DSML closer right after the calls
        (after that whitespace) is their orphaned tail: dropped (``stray_closer``)."""
        buf, pos = self._buf, self._pos
        match = _WS.match(buf, pos, pos + MAX_FOLLOWER_GAP + 1)
        end = match.end() if match else pos
        if end - pos > MAX_FOLLOWER_GAP:
            end = pos  # a longer run is text (so it is never held back for long)
        elif end == len(buf):
            if self._final:
                self._pos = end
            else:
                self._gap = end - pos
            return self._final
        elif buf[end] == "<":
            tag = self._scan(buf, end)
            if tag is PENDING:
                return False
            if isinstance(tag, Tag) and tag.kind in _CLOSER_KINDS:
                self._diagnose(
                    "stray_closer", "dropped a DSML closing tag after the calls", buf[end : tag.end]
                )
                self._pos = tag.end
                return True
            if isinstance(tag, Tag):
                self._pos = end
                self._after_block_close = False
                self._go(_TEXT)
                return True
        if self._after_block_close:
            self._after_block_close = False
            self._diagnose(
                "text_after_block", "text after the tool-call block; kept as content after it", ""
            )
        self._go(_TEXT)
        return True

    def _after_block(self) -> bool:
        """After a tentative block close: keep the text for ``close()`` to decide, unless a
        new block opener that an invoke opener follows comes first: then the close stands."""
        buf, pos = self._buf, self._pos
        tentative = self._tentative
        assert tentative is not None
        lt, find = (len(buf) if tentative.ended else pos) - 1, self._scanner.find
        while (lt := find(buf, lt + 1)) >= 0:
            if buf.startswith("/", lt + 1):
                continue  # a closer: only a block opener or EOS decides anything here
            tag = self._scan(buf, lt)
            if tag is PENDING:
                break
            if not isinstance(tag, Tag):
                continue
            if tag.kind is TagKind.EOS:
                tentative.ended = True  # the output ends here: no new block can open
                lt = -1
                break
            if tag.kind is not TagKind.BLOCK_OPEN:
                continue
            follower = self._follower(buf, tag.end)
            if follower is PENDING:
                break
            if isinstance(follower, Tag) and follower.kind is TagKind.INVOKE_OPEN:
                self._stand(tentative, buf[pos:lt], buf[lt:])
                return True
        end = len(buf) if lt < 0 else lt
        tentative.kept.append(buf[pos:end])
        self._pos = end
        return False

    def _closers(self) -> bool:
        """A run of DSML closers outside any call (whitespace may stand between them), held
        until what follows it arrives: another closer joins the run."""
        buf, pos = self._buf, self._pos
        follower = self._follower(buf, pos)
        if follower is PENDING:
            return False
        if isinstance(follower, Tag) and follower.kind in _CLOSER_KINDS:
            self._run_of_closers += (buf[pos : follower.start], buf[follower.start : follower.end])
            self._pos = follower.end
            return True
        ends = follower is _END or (isinstance(follower, Tag) and follower.kind is TagKind.EOS)
        self._decide_closers(ends)
        return True

    def _decide_closers(self, ends_output: bool) -> None:
        """A run that ends the output (only whitespace and EOS follow) is markup: its closers
        are dropped (``stray_closer``), the whitespace between them stays text. Any other run
        is prose, released verbatim (``closer_in_text``). What follows is read as text."""
        run, self._run_of_closers = self._run_of_closers, []
        self._go(_TEXT)
        if ends_output:
            for i, piece in enumerate(run):  # closer, whitespace, closer, ...
                if i % 2 == 0:
                    self._diagnose(
                        "stray_closer", "dropped a DSML closing tag outside any call", piece
                    )
                elif piece:
                    self._emit_text(piece)
            return
        text = "".join(run)
        self._emit_text(text)
        channel = "reasoning" if self._reasoning else "content"
        self._diagnose(
            "closer_in_text",
            f"kept DSML closing tags outside any call in the {channel} (text follows them): "
            f"{text[:200]!r}",
            "",
        )

    def _after_eos(self) -> bool:
        self._after_eos_text.append(self._buf[self._pos :])
        self._pos = len(self._buf)
        return False

    # ------------------------------------------------------------------ tags

    def _scan(self, buf: str, start: int, in_value: bool = False) -> Tag | Mark:
        """The tag at ``buf[start] == "<"`` (or NO_TAG, PENDING; CUT_OFF where a cut-off
        output ended inside one)."""
        key = (start, in_value)
        if buf is self._scanned_buf and key == self._scanned_key:
            tag = self._scanned  # the same tag again (a follower, then the tag itself)
        else:
            tag = self._scanner.scan(buf, start, False, in_value=in_value)
            self._scanned_buf, self._scanned_key, self._scanned = buf, key, tag
        if tag is PENDING and self._final:
            return _CUT_OFF if self._engine_finish == "length" else NO_TAG
        return tag

    def _follower(self, buf: str, start: int) -> Tag | Mark:
        """What follows ``start`` after whitespace: a Tag, BRACE, END, NO_TAG or PENDING."""
        match = _WS.match(buf, start, start + MAX_FOLLOWER_GAP + 1)
        j = match.end() if match else start
        if j - start > MAX_FOLLOWER_GAP:
            return NO_TAG
        if j >= len(buf):
            if self._final:
                return _END
            self._gap = j - start  # undecided until something but whitespace arrives
            return PENDING
        if buf[j] == "<":
            tag = self._scan(buf, j)
            return _END if tag is _CUT_OFF else tag
        return _BRACE if buf[j] == "{" else NO_TAG

    def _finished_here(self, follower: Tag | Mark) -> bool:
        """Did the output end here on its own? (A ``length`` cut-off did not finish it.)"""
        return follower is _END and self._engine_finish != "length"

    # ------------------------------------------------------------------ calls

    def _start_call(self, name: str) -> None:
        declared = None if self._tools is None else self._tools.get(name)
        call = ArgumentsBuilder(self._next_index, self._new_id(), name, declared, self._out)
        self._next_index += 1
        self._call = call
        if self._open_block is not None:
            self._open_block.calls += 1
        self._out.append(ToolCallStart(call.index, call.id, name))

    def _closes_by_declared_opener(self, call: ArgumentsBuilder, name: str) -> bool:
        declared = call.declared
        return declared is not None and name in declared and call.is_unset(name)

    def _end_call(self, call: ArgumentsBuilder) -> None:
        self._out.append(call.finish())
        self._calls_ended += 1
        self._call = None

    def _close_block(self) -> None:
        block, self._open_block = self._open_block, None
        if block is not None and block.calls:
            self._after_block_close = True
        else:
            self._diagnose("empty_block", "dropped an empty tool-call block", "")
        self._go(_AFTER_CALLS)

    # ------------------------------------------------------------------ the end

    def _settle(self, cut_off: bool) -> None:
        """Decide the tentative block close, and any later one, in one pass.

        The close stands unless the output was cut off (``length``: the closers were value
        text and the call is partial) or the text after it ends with another closing
        sequence (then the first one was value text). Every later tentative close sees the
        same end of the output, so while the kept text is read again each is decided at
        once (``_tentative_is_value_text``); the text is read again at most once.
        """
        assert self._tentative is not None and self._call is not None
        tentative, self._tentative = self._tentative, None
        sequence, first_closer = tentative.sequence, tentative.first_closer
        call = self._call
        buf = sequence + "".join(tentative.kept)
        self.work += len(buf)
        settling = _Settling(cut_off)
        self._buf, self._pos = buf, 0
        self._settling = settling
        if self._tentative_is_value_text(settling, len(sequence)):
            self._go(_VALUE)  # the rewind: the first closer was value text
            self._pos = first_closer
            self._closers_were_value_text(call, settling, first_closer)
        else:
            self._pos = len(sequence)
            self._stand_call(call)
        self._run()

    def _stand(self, tentative: _Tentative, last: str, rest: str) -> None:
        """A new block opens after a tentative close: the close stands; the kept text
        (ending with ``last``) is read again as content, then ``rest``."""
        assert self._call is not None
        kept = "".join(tentative.kept) + last
        self.work += len(kept)  # read again, as content
        self._tentative = None
        self._buf, self._pos = kept + rest, 0
        self._stand_call(self._call)

    def _stand_call(self, call: ArgumentsBuilder) -> None:
        """The closers after the call's last value were markup: the call and its block end."""
        call.close_parameter()
        self._end_call(call)
        self._after_block_close, self._open_block = self._open_block is not None, None
        self._go(_AFTER_CALLS)

    def _tentative_is_value_text(self, settling: _Settling, end: int) -> bool:
        """Is the closing sequence that ends at ``end`` of the kept text value text?"""
        if settling.cut_off:
            return True
        buf = self._buf
        if settling.eos < end:
            eos = buf.find(EOS, end)
            settling.eos = eos = len(buf) if eos < 0 else eos
            last = eos
            while last > end and buf[last - 1].isspace():
                last -= 1
            settling.last_text = last
            settling.sequence_start = _UNKNOWN
        if settling.last_text <= end:
            return False  # only whitespace follows: the close stands
        start = settling.sequence_start
        if start is _UNKNOWN:  # read once, when first needed
            start = settling.sequence_start = self._closing_sequence_start(buf, settling.last_text)
        return isinstance(start, int) and end <= start

    def _closers_were_value_text(
        self, call: ArgumentsBuilder, settling: _Settling, first_closer: int | None = None
    ) -> None:
        """Record that a closing sequence was value text; its first closer joins the value."""
        if not settling.cut_off:
            self._diagnose(
                "closing_sequence_in_value",
                f"parameter {call.param_name!r} of call {call.name!r} contains a whole closing "
                "sequence followed by more text; kept it in the value",
                "",
            )
        if first_closer is not None:
            call.value_text(self._buf[:first_closer])

    def _closing_sequence_start(self, text: str, end: int) -> int | Mark:
        """Start of the parameter, invoke and block closers (whitespace between) that end
        ``text[:end]``, or NO_TAG."""
        lt = end
        for kind in (TagKind.BLOCK_CLOSE, TagKind.INVOKE_CLOSE, TagKind.PARAM_CLOSE):
            lt = text.rfind("<", max(0, end - MAX_FOLLOWER_GAP - 512), end)
            if lt < 0:
                return NO_TAG
            tag = self._scanner.scan(text, lt, True, in_value=kind is TagKind.PARAM_CLOSE)
            if not isinstance(tag, Tag) or tag.kind is not kind or tag.end != end:
                return NO_TAG
            end = lt
            while end > 0 and text[end - 1].isspace():
                end -= 1
        return lt

    def _finish(self, finish_reason: str | None) -> None:
        self._flush_stray()
        call = self._call
        if call is not None:
            partial = call.partial_text() + ("".join(self._body.parts) if self._body else "")
            self._diagnose(
                "truncated_call",
                f"the output ended inside call {call.name!r}; it is not returned",
                partial,
            )
        elif self._open_block is not None:
            if self._open_block.calls:
                self._diagnose("missing_block_close", "the tool-call block was never closed", "")
            else:
                self._diagnose("empty_block", "dropped an empty tool-call block", "")
        after_eos = "".join(self._after_eos_text)
        if after_eos:
            self._diagnose("text_after_eos", "dropped text after end-of-sentence", after_eos)
        reason: FinishReason
        if call is not None:
            reason = "length"
        elif self._calls_ended:
            reason = "tool_calls"
        elif finish_reason == "length":
            reason = "length"
        else:
            reason = "stop"
        self._out.append(OutputEnd(reason))

    # ------------------------------------------------------------------ helpers

    def _text_until(self, end: int) -> None:
        """Emit the text from the current position up to ``end`` and move there."""
        if end > self._pos:
            self._emit_text(self._buf[self._pos : end])
            self._pos = end

    def _emit_text(self, text: str) -> None:
        if self._reasoning:
            self._out.append(ReasoningDelta(text))
        else:
            self._out.append(ContentDelta(text))
        self._fresh = False

    def _end_reasoning(self) -> None:
        if self._reasoning:
            self._reasoning = False
            self._out.append(ReasoningEnd())

    def _diagnose(self, kind: str, message: str, text: str) -> None:
        self._out.append(Diagnostic(kind, message, text))

    def _note_typo(self, tag: Tag) -> None:
        if tag.typo:
            self._diagnose("typo_markup", f"accepted misspelled DSML markup ({tag.typo})", "")

    def _flush_stray(self) -> None:
        if self._stray:
            text = "".join(self._stray)
            self._stray = []
            self._diagnose("stray_text", "text inside a tool-call block that is not markup", text)


def parse(
    text: str,
    dialect: str | Dialect = DEFAULT_DIALECT,
    *,
    start_in: StartIn = "content",
    strict: bool = False,
    tools: Iterable[Mapping[str, Any]] | None = None,
    id_factory: Callable[[], str] | None = None,
    finish_reason: str | None = None,
) -> ParsedMessage:
    """Parse a whole model output (the same machine as streaming, fed once)."""
    parser = Parser(dialect, start_in=start_in, strict=strict, tools=tools, id_factory=id_factory)
    collector = MessageCollector()
    collector.add(parser.feed(text))
    collector.add(parser.close(finish_reason))
    return collector.message()
