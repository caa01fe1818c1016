"""Responses ``store`` / ``previous_response_id`` on the gateway's state store.

A stored response keeps its own turn only: the request's ``input`` items as the client sent
them, then the output items, with links to the responses before it (its
``previous_response_id`` first, then that one's, up to :data:`LINKS`), as JSON under
``response:<id>`` for the store's TTL. A conversation of n turns so takes O(n) bytes, not
the O(n²) of re-storing the whole history with every turn. A request naming a
``previous_response_id`` gets the conversation that response ended read in front of its
own ``input`` (:func:`stored_history`, which returns a :class:`History`): the chain is
followed back through the links (a batch of them per store read, at most
:data:`MAX_CHAIN` responses) and joined oldest first. The turn a Responses answer ends is
stored by the remember stage (:mod:`.remember`).

An id the store does not know (never stored, expired, evicted, or ``store: false``) is a
400 with param ``previous_response_id``, and so is a chain with a missing link (an earlier
response that expired or was evicted) or one longer than :data:`MAX_CHAIN`; a stored turn
that is not one (:meth:`StoredTurn.loads` refuses it), or whose items the request reader
refuses (:meth:`History.unreadable`), is missing too (:class:`HistoryRefused`). A store
that cannot be reached is a 503 (:class:`HistoryUnavailable`), since the request cannot be
answered with the conversation it names; its message says only that. Neither error body
quotes the store: what the read noted (the store's own error, which may name its address;
a corrupt entry; the reader's message about a stored item) rides on the error as
``notes``, which the request's observer logs.

Dropped reasoning and the model's own words are put back on the typed request, as for
the other APIs (:mod:`.restore`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from dsmlkit.api.errors import ApiError, ClientError
from dsmlkit.errors import InvalidRequest
from dsmlkit.server.errors import Noted
from dsmlkit.server.reasoning_store import ReasoningMemory
from dsmlkit.server.reqlog import Note
from dsmlkit.server.state_store import CorruptEntry, load_json

#: The store keys of responses: ``response:<id>``.
KEY_PREFIX = "response:"
_PARAM = "previous_response_id"
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


class HistoryRefused(Noted, ClientError):
    """A ``previous_response_id`` this server cannot continue (400, naming the param),
    with what reading it noted."""

    def __init__(self, message: str, notes: tuple[Note, ...] = ()) -> None:
        super().__init__(message, _PARAM, status=400)
        self.notes = notes


class HistoryUnavailable(Noted, ApiError):
    """The store holding ``previous_response_id``'s conversation cannot be reached (503),
    with what reading it noted (the store's own error among them)."""

    def __init__(self, notes: tuple[Note, ...]) -> None:
        super().__init__(
            "the state store is unavailable; retry later or send the whole conversation as input",
            _PARAM,
            status=503,
        )
        self.notes = notes


@dataclass(frozen=True)
class History:
    """The conversation a Responses request continues: the ``items`` of the conversation
    its ``previous_response_id`` names, oldest first (none without one), for the reader to
    read before the body's ``input``; the ``links`` of the turn a Responses answer to it
    stores, nearest first; and what reading it noted (``notes``, a store that recovered)."""

    items: list[Any] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    notes: tuple[Note, ...] = ()
    response_id: str | None = None

    def unreadable(self, exc: InvalidRequest) -> HistoryRefused | None:
        """The error for a request whose stored conversation the reader refused (``exc``
        names one of its items): the conversation is as good as missing, and the reader's
        message, which may quote the stored items, goes to the notes only. None when
        ``exc`` is about the request itself."""
        response_id = self.response_id
        if response_id is None or not (exc.param or "").startswith(_HISTORY_PARAM):
            return None
        note = Note(
            f"state_entry_corrupt: the conversation of {response_id}: {exc}",
            {
                "event": "state_entry_corrupt",
                "key": KEY_PREFIX + response_id,
                "error": str(exc),
                "effect": "the conversation is read as missing",
            },
        )
        return HistoryRefused(
            f"Previous response with id {response_id!r} cannot be continued: its stored "
            "conversation does not read back; send the conversation as input",
            (*self.notes, note),
        )


#: The history of a request that continues none.
NO_HISTORY = History()


async def stored_history(memory: ReasoningMemory, body: Any) -> History:
    """The :class:`History` ``body``'s ``previous_response_id`` names (none without one).
    Raises :class:`HistoryRefused` and :class:`HistoryUnavailable`."""
    if not (isinstance(body, dict) and isinstance(body.get("previous_response_id"), str)):
        return NO_HISTORY
    response_id = body["previous_response_id"]
    turns: list[list[Any]] = []  # newest first
    wanted = [response_id]
    following: list[str] | None = None
    notes: tuple[Note, ...] = ()
    while wanted:
        if len(turns) + len(wanted) > MAX_CHAIN:
            raise HistoryRefused(
                f"Previous response with id {response_id!r} ends a conversation of more than "
                f"{MAX_CHAIN} responses, longer than this server follows; send the "
                "conversation as input",
                notes,
            )
        found = await memory.read([KEY_PREFIX + i for i in wanted], StoredTurn.loads)
        notes += found.notes
        if found.error is not None:
            raise HistoryUnavailable(notes)
        links: list[str] = []
        for linked in wanted:
            turn = found.values.get(KEY_PREFIX + linked)
            if turn is None:
                raise HistoryRefused(_missing(response_id, linked), notes)
            links = turn.links
            turns.append(turn.items)
            if following is None:  # the turn of response_id itself, read first
                following = [response_id, *links][:LINKS]
        # the oldest turn read names the ones before it; the others' links were read
        wanted = links
    items = [item for items in reversed(turns) for item in items]
    return History(items, following or [response_id], notes, response_id)


def _missing(response_id: str, linked: str) -> str:
    if linked == response_id:
        return f"Previous response with id {response_id!r} not found."
    return (
        f"Previous response with id {response_id!r} cannot be continued: the earlier "
        f"response {linked!r} of its conversation is no longer stored (expired or evicted); "
        "send the conversation as input"
    )
