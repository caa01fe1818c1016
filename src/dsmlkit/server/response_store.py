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
response that expired or was evicted) or one longer than :data:`MAX_CHAIN`; a stored turn
that is not one (:meth:`StoredTurn.loads` refuses it), or whose items the request reader
refuses (:func:`unreadable_history`), is missing too. A store that cannot
be reached is a 503, since the request cannot be answered with the conversation it names;
its message says only that (the store's own error, which may name its address, is logged).

Dropped reasoning and the model's own words are put back on the typed request, as for
the other APIs (:mod:`.restore`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from dsmlkit.api.errors import ApiError
from dsmlkit.errors import InvalidRequest
from dsmlkit.server.reasoning_store import ReasoningMemory
from dsmlkit.server.reqlog import log_event
from dsmlkit.server.state_store import CorruptEntry, StateStoreUnavailable, get_decoded, load_json

LOGGER = logging.getLogger("dsmlkit.server")
_KEY_PREFIX = "response:"
#: The param path the request reader gives the stored items (``previous_response_id[3]``).
_HISTORY_PARAM = "previous_response_id["
#: How many earlier responses each stored turn names, nearest first: a chain of n turns is
#: read in about n / LINKS store reads.
LINKS = 16
#: The longest chain ``previous_response_id`` follows (responses).
MAX_CHAIN = 1000


@dataclass(frozen=True)
class StoredTurn:
    """One stored response: the earlier responses it links, nearest first, and its items
    (the request's ``input`` items, then the output items)."""

    links: list[str]
    items: list[dict[str, Any]]

    def dumps(self) -> str:
        return json.dumps({"links": self.links, "items": self.items})

    @classmethod
    def loads(cls, text: str) -> StoredTurn:
        """The stored turn; a whole conversation stored as one list (by dsmlkit before
        turns were linked) has no links. Raises :class:`~.state_store.CorruptEntry` for a
        value of another form."""
        turn = load_json(text)
        if isinstance(turn, list):
            turn = {"links": [], "items": turn}
        if not isinstance(turn, dict):
            raise CorruptEntry("a stored response must be a JSON object or list")
        links, items = turn.get("links"), turn.get("items")
        if not (isinstance(links, list) and all(isinstance(link, str) for link in links)):
            raise CorruptEntry("a stored response's links must be a list of ids")
        if not (isinstance(items, list) and all(isinstance(item, dict) for item in items)):
            raise CorruptEntry("a stored response's items must be a list of objects")
        return cls(links, items)


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
    turn = StoredTurn(links, [*_items(body), *response["output"]])
    try:
        await memory.store.put_many({_KEY_PREFIX + response["id"]: turn.dumps()}, memory.ttl)
    except StateStoreUnavailable as exc:
        memory.writes.failed(exc)
        raise
    memory.writes.worked()


def _items(body: dict[str, Any]) -> list[Any]:
    """``input`` as items (a string is one user message)."""
    given = body.get("input")
    if isinstance(given, str):
        return [{"type": "message", "role": "user", "content": given}]
    return list(given) if isinstance(given, list) else []


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
            found = await get_decoded(
                memory.store, (_KEY_PREFIX + i for i in wanted), StoredTurn.loads
            )
        except StateStoreUnavailable as exc:
            memory.reads.failed(exc)
            raise ApiError(
                "the state store is unavailable; retry later or send the whole "
                "conversation as input",
                "previous_response_id",
                status=503,
            ) from exc
        memory.reads.worked()
        links: list[str] = []
        for linked in wanted:
            turn = found.get(_KEY_PREFIX + linked)
            if turn is None:
                raise InvalidRequest(_missing(response_id, linked), "previous_response_id")
            links = turn.links
            turns.append(turn.items)
            if following is None:  # the turn of response_id itself, read first
                following = [response_id, *links][:LINKS]
        # the oldest turn read names the ones before it; the others' links were read
        wanted = links
    return [item for items in reversed(turns) for item in items], following or [response_id]


def unreadable_history(body: Any, exc: InvalidRequest) -> InvalidRequest | None:
    """The error for a request whose stored conversation the reader refused (``exc`` names
    one of its items): the conversation is as good as missing, and the reader's message,
    which may quote the stored items, goes to the log only. None when ``exc`` is about
    the request itself."""
    if not (exc.param or "").startswith(_HISTORY_PARAM):
        return None
    response_id = body["previous_response_id"]
    log_event(
        LOGGER,
        logging.WARNING,
        f"state_entry_corrupt: the conversation of {response_id}: {exc}",
        {
            "event": "state_entry_corrupt",
            "key": _KEY_PREFIX + response_id,
            "error": str(exc),
            "effect": "the conversation is read as missing",
        },
    )
    return InvalidRequest(
        f"Previous response with id {response_id!r} cannot be continued: its stored "
        "conversation does not read back; send the conversation as input",
        "previous_response_id",
    )


def _missing(response_id: str, linked: str) -> str:
    if linked == response_id:
        return f"Previous response with id {response_id!r} not found."
    return (
        f"Previous response with id {response_id!r} cannot be continued: the earlier "
        f"response {linked!r} of its conversation is no longer stored (expired or evicted); "
        "send the conversation as input"
    )
