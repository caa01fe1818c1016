"""The reasoning round trip: reasoning the gateway returned comes back when a client drops it.

Agent harnesses often send an assistant tool-call turn back without its reasoning
(``reasoning_content`` left out in OpenAI Chat, the ``thinking`` block left out in
Anthropic Messages). DeepSeek's V4 templates keep every reasoning of a tool loop in the
prompt, so the engine would see an empty think block in mid loop. The gateway therefore
remembers, for every call id it issued, the reasoning of that answer
(:meth:`ReasoningMemory.remember`), and puts it back into a request's history before the
request is read (:meth:`ReasoningMemory.restore`). The same entry keeps the rest of what the
model wrote, so that the turn is rendered in the model's own words (:mod:`.model_turns`).

The rule for Anthropic ``thinking`` blocks: the gateway signs every thinking block it
returns with its key ring (:mod:`.sealing`): the signature is the thinking text sealed for
the request's model (``dsmlkit-t2.…``), valid for a block whose text is exactly what it
holds, in a request naming that model. A tool-use turn whose thinking blocks all carry our
valid signature is used as sent. Any other turn (no thinking block, a
``redacted_thinking`` block, a missing, foreign or forged signature) is *unsigned*: if
the store knows one of its call ids, the stored reasoning replaces its thinking blocks;
otherwise the client's text is used as sent, like any other history it writes. OpenAI
turns carry no signature: a turn with an empty or missing ``reasoning_content`` /
``reasoning`` gets the stored reasoning, one with reasoning is used as sent.

Store failures never fail a request: the answer is served without restoration, the
failure is logged and ``/ready`` reports the store (``check``).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from dsmlkit.api.common import Api
from dsmlkit.parse import ContentDelta, Event, ReasoningDelta, ToolCallEnd
from dsmlkit.server.model_turns import (
    Conversation,
    ModelCall,
    key_of,
    reconcile,
)
from dsmlkit.server.reqlog import log_event
from dsmlkit.server.sealing import KeyRing
from dsmlkit.server.state_store import DEFAULT_TTL, StateStore, StateStoreUnavailable

LOGGER = logging.getLogger("dsmlkit.server")


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

    def verify(self, thinking: object, signature: object, model: object) -> bool:
        """True when ``signature`` is ours, for ``model``, for exactly this ``thinking``."""
        signed = self.ring.try_open(signature, model, "thinking")
        return signed is not None and signed == thinking  # the text is authenticated, not secret


@dataclass(frozen=True)
class _ToolTurn:
    """An assistant tool-call turn (``messages[index]``); ``dropped``: without reasoning."""

    index: int
    call_ids: tuple[str, ...]
    dropped: bool


@dataclass
class Restored:
    """What :meth:`ReasoningMemory.restore` did to a body."""

    body: Any
    #: The conversation's digests, for short call ids: the same for the body as sent and as
    #: restored (roles, texts and call ids do not change), so one serves the whole request.
    conversation: Conversation
    #: Assistant turns whose dropped reasoning was put back.
    reasoning: int = 0
    #: What the client really changed in the model's turns (used as sent): ``call``,
    #: ``content``, ``reasoning``.
    changed: Counter[str] = field(default_factory=Counter)
    #: Why the store could not be used, if it could not.
    error: str | None = None
    #: Responses ``input`` items whose sealed reasoning opens here (the reader opens them).
    sealed: tuple[int, ...] = ()
    #: Responses: the earlier responses a turn stored after this request links, nearest
    #: first (its ``previous_response_id``, then the ones that one links).
    links: list[str] = field(default_factory=list)


class AnswerTracker:
    """Collects what :meth:`ReasoningMemory.remember` needs from one answer's events."""

    def __init__(self) -> None:
        self._reasoning: list[str] = []
        self._content: list[str] = []
        self._calls: list[ToolCallEnd] = []

    def add(self, events: Iterable[Event]) -> None:
        for event in events:
            if isinstance(event, ReasoningDelta):
                self._reasoning.append(event.text)
            elif isinstance(event, ContentDelta):
                self._content.append(event.text)
            elif isinstance(event, ToolCallEnd):
                self._calls.append(event)

    @property
    def reasoning(self) -> str:
        return "".join(self._reasoning)

    def calls(self) -> dict[str, ModelCall]:
        """What the model wrote, by call id."""
        reasoning, content = self.reasoning, "".join(self._content)
        return {
            call.id: ModelCall(call.name, call.arguments_json, reasoning, content)
            for call in self._calls
        }


class ReasoningMemory:
    """What the model wrote, reasoning included, by call id in a :class:`StateStore`; see the
    module docstring (and :mod:`.model_turns`) for the rules."""

    def __init__(self, store: StateStore, signer: ThinkingSigner, ttl: float = DEFAULT_TTL) -> None:
        self.store = store
        self.signer = signer
        self.ttl = ttl
        self._failing = False

    async def remember(
        self, answer: AnswerTracker, conversation: Conversation | None = None
    ) -> str | None:
        """Store what the model wrote under each of the answer's call ids (short ids with
        the ``conversation`` the answer continues); returns the store error, if any."""
        items = {}
        for call_id, call in answer.calls().items():
            key = conversation.key(call_id) if conversation is not None else key_of(call_id)
            if key is not None:
                items[key] = call.dumps()
        if not items:
            return None
        try:
            await self.store.put_many(items, self.ttl)
        except StateStoreUnavailable as exc:
            return self._failed(exc)
        self._recovered()
        return None

    async def calls_of(self, call_ids: Iterable[str]) -> tuple[dict[str, ModelCall], str | None]:
        """``({call id: what the model wrote} for the ids the store knows, store error)``,
        for the Responses API's items (short ids are not known there: no conversation)."""
        return await self._calls({i: key for i in call_ids if (key := key_of(i)) is not None})

    async def restore(self, api: Api, body: Any) -> Restored:
        """The body with dropped reasoning put back and the model's words restored.

        For the message-shaped APIs (Chat, Messages); a Responses body is restored by
        :func:`.response_store.with_history`. The body is not validated here (the API reader
        does that next); anything of an unexpected shape is left as it is. The caller's
        body is never modified.
        """
        conversation = Conversation(api, body)
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list):
            return Restored(body, conversation)
        model = body.get("model")
        turns = _tool_turns(api, messages, model, self.signer)
        keys = {
            (turn.index, i): key
            for turn in turns
            for i in turn.call_ids
            if (key := conversation.key(i, turn.index)) is not None
        }
        found, error = await self._calls(keys)
        result = Restored(body, conversation, error=error)
        if not found:
            return result
        restored = list(messages)
        for turn in turns:
            calls = {i: found[turn.index, i] for i in turn.call_ids if (turn.index, i) in found}
            reasoning = next((c.reasoning for c in calls.values() if c.reasoning), None)
            message = messages[turn.index]
            if turn.dropped and reasoning is not None:
                message = _with_reasoning(api, message, reasoning, model, self.signer)
                result.reasoning += 1
            restored[turn.index] = reconcile(api, message, calls, result.changed)
        result.body = {**body, "messages": restored}
        return result

    async def _calls(self, keys: dict[Any, str]) -> tuple[dict[Any, ModelCall], str | None]:
        """``({name: stored call} for the ``{name: key}`` the store knows, store error)``."""
        if not keys:
            return {}, None
        try:
            values = await self.store.get_many(set(keys.values()))
        except StateStoreUnavailable as exc:
            return {}, self._failed(exc)
        self._recovered()
        found = {name: ModelCall.loads(values[key]) for name, key in keys.items() if key in values}
        return {name: call for name, call in found.items() if call is not None}, None

    def _failed(self, exc: StateStoreUnavailable) -> str:
        if not self._failing:
            self._failing = True
            log_event(
                LOGGER,
                logging.WARNING,
                f"state_store_unavailable: {exc.message}",
                {
                    "event": "state_store_unavailable",
                    "store": self.store.description,
                    "error": exc.message,
                    "effect": "answers are served without the reasoning round trip",
                },
            )
        return exc.message

    def _recovered(self) -> None:
        if self._failing:
            self._failing = False
            log_event(
                LOGGER,
                logging.WARNING,
                "state_store_recovered",
                {"event": "state_store_recovered", "store": self.store.description},
            )


def _tool_turns(
    api: Api, messages: list[Any], model: object, signer: ThinkingSigner
) -> list[_ToolTurn]:
    turns = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        if api == "openai":
            ids = _openai_call_ids(message)
            kept = _openai_reasoning(message)
        else:
            ids = _anthropic_call_ids(message)
            kept = bool(ids) and _signed_by_us(message["content"], model, signer)
        if ids:
            turns.append(_ToolTurn(index, ids, dropped=not kept))
    return turns


def _openai_call_ids(message: dict[str, Any]) -> tuple[str, ...]:
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return ()
    return tuple(
        call["id"] for call in calls if isinstance(call, dict) and isinstance(call.get("id"), str)
    )


def _openai_reasoning(message: dict[str, Any]) -> bool:
    """Whether the turn carries reasoning text (either field name, as the reader takes it)."""
    for key in ("reasoning_content", "reasoning"):
        if key in message:
            return isinstance(message[key], str) and bool(message[key])
    return False


def _anthropic_call_ids(message: dict[str, Any]) -> tuple[str, ...]:
    content = message.get("content")
    if not isinstance(content, list):
        return ()
    return tuple(
        block["id"]
        for block in content
        if isinstance(block, dict)
        and block.get("type") == "tool_use"
        and isinstance(block.get("id"), str)
    )


def _signed_by_us(content: list[Any], model: object, signer: ThinkingSigner) -> bool:
    """At least one thinking block, and every one of them (no redacted ones) signed by us
    for ``model``."""
    thinking = [
        block
        for block in content
        if isinstance(block, dict) and block.get("type") in ("thinking", "redacted_thinking")
    ]
    return bool(thinking) and all(
        block["type"] == "thinking"
        and signer.verify(block.get("thinking"), block.get("signature"), model)
        for block in thinking
    )


def _with_reasoning(
    api: Api, message: dict[str, Any], reasoning: str, model: object, signer: ThinkingSigner
) -> dict[str, Any]:
    if api == "openai":
        restored = {k: v for k, v in message.items() if k != "reasoning"}
        restored["reasoning_content"] = reasoning
        return restored
    signature = signer.sign(reasoning, model if isinstance(model, str) else "")
    block = {"type": "thinking", "thinking": reasoning, "signature": signature}
    others = [
        b
        for b in message["content"]
        if not (isinstance(b, dict) and b.get("type") in ("thinking", "redacted_thinking"))
    ]
    return {**message, "content": [block, *others]}
