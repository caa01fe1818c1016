"""The model's own words in the history: assistant turns rendered as the model wrote them.

Clients send the gateway's answers back in their own way: Claude Code adds the defaults it
fills in (``"replace_all": false`` in ``Edit``), others reorder keys, re-serialize argument
JSON or trim the text. Rendered as sent, such a turn is no longer what the model wrote, the
prompt stops being the previous prompt plus the model's output, and the engine's prefix
cache misses from that turn on. The gateway therefore keeps, for every call it issued, what
the model wrote in that answer (:class:`ModelCall`), and :func:`reconcile` puts it back
into Chat and Messages turns (:func:`reconcile_function` into a Responses
``function_call`` item, whose turn's text is left as sent; a ``previous_response_id``
history is the stored output itself):

* a call whose name and every argument the model wrote are unchanged (the client may have
  added arguments of its own or reordered them) gets the model's arguments JSON, exactly;
* a call with another name, or a changed or missing value of an argument the model wrote,
  *really changed*: the client's version wins, counted as ``call`` (the request log line's
  ``history_changed``);
* text (OpenAI ``content``, Anthropic ``text`` blocks) that is the model's up to whitespace,
  or that the client left out, becomes the model's text; other text is used as sent
  (``content``); OpenAI reasoning the same (``reasoning``; dropped reasoning is restored
  before, and Anthropic thinking not signed by the gateway is replaced, see
  :mod:`.reasoning_store`).

Keys: a call id of 16 characters or more is its own key. Shorter ids (an upstream that
numbers its calls, ``call_0``) repeat across conversations, so they are keyed together with
a digest of the conversation before the turn (:class:`Conversation`): the messages' roles,
the text of every non-assistant message and the ids and names of the assistant's calls,
which clients send back unchanged (reasoning, assistant text and arguments are left out).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from dsmlkit.api.common import Api

#: Call ids shorter than this are keyed with their conversation: an upstream that numbers
#: its calls (``call_0``) gives two conversations the same id. The gateway's own ids have 29+.
MIN_CALL_ID_LENGTH = 16
_KEY_PREFIX = "turn:"


@dataclass(frozen=True)
class ModelCall:
    """What the model wrote in the answer that issued one call: the call's name and exact
    arguments JSON, and the answer's reasoning and content."""

    name: str
    arguments: str
    reasoning: str
    content: str

    def dumps(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def loads(cls, text: str) -> ModelCall | None:
        """The stored call; None for a value of another shape."""
        try:
            fields = json.loads(text)
            return cls(**fields) if isinstance(fields, dict) else None
        except (ValueError, TypeError):
            return None


class Conversation:
    """Digests of a request's conversation, for the keys of short call ids; computed once,
    and only when a short id asks for one."""

    def __init__(self, api: Api, body: Any) -> None:
        self._api = api
        self._body = body
        self._digests: list[str] | None = None

    def key(self, call_id: str, index: int | None = None) -> str | None:
        """The store key of a call id of the assistant turn ``messages[index]`` (None: of
        an answer to the whole conversation); None for a short id in a body without
        ``messages`` (the Responses API)."""
        if len(call_id) >= MIN_CALL_ID_LENGTH:
            return key_of(call_id)
        digests = self._all()
        at = len(digests) - 1 if index is None else index
        return key_of(call_id, digests[at]) if 0 <= at < len(digests) else None

    def _all(self) -> list[str]:
        if self._digests is None:
            self._digests = _digests(self._api, self._body)
        return self._digests


def key_of(call_id: str, conversation: str | None = None) -> str | None:
    """The store key of a call id (``conversation``: the digest of what came before its
    turn); None for a short id without one."""
    if len(call_id) >= MIN_CALL_ID_LENGTH:
        return _KEY_PREFIX + call_id
    if conversation is None:
        return None
    return _KEY_PREFIX + hashlib.sha256(f"{conversation}\0{call_id}".encode()).hexdigest()


def reconcile(
    api: Api, message: dict[str, Any], found: Mapping[str, ModelCall], changed: Counter[str]
) -> dict[str, Any]:
    """``message`` (an assistant turn, reasoning already restored) with the model's words
    put back where the client did not really change them; what it did change is counted in
    ``changed``. The caller's message is not modified."""
    if not found:
        return message
    first = next(iter(found.values()))
    if api == "openai":
        return _reconcile_openai(message, found, first, changed)
    return _reconcile_anthropic(message, found, first, changed)


def _reconcile_openai(
    message: dict[str, Any], found: Mapping[str, ModelCall], first: ModelCall, changed: Counter[str]
) -> dict[str, Any]:
    result = dict(message)
    calls = []
    for call in message["tool_calls"]:
        model = found.get(call["id"]) if _has_id(call) else None
        function = call.get("function") if model is not None else None
        if model is None or not isinstance(function, dict):
            calls.append(call)
            continue
        calls.append({**call, "function": reconcile_function(function, model, changed)})
    result["tool_calls"] = calls
    content = message.get("content")
    if content is None or isinstance(content, str):
        text = _text(content or "", first.content, "content", changed)
        result["content"] = text if text or content is not None else None
    for key in ("reasoning_content", "reasoning"):
        if isinstance(message.get(key), str):
            result[key] = _text(message[key], first.reasoning, "reasoning", changed)
    return result


def reconcile_function(
    function: dict[str, Any], model: ModelCall, changed: Counter[str]
) -> dict[str, Any]:
    """A call of the shape ``{"name", "arguments": JSON text, …}`` (an OpenAI ``function``,
    a Responses ``function_call`` item) with the model's arguments if it is the model's."""
    arguments, name = function.get("arguments"), function.get("name")
    if arguments == model.arguments and name == model.name:
        return function  # sent back exactly
    if _unchanged(model, name, _json_object(arguments), changed):
        return {**function, "arguments": model.arguments}
    return function


def _reconcile_anthropic(
    message: dict[str, Any], found: Mapping[str, ModelCall], first: ModelCall, changed: Counter[str]
) -> dict[str, Any]:
    blocks: list[Any] = []
    for block in message["content"]:
        model = found.get(block["id"]) if _is_tool_use(block) and _has_id(block) else None
        if model is not None and _unchanged(model, block.get("name"), block.get("input"), changed):
            block = {**block, "input": json.loads(model.arguments)}
        blocks.append(block)
    texts = [b for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
    sent = "".join(t["text"] for t in texts if isinstance(t.get("text"), str))
    text = _text(sent, first.content, "content", changed)
    if text != sent:  # the model's text, as one block before the calls
        blocks = [b for b in blocks if not any(b is t for t in texts)]
        where = next((i for i, b in enumerate(blocks) if _is_tool_use(b)), len(blocks))
        blocks.insert(where, {**(texts[0] if texts else {"type": "text"}), "text": text})
    return {**message, "content": blocks}


def _unchanged(model: ModelCall, name: object, sent: object, changed: Counter[str]) -> bool:
    """Whether a call the client sent back is the model's: the same name, and every
    argument the model wrote there with an equal value (added arguments do not count)."""
    written = _json_object(model.arguments)
    same = (
        name == model.name
        and written is not None
        and isinstance(sent, dict)
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
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _json_object(text: object) -> dict[str, Any] | None:
    if not isinstance(text, str):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _has_id(part: object) -> bool:
    return isinstance(part, dict) and isinstance(part.get("id"), str)


def _is_tool_use(block: object) -> bool:
    return isinstance(block, dict) and block.get("type") == "tool_use"


def _digests(api: Api, body: Any) -> list[str]:
    """``[digest of the system prompt and messages[:i] for i in 0..len(messages)]``."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if api == "responses" or not isinstance(messages, list):
        return []
    running = hashlib.sha256(json.dumps(_said(body.get("system"))).encode())
    digests = [running.hexdigest()]
    for message in messages:
        running.update(json.dumps(_seen(message), ensure_ascii=False).encode() + b"\n")
        digests.append(running.hexdigest())
    return digests


def _seen(message: object) -> list[Any]:
    """What of a message the conversation digest covers (see the module docstring)."""
    if not isinstance(message, dict):
        return []
    role = message.get("role")
    if role != "assistant":
        return [role, *_said(message)]
    calls = message.get("tool_calls")
    if isinstance(calls, list):  # OpenAI
        functions = [c.get("function") if isinstance(c, dict) else None for c in calls]
        return [
            role,
            *[
                [c.get("id"), f.get("name") if isinstance(f, dict) else None]
                for c, f in zip(calls, functions, strict=True)
                if isinstance(c, dict)
            ],
        ]
    content = message.get("content")
    blocks = content if isinstance(content, list) else []
    return [role, *[[b.get("id"), b.get("name")] for b in blocks if _is_tool_use(b)]]


def _said(value: object) -> list[str]:
    """The text of a non-assistant message or part (whitespace runs made one space), with
    the call ids it answers; thinking, images and cache markers are left out."""
    if isinstance(value, str):
        return [" ".join(value.split())]
    if isinstance(value, list):
        return [text for part in value for text in _said(part)]
    if not isinstance(value, dict):
        return []
    ids = [value[k] for k in ("tool_call_id", "tool_use_id") if isinstance(value.get(k), str)]
    return [*ids, *_said(value.get("text")), *_said(value.get("content"))]
