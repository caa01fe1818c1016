"""Responses ``store`` / ``previous_response_id`` on the gateway's state store.

A stored response keeps its own turn only: the request's ``input`` items as the client sent
them, then the output items, with links to the responses before it (its
``previous_response_id`` first, then that one's, up to :data:`LINKS`), as JSON under
``response:<id>`` for the store's TTL. A conversation of n turns so takes O(n) bytes, not
the O(n²) of re-storing the whole history with every turn. A request naming a
``previous_response_id`` gets the conversation that response ended read in front of its
own ``input`` (:func:`stored_history`): the chain is followed back through the links (a batch of
them per store read, at most :data:`MAX_CHAIN` responses) and joined oldest first.

An id the store does not know (never stored, expired, evicted, or ``store: false``) is a
400 with param ``previous_response_id``, and so is a chain with a missing link (an earlier
response that expired or was evicted) or one longer than :data:`MAX_CHAIN`; a store that
cannot be reached is a 503, since the request cannot be answered with the conversation it
names.

Dropped reasoning and the model's own words are put back on the typed request, as for
the other APIs (:mod:`.restore`).
"""

from __future__ import annotations

import json
from typing import Any

from dsmlkit.api.errors import ApiError
from dsmlkit.errors import InvalidRequest
from dsmlkit.server.reasoning_store import ReasoningMemory
from dsmlkit.server.state_store import StateStoreUnavailable

_KEY_PREFIX = "response:"
#: How many earlier responses each stored turn names, nearest first: a chain of n turns is
#: read in about n / LINKS store reads.
LINKS = 16
#: The longest chain ``previous_response_id`` follows (responses).
MAX_CHAIN = 1000


async def stored_history(memory: ReasoningMemory, body: Any) -> tuple[list[Any], list[str]]:
    """``(items, links)``: the items of the conversation ``body``'s
    ``previous_response_id`` names, oldest first (none without one), and the earlier
    responses a turn stored after this request links, nearest first. The reader reads the
    items before the body's ``input``."""
    if not (isinstance(body, dict) and isinstance(body.get("previous_response_id"), str)):
        return [], []
    return await _conversation(memory, body["previous_response_id"])


async def save(
    memory: ReasoningMemory, body: Any, response: dict[str, Any], links: list[str]
) -> None:
    """Store the turn ``response`` ends when the request asked for it (``store``, default
    true): ``body`` is the request as the client sent it, ``links`` the earlier responses
    :func:`stored_history` found for it. Raises
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
