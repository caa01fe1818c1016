"""Responses ``store`` / ``previous_response_id`` on the gateway's state store.

A stored response keeps its own turn only: the request's ``input`` items as the client sent
them, then the output items, with links to the responses before it (its
``previous_response_id`` first, then that one's, up to :data:`LINKS`), as JSON under
``response:<id>`` for the store's TTL. A conversation of n turns so takes O(n) bytes, not
the O(n²) of re-storing the whole history with every turn. A request naming a
``previous_response_id`` gets the conversation that response ended put in front of its own
``input`` before it is read: the chain is followed back through the links (a batch of
them per store read, at most :data:`MAX_CHAIN` responses) and joined oldest first.

An id the store does not know (never stored, expired, evicted, or ``store: false``) is a
400 with param ``previous_response_id``, and so is a chain with a missing link (an earlier
response that expired or was evicted) or one longer than :data:`MAX_CHAIN`; a store that
cannot be reached is a 503, since the request cannot be answered with the conversation it
names.

Function calls this gateway issued that come back without trusted reasoning (no reasoning
item in their turn, or one whose sealed ``encrypted_content`` does not open here) get the
reasoning the gateway remembered for their call ids (:class:`ReasoningMemory`); a turn
the store does not know is read as sent (the reader then notes the token it cannot open).
"""

from __future__ import annotations

import json
from typing import Any

from dsmlkit.errors import ApiError, InvalidRequest
from dsmlkit.server.model_turns import Conversation, ModelCall, reconcile_function
from dsmlkit.server.reasoning_store import ReasoningMemory, Restored
from dsmlkit.server.sealing import KeyRing
from dsmlkit.server.state_store import StateStoreUnavailable

_KEY_PREFIX = "response:"
#: How many earlier responses each stored turn names, nearest first: a chain of n turns is
#: read in about n / LINKS store reads.
LINKS = 16
#: The longest chain ``previous_response_id`` follows (responses).
MAX_CHAIN = 1000
#: Items of the assistant's side of a turn (they are one turn when consecutive).
_ASSISTANT_ITEMS = ("reasoning", "function_call")


async def with_history(memory: ReasoningMemory, keys: KeyRing, body: Any) -> Restored:
    """``body`` with the conversation its ``previous_response_id`` names in front of its
    ``input``, dropped reasoning put back and the model's own arguments in its
    ``function_call`` items (one store read of the calls serves both); ``sealed``: the
    ``input`` items whose sealed reasoning opens with ``keys`` (the reader opens them;
    tokens stay as sent, so a stored conversation keeps them sealed).

    Bodies of an unexpected shape are left to the reader; the caller's body is not modified.
    """
    links: list[str] = []
    if isinstance(body, dict) and isinstance(body.get("previous_response_id"), str):
        history, links = await _conversation(memory, body["previous_response_id"])
        body = {**body, "input": [*history, *_items(body)]}
    result = Restored(body, Conversation("responses", body), links=links)
    items = body.get("input") if isinstance(body, dict) else None
    if not isinstance(items, list):
        return result
    found, result.error = await memory.calls_of(i["call_id"] for i in items if _is_call(i))
    restored, result.reasoning, result.sealed = _restore_reasoning(
        keys, body.get("model"), items, found
    )
    restored = [
        reconcile_function(item, found[item["call_id"]], result.changed)
        if _is_call(item) and item["call_id"] in found
        else item
        for item in restored
    ]
    if len(restored) != len(items) or any(a is not b for a, b in zip(restored, items, strict=True)):
        result.body = {**body, "input": restored}
    return result


def _is_call(item: Any) -> bool:
    """A ``function_call`` item with a call id."""
    return (
        isinstance(item, dict)
        and item.get("type") == "function_call"
        and isinstance(item.get("call_id"), str)
    )


async def save(
    memory: ReasoningMemory, body: Any, response: dict[str, Any], links: list[str]
) -> None:
    """Store the turn ``response`` ends when the request asked for it (``store``, default
    true): ``body`` is the request as the client sent it, ``links`` the earlier responses
    :func:`with_history` found for it (``Restored.links``). Raises
    :class:`StateStoreUnavailable`."""
    if not isinstance(body, dict) or body.get("store") is False:
        return
    turn = {"links": links, "items": [*_items(body), *response["output"]]}
    await memory.store.put_many({_KEY_PREFIX + response["id"]: json.dumps(turn)}, memory.ttl)


def _items(body: dict[str, Any]) -> list[Any]:
    """``input`` as items (a string is one user message)."""
    given = body.get("input")
    if isinstance(given, str):
        return [{"type": "message", "role": "user", "content": given}]
    return list(given) if isinstance(given, list) else []


def _turn(stored: str) -> tuple[list[str], list[Any]]:
    """``(links, items)`` of a stored turn; a whole conversation stored as one list (by
    dsmlkit before turns were linked) has no links."""
    turn = json.loads(stored)
    if isinstance(turn, list):
        return [], turn
    return turn["links"], turn["items"]


async def _conversation(memory: ReasoningMemory, response_id: str) -> tuple[list[Any], list[str]]:
    """Every item of the conversation ``response_id`` ended, oldest first, and the links of
    the next turn stored after it (``response_id``, then the responses it links)."""
    turns: list[list[Any]] = []  # newest first
    wanted = [response_id]
    following: list[str] | None = None
    while wanted:
        if len(turns) + len(wanted) > MAX_CHAIN:
            raise InvalidRequest(
                f"Previous response with id {response_id!r} ends a conversation of more than "
                f"{MAX_CHAIN} responses, longer than this server follows; send the "
                "conversation as input",
                "previous_response_id",
            )
        try:
            found = await memory.store.get_many(_KEY_PREFIX + i for i in wanted)
        except StateStoreUnavailable as exc:
            raise ApiError(
                f"previous_response_id: the state store is unavailable ({exc.message}); "
                "retry later or send the whole conversation as input",
                "previous_response_id",
                status=503,
            ) from exc
        links: list[str] = []
        for linked in wanted:
            stored = found.get(_KEY_PREFIX + linked)
            if stored is None:
                raise InvalidRequest(_missing(response_id, linked), "previous_response_id")
            links, items = _turn(stored)
            turns.append(items)
            if following is None:  # the turn of response_id itself, read first
                following = [response_id, *links][:LINKS]
        # the oldest turn read names the ones before it; the others' links were read
        wanted = links
    return [item for items in reversed(turns) for item in items], following or [response_id]


def _missing(response_id: str, linked: str) -> str:
    if linked == response_id:
        return f"Previous response with id {response_id!r} not found."
    return (
        f"Previous response with id {response_id!r} cannot be continued: the earlier "
        f"response {linked!r} of its conversation is no longer stored (expired or evicted); "
        "send the conversation as input"
    )


def _restore_reasoning(
    keys: KeyRing, model: object, items: list[Any], found: dict[str, ModelCall]
) -> tuple[list[Any], int, tuple[int, ...]]:
    """``(items, restored, sealed)``: each assistant turn with function calls but no
    trusted reasoning item gets the reasoning ``found`` (the store) has for one of its call
    ids (in place of a reasoning item whose token does not open, else in front of the
    turn); ``sealed``: where the items whose token opens now are."""
    opens = {
        index: keys.try_open(item["encrypted_content"], model) is not None
        for index, item in enumerate(items)
        if isinstance(item, dict) and item.get("type") == "reasoning"
        if "encrypted_content" in item
    }
    dropped: list[tuple[list[int], list[str]]] = []  # (the turn's items, its call ids)
    for turn in _assistant_turns(items):
        ids = [items[i]["call_id"] for i in turn if _is_call(items[i])]
        reasoned = [i for i in turn if items[i].get("type") == "reasoning"]
        if ids and (not reasoned or not all(opens.get(i, True) for i in reasoned)):
            dropped.append((turn, ids))
    replaced: dict[int, Any] = {}  # item index → the item in its place
    inserted: dict[int, Any] = {}  # item index → the item put in front of it
    for turn, ids in dropped:
        reasoning = next(
            (found[i].reasoning for i in ids if i in found and found[i].reasoning), None
        )
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
    return restored, len(inserted) + len(replaced), tuple(sealed)


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
