"""The reasoning round trip: reasoning the gateway returned comes back when a client drops it.

Agent harnesses often send an assistant tool-call turn back without its reasoning
(``reasoning_content`` left out in OpenAI Chat, the ``thinking`` block left out in
Anthropic Messages). DeepSeek's V4 templates keep every reasoning of a tool loop in the
prompt, so the engine would see an empty think block in mid loop. The gateway therefore
remembers, for every call id it issued, the reasoning of that answer
(:meth:`ReasoningMemory.remember`), and puts it back into the typed request's history
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

Store failures never fail a request: the answer is served without restoration, the
failure is logged and ``/ready`` reports the store (``check``). Reads and writes are
logged apart (:class:`StoreOutage`), since a full store refuses writes and still reads. A
stored value that is not a call's is a miss (:func:`.state_store.get_decoded`).

Reasoning the client was not shown (``thinking.display: "omitted"``) is stored marked so
(``ModelCall.reasoning_hidden``): restored, it is rendered upstream but, like reasoning
that came sealed, never shown by the render routes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from dsmlkit.server.model_turns import Digests, ModelCall
from dsmlkit.server.reqlog import log_event
from dsmlkit.server.sealing import KeyRing
from dsmlkit.server.state_store import (
    DEFAULT_TTL,
    StateStore,
    StateStoreUnavailable,
    get_decoded,
)

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

    def seal(self, text: str, model: str) -> str:
        """:meth:`sign` (the :class:`~dsmlkit.api.seal.Sealer` protocol)."""
        return self.sign(text, model)

    def open(self, token: str, model: str) -> str:
        """The thinking text a signature of ours holds for ``model``; raises ``SealError``
        (the Messages reader compares it with the block's text)."""
        return self.ring.open(token, model, "thinking")


class StoreOutage:
    """Whether one kind of store operation (``read`` or ``write``) is failing: a log line
    when it starts failing and one when it works again, not one per request."""

    def __init__(self, store: StateStore, operation: str, effect: str) -> None:
        self.store = store
        self.operation = operation
        self.effect = effect
        self.failing = False

    def failed(self, exc: StateStoreUnavailable) -> str:
        """Note a failure (logged if it is the first); its message, for the request log."""
        if not self.failing:
            self.failing = True
            log_event(
                LOGGER,
                logging.WARNING,
                f"state_store_unavailable: {self.operation}: {exc.message}",
                {
                    "event": "state_store_unavailable",
                    "store": self.store.description,
                    "operation": self.operation,
                    "error": exc.message,
                    "effect": self.effect,
                },
            )
        return exc.message

    def worked(self) -> None:
        """Note a success (logged if the operation was failing)."""
        if self.failing:
            self.failing = False
            log_event(
                LOGGER,
                logging.WARNING,
                f"state_store_recovered: {self.operation}",
                {
                    "event": "state_store_recovered",
                    "store": self.store.description,
                    "operation": self.operation,
                },
            )


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

    async def remember(self, calls: Mapping[str, ModelCall], digests: Digests) -> str | None:
        """Store what the model wrote in one answer under each of its call ids (short ids
        with the ``digests`` of the conversation the answer continues); returns the store
        error, if any."""
        items = {}
        for call_id, call in calls.items():
            key = digests.key(call_id)
            if key is not None:
                items[key] = call.dumps()
        if not items:
            return None
        try:
            await self.store.put_many(items, self.ttl)
        except StateStoreUnavailable as exc:
            return self.writes.failed(exc)
        self.writes.worked()
        return None

    async def calls(self, keys: dict[Any, str]) -> tuple[dict[Any, ModelCall], str | None]:
        """``({name: stored call} for the ``{name: key}`` the store knows, store error)``:
        what the model wrote, for the calls of a history (see :mod:`.restore`)."""
        if not keys:
            return {}, None
        try:
            values = await get_decoded(self.store, set(keys.values()), ModelCall.loads)
        except StateStoreUnavailable as exc:
            return {}, self.reads.failed(exc)
        self.reads.worked()
        return {name: values[key] for name, key in keys.items() if key in values}, None
