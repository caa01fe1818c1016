"""The reasoning round trip: reasoning the gateway returned comes back when a client drops it.

Agent harnesses often send an assistant tool-call turn back without its reasoning
(``reasoning_content`` left out in OpenAI Chat, the ``thinking`` block left out in
Anthropic Messages). DeepSeek's V4 templates keep every reasoning of a tool loop in the
prompt, so the engine would see an empty think block in mid loop. The gateway therefore
remembers, for every call id it issued, the reasoning of that answer
(:meth:`ReasoningMemory.remember`, called by the remember stage, :mod:`.remember`), and
puts it back into the typed request's history
(:mod:`.restore`). The same entry keeps the rest of what the
model wrote, so that the turn is rendered in the model's own words (:mod:`.model_turns`).

The rule for Anthropic ``thinking`` blocks: the gateway signs every thinking block it
returns with its key ring (:mod:`.sealing`): the signature is the thinking text sealed for
the request's model (``dsmlkit-t2.…``), valid for a block whose text is exactly what it
holds, in a request naming that model; the Messages reader checks them with the signer
(``reasoning_trusted``). A tool-use turn whose thinking blocks all carry our valid signature
is used as sent. Any other turn (no thinking block, a
``redacted_thinking`` block, a missing, foreign or forged signature) is *unsigned*: if
the store knows one of its call ids, the stored reasoning replaces its thinking blocks;
otherwise the client's text is used as sent, like any other history it writes. OpenAI
turns carry no signature: a turn with an empty or missing ``reasoning_content`` /
``reasoning`` gets the stored reasoning, one with reasoning is used as sent.

Keys: a call id of 16 characters or more is its own key. Shorter ids (an upstream that
numbers its calls, ``call_0``, which the gateway no longer passes on to clients: see
:mod:`.call_ids`) repeat across conversations, so they are keyed together with
a digest of the typed conversation before the turn (:class:`Digests`): the messages'
roles, the text of every non-assistant message and the ids and names of the assistant's
calls, which clients send back unchanged (reasoning, assistant text and arguments are left
out).

Every user of the state store (the Responses API's too) reads and writes it through a
:class:`ReasoningMemory`: :meth:`ReasoningMemory.read` decodes each value with its kind's
decoder, which raises :class:`~.state_store.CorruptEntry` for a value not of its form
(bad JSON, wrong types or shape): such an entry is a miss, noted with its key (never its
value), never a failed request.

Store failures never fail a request: the answer is served without restoration, the
failure is noted (the :class:`Found` or :class:`Written` a read or a write returns
carries the request's ``state_error`` and the lines its observer logs) and ``/ready``
reports the store (``check``). Reads and writes are noted apart (:class:`StoreOutage`),
since a full store refuses writes and still reads. A stored value that is not a call's is
a miss.

Reasoning the client was not shown (``thinking.display: "omitted"``) is stored marked so
(``ModelCall.reasoning_hidden``): restored, it is rendered upstream but, like reasoning
that came sealed, never shown by the render routes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from dsmlkit.conversation.model import Message, TextPart
from dsmlkit.server.model_turns import MIN_CALL_ID_LENGTH, ModelCall
from dsmlkit.server.reqlog import Note
from dsmlkit.server.sealing import KeyRing
from dsmlkit.server.state_store import (
    DEFAULT_TTL,
    CorruptEntry,
    StateStore,
    StateStoreUnavailable,
)

T = TypeVar("T")
_KEY_PREFIX = "turn:"


@dataclass(frozen=True)
class Found(Generic[T]):
    """What one read of the store gave: the ``values`` it found by key, ``error``: why the
    store could not be read (then none), ``notes``: the lines to log (an outage starting
    or ending, corrupt entries)."""

    values: Mapping[str, T]
    error: str | None = None
    notes: tuple[Note, ...] = ()


@dataclass(frozen=True)
class Written:
    """What one write to the store did: ``error``, why it failed (None: it did not),
    ``notes``, the lines to log (an outage starting or ending)."""

    error: str | None = None
    notes: tuple[Note, ...] = ()


class StoreOutage:
    """Whether one kind of store operation (``read`` or ``write``) is failing: a note when
    it starts failing and one when it works again, not one per request."""

    def __init__(self, store: StateStore, operation: str, effect: str) -> None:
        self.store = store
        self.operation = operation
        self.effect = effect
        self.failing = False

    def failed(self, exc: StateStoreUnavailable) -> tuple[Note, ...]:
        """Note a failure (a note if it is the first)."""
        if self.failing:
            return ()
        self.failing = True
        fields = {
            "event": "state_store_unavailable",
            "store": self.store.description,
            "operation": self.operation,
            "error": exc.message,
            "effect": self.effect,
        }
        return (Note(f"state_store_unavailable: {self.operation}: {exc.message}", fields),)

    def worked(self) -> tuple[Note, ...]:
        """Note a success (a note if the operation was failing)."""
        if not self.failing:
            return ()
        self.failing = False
        fields = {
            "event": "state_store_recovered",
            "store": self.store.description,
            "operation": self.operation,
        }
        return (Note(f"state_store_recovered: {self.operation}", fields),)


class ThinkingSigner:
    """Signs and checks the thinking text of Anthropic ``thinking`` blocks."""

    def __init__(self, ring: KeyRing | None = None) -> None:
        """``ring``: the server's key ring (``DSMLKIT_STATE_SECRET``); default: random per
        process (then signatures do not verify after a restart or on another replica, and
        the store lookup decides instead)."""
        self.ring = ring or KeyRing.from_setting(None)

    def sign(self, thinking: str, model: str) -> str:
        """The signature of ``thinking`` in an answer for ``model``."""
        return self.ring.seal(thinking, model, "thinking")

    def seal(self, text: str, model: str) -> str:
        """:meth:`sign` (the :class:`~dsmlkit.api.seal.Sealer` protocol)."""
        return self.sign(text, model)

    def open(self, token: str, model: str) -> str:
        """The thinking text a signature of ours holds for ``model``; raises ``SealError``
        (the Messages reader compares it with the block's text)."""
        return self.ring.open(token, model, "thinking")


class ReasoningMemory:
    """What the model wrote, reasoning included, by call id in a :class:`StateStore`; see the
    module docstring (and :mod:`.model_turns`) for the rules. Its ``reads`` and ``writes``
    note the store's outages for every user of the store (the Responses API's too)."""

    def __init__(self, store: StateStore, signer: ThinkingSigner, ttl: float = DEFAULT_TTL) -> None:
        self.store = store
        self.signer = signer
        self.ttl = ttl
        self.reads = StoreOutage(
            store, "read", "requests are served without stored state; previous_response_id: 503"
        )
        self.writes = StoreOutage(
            store, "write", "answers are served but not stored (no reasoning round trip for them)"
        )

    async def remember(
        self,
        calls: Mapping[str, ModelCall],
        digests: Digests,
        entries: Mapping[str, str] | None = None,
    ) -> Written:
        """Store what the model wrote in one answer under each of its call ids (short ids
        with the ``digests`` of the conversation the answer continues), with ``entries``
        (a Responses turn), in one write."""
        items = dict(entries or {})
        for call_id, call in calls.items():
            key = digests.key(call_id)
            if key is not None:
                items[key] = call.dumps()
        if not items:
            return Written()
        try:
            await self.store.put_many(items, self.ttl)
        except StateStoreUnavailable as exc:
            return Written(exc.message, self.writes.failed(exc))
        return Written(None, self.writes.worked())

    async def read(self, keys: Collection[str], decode: Callable[[str], T]) -> Found[T]:
        """The values of those ``keys`` the store holds, each read by ``decode`` (see
        the module docstring); an unreachable store finds none. No keys: no read."""
        if not keys:
            return Found({})
        try:
            values = await self.store.get_many(keys)
        except StateStoreUnavailable as exc:
            return Found({}, exc.message, self.reads.failed(exc))
        decoded: dict[str, T] = {}
        notes: list[Note] = []
        for key, value in values.items():
            try:
                decoded[key] = decode(value)
            except CorruptEntry as exc:
                fields = {
                    "event": "state_entry_corrupt",
                    "store": self.store.description,
                    "key": key,
                    "error": str(exc),
                    "effect": "the entry is read as missing",
                }
                notes.append(Note(f"state_entry_corrupt: {key}: {exc}", fields))
        return Found(decoded, None, (*notes, *self.reads.worked()))


class Digests:
    """Digests of a request's typed conversation, for the keys of short call ids; computed
    once, and only when a short id asks for one."""

    def __init__(self, messages: Sequence[Message]) -> None:
        self._messages = messages
        self._digests: list[str] | None = None

    def key(self, call_id: str, index: int | None = None) -> str | None:
        """The store key of a call id of the assistant turn ``messages[index]`` (None: of
        an answer to the whole conversation)."""
        if len(call_id) >= MIN_CALL_ID_LENGTH:
            return key_of(call_id)
        if self._digests is None:
            self._digests = _digests(self._messages)
        at = len(self._digests) - 1 if index is None else index
        return key_of(call_id, self._digests[at])


def key_of(call_id: str, conversation: str | None = None) -> str | None:
    """The store key of a call id (``conversation``: the digest of what came before its
    turn); None for a short id without one."""
    if len(call_id) >= MIN_CALL_ID_LENGTH:
        return _KEY_PREFIX + call_id
    if conversation is None:
        return None
    return _KEY_PREFIX + hashlib.sha256(f"{conversation}\0{call_id}".encode()).hexdigest()


def _digests(messages: Sequence[Message]) -> list[str]:
    """``[digest of messages[:i] for i in 0..len(messages)]``."""
    running = hashlib.sha256()
    digests = [running.hexdigest()]
    for message in messages:
        running.update(json.dumps(_seen(message), ensure_ascii=False).encode() + b"\n")
        digests.append(running.hexdigest())
    return digests


def _seen(message: Message) -> list[Any]:
    """What of a message the conversation digest covers (see the module docstring): the
    role; for an assistant, the ids and names of its calls; for others, the text (whitespace
    runs made one space) and the call id a tool result answers."""
    if message.role == "assistant":
        return [message.role, *[[call.id, call.name] for call in message.tool_calls]]
    texts = [" ".join(part.text.split()) for part in message.parts if isinstance(part, TextPart)]
    return [message.role, message.tool_call_id, *texts]
