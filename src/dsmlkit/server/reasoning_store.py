"""The reasoning round trip: reasoning the gateway returned comes back when a client drops it.

Agent harnesses often send an assistant tool-call turn back without its reasoning
(``reasoning_content`` left out in OpenAI Chat, the ``thinking`` block left out in
Anthropic Messages). DeepSeek's V4 templates keep every reasoning of a tool loop in the
prompt, so the engine would see an empty think block in mid loop. The gateway therefore
remembers, for every call id it issued, the reasoning of that answer
(:meth:`ReasoningMemory.remember`), and puts it back into a request's history before the
request is read (:meth:`ReasoningMemory.restore`).

The rule for Anthropic ``thinking`` blocks: the gateway signs every thinking block it
returns with ``dsmlkit1.`` + base64url(HMAC-SHA256(secret, ``b"dsmlkit thinking\\0"`` +
the UTF-8 thinking text)). A tool-use turn whose thinking blocks all carry our valid
signature is used as sent. Any other turn (no thinking block, a ``redacted_thinking``
block, a missing, foreign or forged signature) is *unsigned*: if the store knows one of its
call ids, the stored reasoning replaces its thinking blocks; otherwise the client's text is
used as sent, like any other history it writes. OpenAI turns carry no signature: a turn
with an empty or missing ``reasoning_content`` / ``reasoning`` gets the stored reasoning,
one with reasoning is used as sent.

Store failures never fail a request: the answer is served without restoration, the
failure is logged and ``/ready`` reports the store (``check``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from dsmlkit.api.common import Api
from dsmlkit.parse import Event, ReasoningDelta, ToolCallEnd
from dsmlkit.server.reqlog import log_event
from dsmlkit.server.state_store import DEFAULT_TTL, StateStore, StateStoreUnavailable

LOGGER = logging.getLogger("dsmlkit.server")

SIGNATURE_PREFIX = "dsmlkit1."
_SIGNED_TEXT_PREFIX = b"dsmlkit thinking\0"
_KEY_PREFIX = "reasoning:"
#: Call ids shorter than this are never used as keys: an upstream that numbers its calls
#: (``call_0``) would give two conversations the same id. The gateway's own ids have 29+.
MIN_CALL_ID_LENGTH = 16


class ThinkingSigner:
    """Signs and checks the thinking text of Anthropic ``thinking`` blocks."""

    def __init__(self, secret: str | None = None) -> None:
        """``secret``: the server secret (``DSMLKIT_STATE_SECRET``); default: random per
        process (then signatures do not verify after a restart or on another replica, and
        the store lookup decides instead)."""
        self._key = (secret or secrets.token_hex(32)).encode()

    def sign(self, thinking: str) -> str:
        mac = hmac.new(self._key, _SIGNED_TEXT_PREFIX + thinking.encode(), hashlib.sha256)
        return SIGNATURE_PREFIX + base64.urlsafe_b64encode(mac.digest()).decode().rstrip("=")

    def verify(self, thinking: object, signature: object) -> bool:
        """True when ``signature`` is ours for exactly this ``thinking`` text."""
        if not isinstance(thinking, str) or not isinstance(signature, str):
            return False
        return hmac.compare_digest(self.sign(thinking).encode(), signature.encode())


@dataclass(frozen=True)
class _DroppedTurn:
    """An assistant tool-call turn (``messages[index]``) that came back without reasoning."""

    index: int
    call_ids: tuple[str, ...]


class AnswerTracker:
    """Collects what :meth:`ReasoningMemory.remember` needs from one answer's events."""

    def __init__(self) -> None:
        self._reasoning: list[str] = []
        self.call_ids: list[str] = []

    def add(self, events: Iterable[Event]) -> None:
        for event in events:
            if isinstance(event, ReasoningDelta):
                self._reasoning.append(event.text)
            elif isinstance(event, ToolCallEnd):
                self.call_ids.append(event.id)

    @property
    def reasoning(self) -> str:
        return "".join(self._reasoning)


class ReasoningMemory:
    """Reasoning by call id in a :class:`StateStore`; see the module docstring for the rules."""

    def __init__(self, store: StateStore, signer: ThinkingSigner, ttl: float = DEFAULT_TTL) -> None:
        self.store = store
        self.signer = signer
        self.ttl = ttl
        self._failing = False

    async def remember(self, call_ids: Sequence[str], reasoning: str) -> str | None:
        """Store ``reasoning`` under each call id; returns the store error, if any."""
        keys = [_KEY_PREFIX + i for i in call_ids if len(i) >= MIN_CALL_ID_LENGTH]
        if not keys or not reasoning:
            return None
        try:
            await self.store.put_many(dict.fromkeys(keys, reasoning), self.ttl)
        except StateStoreUnavailable as exc:
            return self._failed(exc)
        self._recovered()
        return None

    async def recall(self, call_ids: Iterable[str]) -> tuple[dict[str, str], str | None]:
        """``({call id: reasoning} for the ids the store knows, store error)``; also for the
        Responses API's reasoning items."""
        ids = [i for i in call_ids if len(i) >= MIN_CALL_ID_LENGTH]
        if not ids:
            return {}, None
        try:
            found = await self.store.get_many(_KEY_PREFIX + call_id for call_id in ids)
        except StateStoreUnavailable as exc:
            return {}, self._failed(exc)
        self._recovered()
        return {i: found[_KEY_PREFIX + i] for i in ids if _KEY_PREFIX + i in found}, None

    async def restore(self, api: Api, body: Any) -> tuple[Any, int, str | None]:
        """``(body, turns restored, store error)``: the body with dropped reasoning put back.

        The body is not validated here (the API reader does that next); anything of an
        unexpected shape is left as it is. The caller's body is never modified.
        """
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list):
            return body, 0, None
        turns = _dropped_turns(api, messages, self.signer)
        if not turns:
            return body, 0, None
        found, error = await self.recall(call_id for turn in turns for call_id in turn.call_ids)
        if error is not None:
            return body, 0, error
        restored = list(messages)
        count = 0
        for turn in turns:
            reasoning = next((found[i] for i in turn.call_ids if i in found), None)
            if reasoning is not None:
                restored[turn.index] = _with_reasoning(
                    api, messages[turn.index], reasoning, self.signer
                )
                count += 1
        if not count:
            return body, 0, None
        return {**body, "messages": restored}, count, None

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


def _dropped_turns(api: Api, messages: list[Any], signer: ThinkingSigner) -> list[_DroppedTurn]:
    turns = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        if api == "openai":
            ids = _openai_call_ids(message)
            kept = _openai_reasoning(message)
        else:
            ids = _anthropic_call_ids(message)
            kept = bool(ids) and _signed_by_us(message["content"], signer)
        if ids and not kept:
            turns.append(_DroppedTurn(index, ids))
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


def _signed_by_us(content: list[Any], signer: ThinkingSigner) -> bool:
    """At least one thinking block, and every one of them (no redacted ones) signed by us."""
    thinking = [
        block
        for block in content
        if isinstance(block, dict) and block.get("type") in ("thinking", "redacted_thinking")
    ]
    return bool(thinking) and all(
        block["type"] == "thinking" and signer.verify(block.get("thinking"), block.get("signature"))
        for block in thinking
    )


def _with_reasoning(
    api: Api, message: dict[str, Any], reasoning: str, signer: ThinkingSigner
) -> dict[str, Any]:
    if api == "openai":
        restored = {k: v for k, v in message.items() if k != "reasoning"}
        restored["reasoning_content"] = reasoning
        return restored
    block = {"type": "thinking", "thinking": reasoning, "signature": signer.sign(reasoning)}
    others = [
        b
        for b in message["content"]
        if not (isinstance(b, dict) and b.get("type") in ("thinking", "redacted_thinking"))
    ]
    return {**message, "content": [block, *others]}
