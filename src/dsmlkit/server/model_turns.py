"""The model's own words in the history: assistant turns rendered as the model wrote them.

Clients send the gateway's answers back in their own way: Claude Code adds the defaults it
fills in (``"replace_all": false`` in ``Edit``), others reorder keys, re-serialize argument
JSON or trim the text. Rendered as sent, such a turn is no longer what the model wrote, the
prompt stops being the previous prompt plus the model's output, and the engine's prefix
cache misses from that turn on. The gateway therefore keeps, for every call it issued, what
the model wrote in that answer (:class:`ModelCall`), and :func:`reconcile` puts it back
into the assistant turns of the typed conversation, whichever API it came in (a
``previous_response_id`` history is the stored output itself):

* a call whose name and every argument the model wrote are unchanged (the client may have
  added arguments of its own or reordered them) gets the model's arguments JSON, exactly;
* a call with another name, or a changed or missing value of an argument the model wrote,
  *really changed*: the client's version wins, counted as ``call`` (the request log line's
  ``history_changed``);
* the turn's text that is the model's up to whitespace, or that the client left out,
  becomes the model's text; other text is used as sent (``content``), and so is the text
  of a turn that holds blocks kept whole (a hosted endpoint's server-tool blocks, which
  have their places in it); reasoning the same
  (``reasoning``; dropped reasoning is restored before, and reasoning the reader could not
  verify is replaced, see :mod:`.restore`).

What it keeps is stored by call id (:mod:`.reasoning_store`, which also says how short ids
are keyed).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from dsmlkit.conversation.model import HistoryCall, Message, RawBlockPart, TextPart
from dsmlkit.conversation.readers import history_arguments
from dsmlkit.fields import Field
from dsmlkit.server.state_store import CorruptEntry, load_json

#: Call ids shorter than this are keyed with their conversation: an upstream that numbers
#: its calls (``call_0``) gives two conversations the same id. The gateway's own ids have 29+.
MIN_CALL_ID_LENGTH = 16


_TEXTS = ("name", "arguments", "reasoning", "content")


@dataclass(frozen=True)
class ModelCall:
    """What the model wrote in the answer that issued one call: the call's name and exact
    arguments JSON, and the answer's reasoning and content; ``upstream_id``: the upstream's
    own id of the call when the client was given another (see :mod:`.call_ids`);
    ``reasoning_hidden`` when the answer did not show the reasoning to the client
    (Anthropic ``display: "omitted"``); ``reasoning_signature``: the upstream's own
    signature of the reasoning (an Anthropic thinking block's, ``--upstream-api
    messages``), sent back with it."""

    name: str
    arguments: str
    reasoning: str
    content: str
    upstream_id: str | None = None
    reasoning_hidden: bool = False
    reasoning_signature: str | None = None

    def dumps(self) -> str:
        fields = asdict(self)
        for name in ("upstream_id", "reasoning_signature"):
            if fields[name] is None:
                del fields[name]
        return json.dumps(fields, ensure_ascii=False)

    @classmethod
    def loads(cls, text: str) -> ModelCall:
        """The stored call (an entry stored before ``upstream_id``, ``reasoning_hidden`` or
        ``reasoning_signature`` existed has none, or false); raises
        :class:`~.state_store.CorruptEntry` for a value of another form."""
        fields = load_json(text)
        if not isinstance(fields, dict):
            raise CorruptEntry("a stored call must be a JSON object")
        if not all(isinstance(fields.get(name), str) for name in _TEXTS):
            raise CorruptEntry(f"a stored call's {', '.join(_TEXTS)} must be strings")
        upstream_id = fields.get("upstream_id")
        if not _optional_text(upstream_id):
            raise CorruptEntry("a stored call's upstream_id must be a string")
        hidden = fields.get("reasoning_hidden", False)
        if not isinstance(hidden, bool):
            raise CorruptEntry("a stored call's reasoning_hidden must be true or false")
        signature = fields.get("reasoning_signature")
        if not _optional_text(signature):
            raise CorruptEntry("a stored call's reasoning_signature must be a string")
        return cls(
            fields["name"],
            fields["arguments"],
            fields["reasoning"],
            fields["content"],
            upstream_id,
            hidden,
            signature,
        )


@dataclass(frozen=True)
class PutBack:
    """A conversation with what the model wrote put back (:func:`restored_turns`):
    ``reasoning``, the turns whose dropped reasoning came back; ``changed``, what the
    client really changed (see :func:`reconcile`)."""

    messages: list[Message]
    reasoning: int = 0
    changed: Counter[str] = field(default_factory=Counter)


def restored_turns(
    messages: Sequence[Message], found: Mapping[int, Mapping[str, ModelCall]]
) -> PutBack:
    """``messages`` with each assistant turn ``found`` has calls for (by index, then call
    id) given back its dropped reasoning (when the turn has none, or only reasoning the
    reader could not verify, marked sealed when the answer did not show it), then the
    model's own words (:func:`reconcile`), and the upstream's own signature of the
    reasoning when the turn's reasoning is the one it signed (an Anthropic upstream)."""
    restored = list(messages)
    reasoning = 0
    changed: Counter[str] = Counter()
    for i, calls in found.items():
        if not calls:
            continue
        message = messages[i]
        stored = next((c for c in calls.values() if c.reasoning), None)
        dropped = not message.reasoning or not message.reasoning_trusted
        if dropped and stored is not None:
            message = replace(
                message,
                reasoning=stored.reasoning,
                reasoning_trusted=True,
                reasoning_sealed=stored.reasoning_hidden,
            )
            reasoning += 1
        message = reconcile(message, calls, changed)
        signed = next((c for c in calls.values() if c.reasoning_signature is not None), None)
        if signed is not None and message.reasoning == signed.reasoning:
            message = replace(message, reasoning_signature=signed.reasoning_signature)
        restored[i] = message
    return PutBack(restored, reasoning, changed)


def reconcile(message: Message, found: Mapping[str, ModelCall], changed: Counter[str]) -> Message:
    """``message`` (an assistant turn, reasoning already restored) with the model's words
    put back where the client did not really change them; what it did change is counted in
    ``changed``."""
    if not found:
        return message
    first = next(iter(found.values()))
    calls = tuple(_call(call, found.get(call.id or ""), changed) for call in message.tool_calls)
    text = message.text()
    said = _text(text, first.content, "content", changed)
    # a turn with blocks kept whole keeps its text as sent: its places are among them
    kept = any(isinstance(part, RawBlockPart) for part in message.parts)
    parts = message.parts if said == text or kept else (TextPart(said),)
    reasoning = message.reasoning
    if reasoning:
        reasoning = _text(reasoning, first.reasoning, "reasoning", changed)
    return replace(message, parts=parts, tool_calls=calls, reasoning=reasoning)


def _call(call: HistoryCall, model: ModelCall | None, changed: Counter[str]) -> HistoryCall:
    """A call of the history with the model's arguments if it is the model's."""
    if model is None:
        return call
    if call.arguments_text == model.arguments and call.name == model.name:
        return call  # sent back exactly
    if not _unchanged(model, call.name, call.arguments, changed):
        return call
    notes: list[str] = []
    arguments = history_arguments(Field(model.arguments, "arguments"), notes)
    return replace(call, arguments=arguments, arguments_text=model.arguments)


def _unchanged(model: ModelCall, name: object, sent: object, changed: Counter[str]) -> bool:
    """Whether a call the client sent back is the model's: the same name, and every
    argument the model wrote there with an equal value (added arguments do not count)."""
    written = _json_object(model.arguments)
    same = (
        name == model.name
        and written is not None
        and isinstance(sent, Mapping)
        and all(key in sent and _same(sent[key], value) for key, value in written.items())
    )
    if not same:
        changed["call"] += 1
    return same


def _text(sent: str, model: str, part: str, changed: Counter[str]) -> str:
    """The model's text if the client's is it up to whitespace (or empty), else the client's."""
    if sent == model or not model:
        return sent
    if not sent or sent.split() == model.split():
        return model
    changed[part] += 1
    return sent


def _same(a: object, b: object) -> bool:
    """JSON values equal as JSON: ``1`` and ``1.0`` are, ``1`` and ``true`` are not."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _optional_text(value: object) -> bool:
    return value is None or isinstance(value, str)


def _json_object(text: object) -> dict[str, Any] | None:
    if not isinstance(text, str):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
