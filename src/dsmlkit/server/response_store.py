"""Responses ``store`` / ``previous_response_id`` on the gateway's state store.

A stored response keeps the conversation it ended: its full input items followed by its
output items, as JSON under ``response:<id>``, for the store's TTL. A request naming a
``previous_response_id`` gets that conversation put in front of its own ``input`` before it
is read. An id the store does not know (never stored, expired, or ``store: false``) is a 400
with param ``previous_response_id``; a store that cannot be reached is a 503, since the
request cannot be answered with the conversation it names.

Function calls this gateway issued that come back without a reasoning item before them
get the reasoning the gateway remembered for their call ids (:class:`ReasoningMemory`).
"""

from __future__ import annotations

import json
from typing import Any

from dsmlkit.errors import ApiError, InvalidRequest
from dsmlkit.server.reasoning_store import ReasoningMemory
from dsmlkit.server.state_store import StateStoreUnavailable, get_one

_KEY_PREFIX = "response:"
#: Items of the assistant's side of a turn (they are one turn when consecutive).
_ASSISTANT_ITEMS = ("reasoning", "function_call")


async def with_history(memory: ReasoningMemory, body: Any) -> tuple[Any, int, str | None]:
    """``(body, reasoning items restored, store error)``: ``body`` with the conversation its
    ``previous_response_id`` names in front of its ``input`` and dropped reasoning put back.

    Bodies of an unexpected shape are left to the reader; the caller's body is not modified.
    """
    if not isinstance(body, dict):
        return body, 0, None
    previous = body.get("previous_response_id")
    if isinstance(previous, str):
        body = {**body, "input": [*await _stored_items(memory, previous), *_items(body)]}
    items = body.get("input")
    if not isinstance(items, list):
        return body, 0, None
    restored, count, error = await _restore_reasoning(memory, items)
    return ({**body, "input": restored} if count else body), count, error


async def save(memory: ReasoningMemory, body: Any, response: dict[str, Any]) -> None:
    """Store the conversation ``response`` ends (``body`` as read, history included) when
    the request asked for it (``store``, default true); raises :class:`StateStoreUnavailable`."""
    if not isinstance(body, dict) or body.get("store") is False:
        return
    items = [*_items(body), *response["output"]]
    await memory.store.put_many({_KEY_PREFIX + response["id"]: json.dumps(items)}, memory.ttl)


def _items(body: dict[str, Any]) -> list[Any]:
    """``input`` as items (a string is one user message)."""
    given = body.get("input")
    if isinstance(given, str):
        return [{"type": "message", "role": "user", "content": given}]
    return list(given) if isinstance(given, list) else []


async def _stored_items(memory: ReasoningMemory, response_id: str) -> list[Any]:
    try:
        stored = await get_one(memory.store, _KEY_PREFIX + response_id)
    except StateStoreUnavailable as exc:
        raise ApiError(
            f"previous_response_id: the state store is unavailable ({exc.message}); "
            "retry later or send the whole conversation as input",
            "previous_response_id",
            status=503,
        ) from exc
    if stored is None:
        raise InvalidRequest(
            f"Previous response with id {response_id!r} not found.", "previous_response_id"
        )
    items: list[Any] = json.loads(stored)
    return items


async def _restore_reasoning(
    memory: ReasoningMemory, items: list[Any]
) -> tuple[list[Any], int, str | None]:
    """Put a reasoning item at the start of each assistant turn that has function calls but
    no reasoning item, when the store knows one of its call ids."""
    dropped: list[tuple[int, list[str]]] = []  # (where the turn starts, its call ids)
    turn_start: int | None = None  # the assistant turn being read
    reasoned = False
    for index, item in enumerate(items):
        kind = item.get("type", "message") if isinstance(item, dict) else None
        assistant = kind in _ASSISTANT_ITEMS or (
            kind == "message" and isinstance(item, dict) and item.get("role") == "assistant"
        )
        if not assistant:
            turn_start, reasoned = None, False
            continue
        if turn_start is None:
            turn_start = index
        reasoned = reasoned or kind == "reasoning"
        call_id = item.get("call_id") if kind == "function_call" else None
        if reasoned or not isinstance(call_id, str):
            continue
        if not dropped or dropped[-1][0] != turn_start:
            dropped.append((turn_start, []))
        dropped[-1][1].append(call_id)
    if not dropped:
        return items, 0, None
    found, error = await memory.recall(i for _, ids in dropped for i in ids)
    restored = list(items)
    count = 0
    for start, ids in reversed(dropped):
        reasoning = next((found[i] for i in ids if i in found), None)
        if reasoning is not None:
            text = [{"type": "reasoning_text", "text": reasoning}]
            restored.insert(start, {"type": "reasoning", "summary": [], "content": text})
            count += 1
    return restored, count, error
