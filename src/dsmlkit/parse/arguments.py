"""One tool call's arguments: the JSON text streamed as fragments, and the decoded object.

The markup state machine (:mod:`dsmlkit.parse.parser`) finds tags; it tells an
:class:`ArgumentsBuilder` what it saw (a parameter opened, value text, the parameter closed,
a JSON object body, the call ended) and the builder appends ``ArgumentsDelta`` and
``Diagnostic`` events to the parser's output list. The builder owns every rule about the
arguments themselves, and none of them can raise on model output:

* The arguments JSON is always strict JSON with ``", "`` and ``": "`` separators and
  non-ASCII kept: no ``NaN``/``Infinity``, no key twice.
* ``string="true"`` text is kept exactly and streams as it arrives.
* ``string="false"`` text is decoded with bounds (:func:`_decode_json`): nesting at most
  :data:`MAX_JSON_DEPTH` levels, finite numbers, unique object keys, no lone surrogates.
  Text that fails any of them is kept as a string value, with an ``invalid_json_value``
  diagnostic saying why.
* A parameter set twice keeps its first value (fragments already streamed cannot be taken
  back); the later value is dropped into a ``duplicate_parameter`` diagnostic's text.
* A JSON object body is merged member by member, under the same first-value rule; a body
  that is not a JSON object within the bounds goes whole into an ``invalid_json_body``
  diagnostic's text. A call mixing a body with parameters (or two bodies) is merged and
  reported (``mixed_arguments``).
* A lone undeclared ``arguments``/``input`` parameter whose object value holds only
  declared properties is unwrapped; its fragments are held until the call ends.
"""

from __future__ import annotations

import json
import math
import re
from json.encoder import encode_basestring, encode_basestring_ascii
from typing import Any, Final

from dsmlkit.parse.events import ArgumentsDelta, Diagnostic, Event, ToolCallEnd

#: Deepest nesting of arrays and objects a ``string="false"`` value or a body may have.
MAX_JSON_DEPTH: Final = 128
#: Parameter names whose lone object value is unwrapped when the tool does not declare them.
WRAPPER_NAMES: Final = ("arguments", "input")

#: A UTF-16 surrogate in a decoded string: always a lone one (``json.loads`` joins the
#: escapes of a valid pair into one character), and not text that UTF-8 can carry.
LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_NESTING_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)


#: From this length an ASCII text takes a faster path than ``encode_basestring``: the
#: ``bytes.replace`` passes of :func:`escaped_utf8`, or for a text with a rarer control
#: character ``encode_basestring_ascii``, whose C loop is faster and writes the same text for
#: ASCII without DEL (which only it escapes); shorter texts are not worth the checks.
_LONG_TEXT = 1024
#: The control characters :func:`escaped_utf8` leaves to the C escape: all but tab, newline
#: and carriage return.
_RARE_CONTROLS: Final = bytes(code for code in range(0x20) if code not in b"\t\n\r")


def escaped_utf8(data: bytes) -> bytes | None:
    """UTF-8 ``data`` escaped as the inside of a JSON string, as ``encode_basestring`` escapes
    it (non-ASCII and DEL kept), or None when it holds a control character other than tab,
    newline and carriage return.

    Five ``bytes.replace`` passes and the check, faster than the C escape on long text
    (docs/api-adapters.md, §6, gives the figures)."""
    if len(data.translate(None, _RARE_CONTROLS)) != len(data):
        return None
    escaped = data.replace(b"\\", b"\\\\").replace(b'"', b'\\"')
    return escaped.replace(b"\n", b"\\n").replace(b"\r", b"\\r").replace(b"\t", b"\\t")


def json_fragment(text: str) -> str:
    """``text`` as the inside of a JSON string: ``encode_basestring(text)[1:-1]``, faster."""
    if len(text) >= _LONG_TEXT and text.isascii():
        escaped = escaped_utf8(text.encode())
        if escaped is not None:
            return escaped.decode()
        if "\x7f" not in text:
            return encode_basestring_ascii(text)[1:-1]
    return encode_basestring(text)[1:-1]


class _Rejected(ValueError):
    """JSON that is valid for Python's decoder but not strict, bounded JSON."""


def _reject_constant(name: str) -> Any:
    raise _Rejected(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _Rejected(f"the number {text[:40]} is out of range")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Rejected(f"an object has the key {key!r} twice")
            seen.add(key)
    return value


def _nesting_depth(raw: str) -> int:
    depth = deepest = 0
    for token in _NESTING_TOKEN.findall(raw):
        if token in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif token in "]}":
            depth -= 1
    return deepest


def _decode_json(raw: str) -> tuple[Any, str] | str:
    """``(value, canonical JSON text)`` for strict, bounded JSON; else the reason it is not."""
    if raw.count("[") + raw.count("{") > MAX_JSON_DEPTH and _nesting_depth(raw) > MAX_JSON_DEPTH:
        return f"it nests deeper than {MAX_JSON_DEPTH} levels"
    try:
        value = json.loads(
            raw,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
            object_pairs_hook=_unique_keys,
        )
        text = json.dumps(value, ensure_ascii=False)
    except _Rejected as error:
        return str(error)
    except (ValueError, RecursionError):
        return "it is not JSON"
    if LONE_SURROGATE.search(text):
        return "it holds a lone surrogate escape"
    return value, text


class ArgumentsBuilder:
    """Builds one call's arguments; see the module docstring for the rules."""

    __slots__ = (
        "declared",
        "discarding",
        "had_body",
        "has_member",
        "holding",
        "id",
        "index",
        "is_string",
        "live",
        "members",
        "name",
        "out",
        "param_name",
        "parts",
        "raw",
        "value_start",
        "value_texts",
        "wrapper",
    )

    def __init__(
        self, index: int, call_id: str, name: str, declared: set[str] | None, out: list[Event]
    ) -> None:
        self.index = index
        self.id = call_id
        self.name = name
        self.declared = declared
        self.out = out  # the parser's output list; the builder appends its events to it
        self.parts: list[str] = []  # the arguments JSON text emitted (or held) so far
        self.members: dict[str, Any] = {}
        self.holding = False  # fragments kept back (all of ``parts``) until the call ends
        self.wrapper = ""
        self.had_body = False
        self.has_member = False  # the emitted text holds a member (the next one needs ", ")
        self.param_name: str | None = None  # the open parameter
        self.is_string = True
        self.discarding = False  # the open parameter is a duplicate: its text is dropped
        self.live = False  # value text streams straight out as JSON string fragments
        self.raw: list[str] = []  # typed or dropped value text of the open parameter
        self.value_start = 0  # where the open string value starts in ``parts``
        # The open string value's text as written, one piece per fragment in ``parts``
        # while every fragment came through ``value_text`` (then it needs no decoding).
        self.value_texts: list[str] = []

    # ------------------------------------------------------------------ parameters

    def open_parameter(self, name: str, is_string: bool) -> None:
        self.param_name, self.is_string, self.raw = name, is_string, []
        self.value_texts = []
        if name in self.members:
            self.discarding, self.live = True, False
            return
        if self.had_body:
            self._mixed()
        if not self.parts and self.declared is not None:  # nothing streamed yet
            if name in WRAPPER_NAMES and name not in self.declared:
                self.holding, self.wrapper = True, name  # may be unwrapped when the call ends
        elif self.holding:
            self._release_held()
        quote = '"' if is_string else ""
        self.emit(f"{self._member_prefix()}{encode_basestring(name)}: {quote}")
        self.value_start = len(self.parts)
        self.live = is_string and not self.holding

    def is_unset(self, name: str) -> bool:
        """Is ``name`` neither set nor the open parameter?"""
        return name not in self.members and name != self.param_name

    def value_text(self, text: str) -> None:
        if not text:
            return
        if self.is_string and not self.discarding:
            self.value_texts.append(text)
            self.emit(json_fragment(text))
        else:
            self.raw.append(text)

    def close_parameter(self) -> None:
        name = self.param_name
        assert name is not None
        raw = "".join(self.raw)
        self.param_name, self.live, self.raw = None, False, []
        if self.discarding:
            self.discarding = False
            self._diagnose(
                "duplicate_parameter",
                f"parameter {name!r} of call {self.name!r} appears again; kept its first "
                "value and dropped this one (in text)",
                raw,
            )
            return
        if self.is_string:
            texts, self.value_texts = self.value_texts, []
            if len(texts) == len(self.parts) - self.value_start:
                self.members[name] = "".join(texts)
            else:  # some fragments came straight from the parser's per-delta path
                encoded = "".join(self.parts[self.value_start :])
                self.members[name] = json.loads('"' + encoded + '"')
            self.emit('"')
            return
        decoded = _decode_json(raw)
        if isinstance(decoded, str):
            self._diagnose(
                "invalid_json_value",
                f'parameter {name!r} of call {self.name!r} is marked string="false" but '
                f"{decoded}; kept its text as a string",
                "",
            )
            value, text = raw, encode_basestring(raw)
        else:
            value, text = decoded
        self.members[name] = value
        self.emit(text)

    # ------------------------------------------------------------------ JSON bodies

    def body(self, raw: str) -> None:
        """A JSON-object invoke body (``raw`` from ``{`` to its matching ``}``)."""
        decoded = _decode_json(raw)
        if isinstance(decoded, str) or not isinstance(decoded[0], dict):
            reason = decoded if isinstance(decoded, str) else "it is not an object"
            self._diagnose(
                "invalid_json_body",
                f"call {self.name!r} has a JSON body that is not usable: {reason}",
                raw,
            )
            return
        value, text = decoded
        if self.parts or self.had_body:
            self._mixed()
        self.had_body = True
        if self.holding:
            self._release_held()
        if not self.parts:
            self.members.update(value)
            self.has_member = bool(value)
            self.emit(text[:-1])  # the closing brace comes when the call ends
            return
        dropped = {}
        for key, member in value.items():
            if key in self.members:
                dropped[key] = member
                continue
            self.members[key] = member
            prefix = self._member_prefix()
            self.emit(f"{prefix}{encode_basestring(key)}: {json.dumps(member, ensure_ascii=False)}")
        if dropped:
            self._diagnose(
                "duplicate_parameter",
                f"call {self.name!r} sets {', '.join(map(repr, dropped))} again in a JSON "
                "body; kept the first values and dropped these (in text)",
                json.dumps(dropped, ensure_ascii=False),
            )

    # ------------------------------------------------------------------ the end

    def finish(self) -> ToolCallEnd:
        """The call ended: emit the closing brace and return its ``ToolCallEnd``."""
        self.emit("}" if self.parts else "{}")
        arguments = self.members
        if self.holding:
            inner = arguments.get(self.wrapper) if len(arguments) == 1 else None
            declared = self.declared or set()
            if isinstance(inner, dict) and inner and set(inner) <= declared:
                self._diagnose(
                    "unwrapped_arguments",
                    f"call {self.name!r} wrapped its arguments in an undeclared "
                    f"{self.wrapper!r} parameter; unwrapped",
                    "",
                )
                arguments = inner
                self.parts = [json.dumps(inner, ensure_ascii=False)]
            self._release_held()
        return ToolCallEnd(self.index, self.id, self.name, arguments, "".join(self.parts))

    def partial_text(self) -> str:
        """What a call cut off before its end had written (for the diagnostic)."""
        return "".join(self.parts) + "".join(self.raw)

    # ------------------------------------------------------------------ output

    def emit(self, text: str) -> None:
        self.parts.append(text)
        if not self.holding:
            self.out.append(arguments_delta(self.index, text))

    def _member_prefix(self) -> str:
        """What goes before the next member: the opening brace or a separator."""
        prefix = ", " if self.has_member else ("" if self.parts else "{")
        self.has_member = True
        return prefix

    def _release_held(self) -> None:
        self.holding = False
        self.live = self.param_name is not None and self.is_string and not self.discarding
        self.out.append(ArgumentsDelta(self.index, "".join(self.parts)))

    def _mixed(self) -> None:
        self._diagnose(
            "mixed_arguments",
            f"call {self.name!r} mixes a JSON body with parameters (or has two bodies); "
            "merged them",
            "",
        )

    def _diagnose(self, kind: str, message: str, text: str) -> None:
        self.out.append(Diagnostic(kind, message, text))


_new_object = object.__new__
_set_delta_index = ArgumentsDelta.__dict__["index"].__set__  # the slot descriptors
_set_delta_text = ArgumentsDelta.__dict__["text"].__set__


def arguments_delta(index: int, text: str) -> ArgumentsDelta:
    """``ArgumentsDelta(index, text)`` at half the cost, for the per-delta hot path."""
    event: ArgumentsDelta = _new_object(ArgumentsDelta)
    _set_delta_index(event, index)
    _set_delta_text(event, text)
    return event
