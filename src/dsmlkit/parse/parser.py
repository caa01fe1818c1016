"""The incremental DSML parser.

Theory of operation
===================

One :class:`Parser` per model output. ``feed(text)`` appends a delta to a buffer and runs
the state machine as far as the text decides; ``close()`` runs it once more knowing that
nothing else will come, then finishes. The non-streaming :func:`parse` is the same machine
fed once. Everything the machine has not decided stays in the buffer (the *hold-back*);
everything decided is consumed and turned into events at once.

States (``_state``)::

    TEXT ──block opener + invoke follows──▶ BLOCK ◀──────────────┐
      │  (content or reasoning channel)       │ invoke opener    │ invoke closer
      │                                       ▼                  │ (structural)
      └──direct invoke opener──────────────▶ INVOKE ──param──▶ VALUE
                                              │  ▲ JSON body        │ param closer
                                              │  └──── JSON_BODY    │ (structural)
    after a direct invoke: DIRECT_DONE ──▶ TEXT                     ▼
    after the block closes: AFTER_BLOCK (text kept for a diagnostic, or a rewind)
    after EOS: DONE

Scanning is linear: text states and values jump between ``<`` characters with
``str.find``; at a ``<`` the :class:`~dsmlkit.parse.scanner.TagScanner` recognises at most
one short tag. What is held back is bounded: up to two newlines (the ``\\n\\n`` before a
block opener belongs to the markup), one tag, or a closer plus the tags that decide it.

Structural closing tags (parsing.md §2). Inside a value only a parameter closer can end
the value, and only when what follows it (after whitespace) is a complete parameter
opener, or an invoke closer that is itself followed by an invoke opener, the block closer
or the end of the output (a direct invoke's closer needs no follower). Anything else means
the closer is value text. Until the followers arrive the closer is held back, in both
modes alike. A block closer reached that way is *tentative*: the call stays open until
``close()``; if the text after it ends with another closing sequence, the first one was
value text and the parser rewinds to it (the only re-read, done once at the end).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Iterable, Mapping
from json.encoder import encode_basestring
from typing import Any, Final, Literal

from dsmlkit.dialects import EOS, Dialect, get_dialect
from dsmlkit.parse.events import (
    ArgumentsDelta,
    ContentDelta,
    Diagnostic,
    Event,
    FinishReason,
    MessageCollector,
    OutputEnd,
    ParsedMessage,
    ReasoningDelta,
    ReasoningEnd,
    ToolCallEnd,
    ToolCallStart,
)
from dsmlkit.parse.scanner import PENDING, Grammar, Pending, Tag, TagKind, TagScanner

StartIn = Literal["reasoning", "content"]

_TEXT, _BLOCK, _INVOKE, _VALUE, _JSON_BODY, _DIRECT_DONE, _AFTER_BLOCK, _DONE = range(8)

#: Whitespace allowed between a closer and the tag that decides it.
MAX_FOLLOWER_GAP: Final = 512
#: Parameter names whose lone object value is unwrapped when the tool does not declare them.
_WRAPPER_NAMES = ("arguments", "input")

_WS = re.compile(r"\s*")


def _skip_whitespace(text: str, start: int) -> int:
    match = _WS.match(text, start)
    return match.end() if match else start


_JSON_SPECIAL = re.compile(r'[{}"\\]')


class _EndOfOutput:
    """Marker: the text ended where a follower was expected."""


_EOO: Final = _EndOfOutput()


class _CutOff:
    """Marker: the output was cut off (``length``) inside what may have been a tag."""


CUT_OFF: Final = _CutOff()
_BRACE: Final = "{"
_Follower = Tag | Pending | _EndOfOutput | _CutOff | str | None
_Verdict = Tag | Pending | _EndOfOutput | None


_new_object = object.__new__
_set_delta_index = ArgumentsDelta.__dict__["index"].__set__  # the slot descriptors
_set_delta_text = ArgumentsDelta.__dict__["text"].__set__


def _arguments_delta(index: int, text: str) -> ArgumentsDelta:
    """``ArgumentsDelta(index, text)`` at half the cost, for the per-delta hot path."""
    event: ArgumentsDelta = _new_object(ArgumentsDelta)
    _set_delta_index(event, index)
    _set_delta_text(event, text)
    return event


def _default_id() -> str:
    return "call_" + secrets.token_hex(12)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _tool_properties(tools: Iterable[Mapping[str, Any]] | None) -> dict[str, set[str]] | None:
    if tools is None:
        return None
    table: dict[str, set[str]] = {}
    for index, tool in enumerate(tools):
        if not isinstance(tool, Mapping):
            raise TypeError(f"tools[{index}] must be an object, got {type(tool).__name__}")
        function = tool.get("function", tool)
        name = function.get("name")
        if not isinstance(name, str):
            raise ValueError(f"tools[{index}] has no function name")
        schema = function.get("parameters") or function.get("input_schema") or {}
        properties = schema.get("properties") if isinstance(schema, Mapping) else None
        table[name] = set(properties) if isinstance(properties, Mapping) else set()
    return table


class _Call:
    """A tool call being parsed: its JSON text so far and the open parameter."""

    __slots__ = (
        "body_json",
        "declared",
        "holding",
        "id",
        "index",
        "name",
        "param_count",
        "param_is_string",
        "param_name",
        "param_names",
        "param_raw",
        "parts",
    )

    def __init__(self, index: int, call_id: str, name: str, declared: set[str] | None) -> None:
        self.index = index
        self.id = call_id
        self.name = name
        self.declared = declared
        self.parts: list[str] = []
        self.holding = False  # fragments kept back (all of ``parts``) until the call ends
        self.param_count = 0
        self.param_names: set[str] = set()
        self.param_name = ""
        self.param_is_string = True
        self.param_raw: list[str] = []
        self.body_json = False


class Parser:
    """Incremental, sans-IO parser for one DeepSeek model output.

    ``dialect``: ``"v3.2"``, ``"v4"`` or ``"v4.1"`` (by default every dialect's spellings
    are accepted; ``strict=True`` accepts only this one's). ``start_in``: ``"reasoning"``
    when the prompt ended with ``<think>``, else ``"content"``. ``tools``: the request's
    tools (OpenAI or Anthropic style), used for the recoveries that need a schema.
    ``id_factory``: returns a fresh tool-call id (default ``call_`` + random hex).
    """

    def __init__(
        self,
        dialect: str | Dialect = "v4.1",
        *,
        start_in: StartIn = "content",
        strict: bool = False,
        tools: Iterable[Mapping[str, Any]] | None = None,
        id_factory: Callable[[], str] | None = None,
    ) -> None:
        if start_in not in ("reasoning", "content"):
            raise ValueError(f"start_in must be 'reasoning' or 'content', not {start_in!r}")
        self.dialect = get_dialect(dialect)
        self._scanner = TagScanner(Grammar.for_dialect(self.dialect, strict=strict))
        self._tools = _tool_properties(tools)
        self._new_id = id_factory or _default_id
        self._buf = ""
        self._pos = 0
        self._out: list[Event] = []
        self._final = False
        self._closed = False
        self._state = _TEXT
        self._reasoning = start_in == "reasoning"
        self._fresh = True  # nothing consumed yet (a leading <think> opens reasoning)
        self._in_block = False
        self._block_calls = 0
        self._call: _Call | None = None
        self._calls_ended = 0
        self._next_index = 0
        self._stray: list[str] = []  # unexpected text inside a block or invoke
        self._tail: list[str] = []  # text after the block (or after EOS)
        self._tentative: tuple[str, int] | None = None  # closing sequence, first closer length
        self._json_depth = 0
        self._json_in_string = False
        self._engine_finish: str | None = None
        self._handlers = (
            self._text,
            self._block,
            self._invoke,
            self._value,
            self._json_body,
            self._direct_done,
            self._after_block,
            self._after_block,
        )

    # ------------------------------------------------------------------ public API

    def feed(self, text: str) -> list[Event]:
        """Consume one delta of model output; return the events it decided."""
        if self._closed:
            raise RuntimeError("Parser.feed() called after close(); make a new Parser")
        if not isinstance(text, str):
            raise TypeError(f"feed() takes str, not {type(text).__name__}")
        if not self._buf and "<" not in text and text:
            # Hot path: nothing held back and no tag can start in this delta.
            state = self._state
            call = self._call
            if state == _VALUE and call is not None and call.param_is_string and not call.holding:
                fragment = encode_basestring(text)[1:-1]
                call.parts.append(fragment)
                return [_arguments_delta(call.index, fragment)]
            if state == _TEXT and text[-1] != "\n":
                self._fresh = False
                return [ReasoningDelta(text) if self._reasoning else ContentDelta(text)]
        self._buf = self._buf[self._pos :] + text if self._pos else self._buf + text
        self._pos = 0
        self._run()
        if self._pos == len(self._buf):
            self._buf, self._pos = "", 0
        out, self._out = self._out, []
        return out

    def close(self, finish_reason: str | None = None) -> list[Event]:
        """End of output. ``finish_reason`` is the engine's (``"length"`` matters)."""
        if self._closed:
            raise RuntimeError("Parser.close() called twice")
        self._final = True
        self._engine_finish = finish_reason
        self._run()
        while self._state == _AFTER_BLOCK and self._tentative is not None:
            if not self._settle_tentative(finish_reason):
                break
            self._run()
        self._closed = True
        self._finish(finish_reason)
        out, self._out = self._out, []
        return out

    # ------------------------------------------------------------------ the machine

    def _run(self) -> None:
        handlers = self._handlers
        while self._pos < len(self._buf) and handlers[self._state]():
            pass

    def _text(self) -> bool:
        buf, pos = self._buf, self._pos
        lt, tag = pos - 1, None
        while tag is None:  # a '<' that starts no tag is text: look further
            lt = buf.find("<", lt + 1)
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
        if tag is CUT_OFF:
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
                self._in_block, self._block_calls = True, 0
                self._state = _BLOCK
            else:
                self._start_call(tag.name)
                self._state = _INVOKE
            self._pos = tag.end
            return True
        # Every other tag keeps the newlines before it as text.
        self._text_until(lt)
        self._pos = tag.end
        if kind is TagKind.THINK_CLOSE:
            if self._reasoning:
                self._end_reasoning()
            else:
                self._diagnose("stray_think_close", "dropped a '</think>' outside reasoning", "")
        elif kind is TagKind.THINK_OPEN:
            if self._fresh and not self._reasoning and lt == 0:
                self._reasoning = True
            else:
                self._emit_text(buf[lt : tag.end])
        elif kind is TagKind.EOS:
            self._state = _DONE
        elif kind is TagKind.PARAM_OPEN:
            self._emit_text(buf[lt : tag.end])
        else:
            self._diagnose(
                "stray_closer", "dropped a DSML closing tag outside any call", buf[lt : tag.end]
            )
        self._fresh = False
        return True

    def _opener_confirmed(self, tag: Tag) -> bool | Pending:
        """Is a block or direct-invoke opener markup? (Decided by what follows it.)"""
        follower = self._follower(self._buf, tag.end)
        if follower is PENDING:
            return PENDING
        if tag.kind is TagKind.BLOCK_OPEN:
            wanted = (TagKind.INVOKE_OPEN, TagKind.BLOCK_CLOSE)
            ends_output = follower is _EOO
        else:
            wanted = (TagKind.PARAM_OPEN, TagKind.INVOKE_CLOSE)
            ends_output = follower is _EOO and self._engine_finish == "length"
        return (
            (isinstance(follower, Tag) and follower.kind in wanted)
            or ends_output
            or (tag.kind is TagKind.INVOKE_OPEN and follower == _BRACE)
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
            if tag is CUT_OFF:
                self._stray.append(buf[pos:])
                self._pos = len(buf)
                return False
            if isinstance(tag, Tag) and self._between_tags_tag(tag, in_invoke):
                return True
        elif (
            in_invoke and buf[pos] == "{" and call is not None and not call.param_count
        ) and not self._stray:
            self._state = _JSON_BODY
            self._json_depth, self._json_in_string = 0, False
            return True
        lt = buf.find("<", pos + 1)
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
            self._state = _DONE
            return True
        if in_invoke and call is not None:
            if kind is TagKind.PARAM_OPEN:
                self._flush_stray()
                self._note_typo(tag)
                self._open_param(call, tag.name, tag.is_string)
                self._pos = tag.end
                self._state = _VALUE
                return True
            if kind is TagKind.INVOKE_CLOSE:
                self._flush_stray()
                self._note_typo(tag)
                self._end_call(call)
                self._pos = tag.end
                self._state = _BLOCK if self._in_block else _DIRECT_DONE
                return True
            if kind is TagKind.INVOKE_OPEN or kind is TagKind.BLOCK_CLOSE:
                self._flush_stray()
                self._diagnose(
                    "missing_invoke_close",
                    f"call {call.name!r} was not closed before the next tag; closed it",
                    "",
                )
                self._end_call(call)
                self._state = _BLOCK if self._in_block else _DIRECT_DONE
                if self._in_block or kind is TagKind.INVOKE_OPEN:
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
            self._state = _INVOKE
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
        start = search = self._pos
        while True:
            lt = buf.find("<", search)
            if lt < 0:
                self._value_text(call, buf[start:])
                self._pos = len(buf)
                return False
            tag = self._scan(buf, lt)
            verdict: _Verdict = None
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
            if verdict is None:  # value text
                search = lt + 1
                continue
            self._value_text(call, buf[start:lt])
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
                self._close_param(call)
                self._open_param(call, tag.name, tag.is_string)
                start = search = self._pos = tag.end
                continue
            if tag.kind is TagKind.EOS:
                self._pos = tag.end
                self._state = _DONE
                return True
            self._apply_param_close(call, tag, verdict)
            return True

    def _judge_param_close(self, tag: Tag) -> _Verdict:
        """Does the parameter closer ``tag`` end the value? (parsing.md §2)

        None: it is value text. PENDING: the followers have not arrived. Otherwise the tag
        that decided it: a parameter or invoke opener (the parameter ends), an invoke closer
        (the invoke ends too), a block closer (a tentative end of block) or ``_EOO``.
        """
        buf = self._buf
        follower = self._follower(buf, tag.end)
        if follower is PENDING:
            return PENDING
        if self._finished_here(follower):
            return _EOO
        if not isinstance(follower, Tag):
            return None
        kind = follower.kind
        if kind in (TagKind.PARAM_OPEN, TagKind.INVOKE_OPEN):
            return follower
        if kind is TagKind.BLOCK_CLOSE:
            return follower if self._in_block else None
        if kind is not TagKind.INVOKE_CLOSE:
            return None
        if not self._in_block:
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
        return None

    def _apply_param_close(self, call: _Call, tag: Tag, decider: _Verdict) -> None:
        """The parameter closer ``tag`` ends the value; ``decider`` says how far it reaches."""
        self._note_typo(tag)
        if isinstance(decider, Tag) and decider.kind is TagKind.BLOCK_CLOSE:
            self._tentative = (self._buf[tag.start : decider.end], tag.end - tag.start)
            self._pos = decider.end
            self._state = _AFTER_BLOCK
            return
        self._close_param(call)
        self._pos = tag.end
        self._state = _INVOKE
        if isinstance(decider, Tag) and decider.kind is TagKind.INVOKE_CLOSE:
            self._note_typo(decider)
            self._end_call(call)
            self._pos = decider.end
            self._state = _BLOCK if self._in_block else _DIRECT_DONE

    def _json_body(self) -> bool:
        """A JSON-object invoke body; closers inside JSON strings are data."""
        buf, pos = self._buf, self._pos
        call = self._call
        assert call is not None
        i = pos
        depth, in_string = self._json_depth, self._json_in_string
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
        call.param_raw.append(buf[pos:i])
        self._pos = i
        self._json_depth, self._json_in_string = depth, in_string
        if depth:
            return False
        raw = "".join(call.param_raw)
        call.param_raw = []
        try:
            value = json.loads(raw, parse_constant=_reject_constant)
        except ValueError:
            value = None
        if isinstance(value, dict):
            call.body_json = True
            self._emit_args(call, json.dumps(value, ensure_ascii=False))
        else:
            self._diagnose(
                "invalid_json_body", f"call {call.name!r} has a body that is not a JSON object", raw
            )
        self._state = _INVOKE
        return True

    def _direct_done(self) -> bool:
        self._pos = _skip_whitespace(self._buf, self._pos)
        if self._pos < len(self._buf):
            self._state = _TEXT
            return True
        return False

    def _after_block(self) -> bool:
        self._tail.append(self._buf[self._pos :])
        self._pos = len(self._buf)
        return False

    # ------------------------------------------------------------------ tags

    def _scan(self, buf: str, start: int) -> Tag | Pending | _CutOff | None:
        """The tag at ``buf[start] == "<"``; at the end of a cut-off output, CUT_OFF."""
        tag = self._scanner.scan(buf, start, False)
        if tag is PENDING and self._final:
            return CUT_OFF if self._engine_finish == "length" else None
        return tag

    def _follower(self, buf: str, start: int) -> _Follower:
        """What follows ``start`` after whitespace: a Tag, ``_BRACE``, ``_EOO``, None or PENDING."""
        j = _skip_whitespace(buf, start)
        if j - start > MAX_FOLLOWER_GAP:
            return None
        if j >= len(buf):
            return _EOO if self._final else PENDING
        if buf[j] == "<":
            tag = self._scan(buf, j)
            return _EOO if tag is CUT_OFF else tag
        return _BRACE if buf[j] == "{" else None

    def _finished_here(self, follower: _Follower) -> bool:
        """Did the output end here on its own? (A ``length`` cut-off did not finish it.)"""
        return follower is _EOO and self._engine_finish != "length"

    # ------------------------------------------------------------------ calls

    def _start_call(self, name: str) -> None:
        declared = None if self._tools is None else self._tools.get(name)
        call = _Call(self._next_index, self._new_id(), name, declared)
        self._next_index += 1
        self._call = call
        if self._in_block:
            self._block_calls += 1
        self._out.append(ToolCallStart(call.index, call.id, name))

    def _open_param(self, call: _Call, name: str, is_string: bool) -> None:
        if name in call.param_names:
            self._diagnose(
                "duplicate_parameter",
                f"parameter {name!r} of call {call.name!r} appears twice; the last value wins",
                "",
            )
        if (
            call.param_count == 0
            and call.declared is not None
            and name in _WRAPPER_NAMES
            and name not in call.declared
        ):
            call.holding = True  # may be unwrapped when the call ends
        elif call.holding:
            self._release_held(call)
        call.param_names.add(name)
        call.param_name = name
        call.param_is_string = is_string
        call.param_raw = []
        prefix = ", " if call.param_count else "{"
        call.param_count += 1
        quote = '"' if is_string else ""
        self._emit_args(call, f"{prefix}{encode_basestring(name)}: {quote}")

    def _value_text(self, call: _Call, text: str) -> None:
        if not text:
            return
        if call.param_is_string:
            self._emit_args(call, encode_basestring(text)[1:-1])
        else:
            call.param_raw.append(text)

    def _close_param(self, call: _Call) -> None:
        if call.param_is_string:
            self._emit_args(call, '"')
            return
        raw = "".join(call.param_raw)
        call.param_raw = []
        try:
            value = json.loads(raw, parse_constant=_reject_constant)
            text = json.dumps(value, ensure_ascii=False)
        except ValueError:
            self._diagnose(
                "invalid_json_value",
                f'parameter {call.param_name!r} of call {call.name!r} is marked string="false" '
                "but is not JSON; kept as a string",
                raw,
            )
            text = encode_basestring(raw)
        self._emit_args(call, text)

    def _closes_by_declared_opener(self, call: _Call, name: str) -> bool:
        declared = call.declared
        return declared is not None and name in declared and name not in call.param_names

    def _emit_args(self, call: _Call, text: str) -> None:
        call.parts.append(text)
        if not call.holding:
            self._out.append(_arguments_delta(call.index, text))

    def _release_held(self, call: _Call) -> None:
        call.holding = False
        self._out.append(ArgumentsDelta(call.index, "".join(call.parts)))

    def _end_call(self, call: _Call) -> None:
        if not call.body_json:
            self._emit_args(call, "}" if call.param_count else "{}")
        text = "".join(call.parts)
        arguments = json.loads(text) if text else {}
        if call.holding:
            inner = arguments.get(call.param_name) if len(arguments) == 1 else None
            declared = call.declared or set()
            if isinstance(inner, dict) and inner and set(inner) <= declared:
                self._diagnose(
                    "unwrapped_arguments",
                    f"call {call.name!r} wrapped its arguments in an undeclared "
                    f"{call.param_name!r} parameter; unwrapped",
                    "",
                )
                arguments = inner
                text = json.dumps(inner, ensure_ascii=False)
                call.parts = [text]
            self._release_held(call)
        self._out.append(ToolCallEnd(call.index, call.id, call.name, arguments, text))
        self._calls_ended += 1
        self._call = None

    def _close_block(self) -> None:
        self._in_block = False
        if self._block_calls:
            self._state = _AFTER_BLOCK
        else:
            self._diagnose("empty_block", "dropped an empty tool-call block", "")
            self._state = _TEXT

    # ------------------------------------------------------------------ the end

    def _settle_tentative(self, finish_reason: str | None) -> bool:
        """Decide a tentative block close; True if the parser rewound and must run again.

        The close stands unless the output was cut off (``length``: the closers were value
        text and the call is partial) or the text after it ends with another closing
        sequence (then the first one was value text).
        """
        assert self._tentative is not None and self._call is not None
        sequence, first_closer = self._tentative
        self._tentative = None
        call = self._call
        tail = "".join(self._tail)
        before_eos = tail.split(EOS, 1)[0]
        cut_off = finish_reason == "length"
        if not cut_off and not (
            before_eos.strip() and self._ends_with_closing_sequence(before_eos)
        ):
            self._close_param(call)
            self._end_call(call)
            self._in_block = False
            return False
        if not cut_off:
            self._diagnose(
                "closing_sequence_in_value",
                f"parameter {call.param_name!r} of call {call.name!r} contains a whole closing "
                "sequence followed by more text; kept it in the value",
                "",
            )
        # Rewind: the first closer was value text; read on from just after it.
        self._value_text(call, sequence[:first_closer])
        self._buf = sequence[first_closer:] + tail
        self._pos = 0
        self._tail = []
        self._state = _VALUE
        return True

    def _ends_with_closing_sequence(self, text: str) -> bool:
        """Does ``text`` end with parameter, invoke and block closers (whitespace between)?"""
        end = len(text.rstrip())
        for kind in (TagKind.BLOCK_CLOSE, TagKind.INVOKE_CLOSE, TagKind.PARAM_CLOSE):
            lt = text.rfind("<", 0, end)
            if lt < 0:
                return False
            tag = self._scanner.scan(text, lt, True)
            if not isinstance(tag, Tag) or tag.kind is not kind or tag.end != end:
                return False
            end = len(text[:lt].rstrip())
        return True

    def _finish(self, finish_reason: str | None) -> None:
        self._flush_stray()
        call = self._call
        if call is not None:
            partial = "".join(call.parts) + "".join(call.param_raw)
            self._diagnose(
                "truncated_call",
                f"the output ended inside call {call.name!r}; it is not returned",
                partial,
            )
        elif self._in_block:
            if self._block_calls:
                self._diagnose("missing_block_close", "the tool-call block was never closed", "")
            else:
                self._diagnose("empty_block", "dropped an empty tool-call block", "")
        tail = "".join(self._tail)
        if self._state == _DONE:
            before_eos, after_eos = "", tail
        else:
            before_eos, _, after_eos = tail.partition(EOS)
        if before_eos.strip():
            self._diagnose(
                "text_after_block",
                "text after the tool-call block is not part of the turn",
                before_eos,
            )
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
    dialect: str | Dialect = "v4.1",
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
