"""Responses ``store`` / ``previous_response_id`` on the gateway's state store.

A stored response keeps the conversation it ended: its full input items followed by its
output items, as JSON under ``response:<id>``, for the store's TTL. A request naming a
``previous_response_id`` gets that conversation put in front of its own ``input`` before it
is read. An id the store does not know (never stored, expired, or ``store: false``) is a 400
with param ``previous_response_id``; a store that cannot be reached is a 503, since the
request cannot be answered with the conversation it names.

Function calls this gateway issued that come back without trusted reasoning (no reasoning
item in their turn, or one whose sealed ``encrypted_content`` does not open here) get the
reasoning the gateway remembered for their call ids (:class:`ReasoningMemory`); a turn
the store does not know is read as sent (the reader then notes the token it cannot open).
"""

from __future__ import annotations

import json
from typing import Any

from dsmlkit.api.seal import SealError
from dsmlkit.errors import ApiError, InvalidRequest
from dsmlkit.server.reasoning_store import ReasoningMemory
from dsmlkit.server.sealing import KeyRing
from dsmlkit.server.state_store import StateStoreUnavailable, get_one

_KEY_PREFIX = "response:"
#: Items of the assistant's side of a turn (they are one turn when consecutive).
_ASSISTANT_ITEMS = ("reasoning", "function_call")


async def with_history(
    memory: ReasoningMemory, keys: KeyRing, body: Any
) -> tuple[Any, int, str | None, tuple[int, ...]]:
    """``(body, reasoning items restored, store error, sealed)``: ``body`` with the
    conversation its ``previous_response_id`` names in front of its ``input`` and dropped
    reasoning put back; ``sealed``: the ``input`` items whose sealed reasoning opens with
    ``keys`` (the reader opens them; tokens stay as sent, so a stored conversation keeps
    them sealed).

    Bodies of an unexpected shape are left to the reader; the caller's body is not modified.
    """
    if not isinstance(body, dict):
        return body, 0, None, ()
    previous = body.get("previous_response_id")
    if isinstance(previous, str):
        body = {**body, "input": [*await _stored_items(memory, previous), *_items(body)]}
    items = body.get("input")
    if not isinstance(items, list):
        return body, 0, None, ()
    restored, count, sealed, error = await _restore_reasoning(
        memory, keys, body.get("model"), items
    )
    return ({**body, "input": restored} if count else body), count, error, sealed


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
    memory: ReasoningMemory, keys: KeyRing, model: object, items: list[Any]
) -> tuple[list[Any], int, tuple[int, ...], str | None]:
    """``(items, restored, sealed, store error)``: each assistant turn with function calls
    but no trusted reasoning item gets the reasoning the store knows for one of its call
    ids (in place of a reasoning item whose token does not open, else in front of the
    turn); ``sealed``: where the items whose token opens now are."""
    opens = {
        index: _opens(keys, model, item)
        for index, item in enumerate(items)
        if isinstance(item, dict) and item.get("type") == "reasoning"
        if "encrypted_content" in item
    }
    dropped: list[tuple[list[int], list[str]]] = []  # (the turn's items, its call ids)
    for turn in _assistant_turns(items):
        ids = [
            items[i]["call_id"]
            for i in turn
            if items[i].get("type") == "function_call" and isinstance(items[i].get("call_id"), str)
        ]
        reasoned = [i for i in turn if items[i].get("type") == "reasoning"]
        if ids and (not reasoned or not all(opens.get(i, True) for i in reasoned)):
            dropped.append((turn, ids))
    found, error = await memory.recall(i for _, ids in dropped for i in ids)
    replaced: dict[int, Any] = {}  # item index → the item in its place
    inserted: dict[int, Any] = {}  # item index → the item put in front of it
    for turn, ids in dropped:
        reasoning = next((found[i] for i in ids if i in found), None)
        if reasoning is None:
            continue
        text = [{"type": "reasoning_text", "text": reasoning}]
        broken = next((i for i in turn if opens.get(i) is False), None)
        if broken is None:
            inserted[turn[0]] = {"type": "reasoning", "summary": [], "content": text}
        else:
            kept = {k: v for k, v in items[broken].items() if k != "encrypted_content"}
            replaced[broken] = {**kept, "content": text}
    restored: list[Any] = []
    sealed: list[int] = []
    for index, item in enumerate(items):
        if index in inserted:
            restored.append(inserted[index])
        if opens.get(index):
            sealed.append(len(restored))
        restored.append(replaced.get(index, item))
    return restored, len(inserted) + len(replaced), tuple(sealed), error


def _opens(keys: KeyRing, model: object, item: dict[str, Any]) -> bool:
    """Whether a reasoning item's ``encrypted_content`` opens here for ``model``."""
    token = item["encrypted_content"]
    if not isinstance(token, str) or not isinstance(model, str):
        return False
    try:
        keys.open(token, model)
    except SealError:
        return False
    return True


def _assistant_turns(items: list[Any]) -> list[list[int]]:
    """The indices of each run of consecutive assistant-side items (one assistant turn)."""
    turns: list[list[int]] = []
    previous = False
    for index, item in enumerate(items):
        kind = item.get("type", "message") if isinstance(item, dict) else None
        assistant = kind in _ASSISTANT_ITEMS or (
            kind == "message" and isinstance(item, dict) and item.get("role") == "assistant"
        )
        if assistant and previous:
            turns[-1].append(index)
        elif assistant:
            turns.append([index])
        previous = assistant
    return turns
