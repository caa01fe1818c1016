"""The remember stage: what one answer leaves in the state store, in one write, before its
last events go out (so that a client that sends the next turn at once finds it).

* What the model wrote, under each of its call ids (:class:`~.model_turns.ModelCall`,
  short ids keyed with the :class:`~.reasoning_store.Digests` of the conversation the
  answer continues): the restore stage of a later request puts it back (:mod:`.restore`).
* A Responses answer's turn (:class:`~.response_store.StoredTurn`), when the request asked
  for it stored (``store``, default true): the request's ``input`` items as the client
  sent them and the output items, linked to the responses before it.

A store failure does not fail the answer: the :class:`~.reasoning_store.Written` result
says why, with the lines to log, and the request's observer reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dsmlkit.server.model_turns import ModelCall
from dsmlkit.server.reasoning_store import Digests, ReasoningMemory, Written
from dsmlkit.server.response_store import KEY_PREFIX, StoredTurn


@dataclass(frozen=True)
class Remember:
    """The remember stage of one request: its ``memory``, the ``digests`` of the
    conversation it continues (:attr:`.restore.Restored.digests`), and for a Responses
    answer the ``body`` as the client sent it and the ``links`` its
    :class:`~.response_store.History` found."""

    memory: ReasoningMemory
    digests: Digests
    body: Any = None
    links: list[str] = field(default_factory=list)

    async def answer(
        self, calls: Mapping[str, ModelCall], response: dict[str, Any] | None = None
    ) -> Written:
        """Keep what the model wrote (``calls``) and, for a Responses request, the turn
        ``response`` ends (unless the request said ``store: false``)."""
        body = self.body
        turn: dict[str, str] = {}
        if response is not None and isinstance(body, dict) and body.get("store") is not False:
            given = body.get("input")
            if isinstance(given, str):  # one user message
                given = [{"type": "message", "role": "user", "content": given}]
            items = list(given) if isinstance(given, list) else []
            stored = StoredTurn(self.links, [*items, *response["output"]])
            turn[KEY_PREFIX + response["id"]] = stored.dumps()
        return await self.memory.remember(calls, self.digests, turn)
