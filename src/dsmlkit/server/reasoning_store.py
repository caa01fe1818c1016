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
failure is logged and ``/ready`` reports the store (``check``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from dsmlkit.server.model_turns import Digests, ModelCall
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

    def seal(self, text: str, model: str) -> str:
        """:meth:`sign` (the :class:`~dsmlkit.api.seal.Sealer` protocol)."""
        return self.sign(text, model)

    def open(self, token: str, model: str) -> str:
        """The thinking text a signature of ours holds for ``model``; raises ``SealError``
        (the Messages reader compares it with the block's text)."""
        return self.ring.open(token, model, "thinking")


class ReasoningMemory:
    """What the model wrote, reasoning included, by call id in a :class:`StateStore`; see the
    module docstring (and :mod:`.model_turns`) for the rules."""

    def __init__(self, store: StateStore, signer: ThinkingSigner, ttl: float = DEFAULT_TTL) -> None:
        self.store = store
        self.signer = signer
        self.ttl = ttl
        self._failing = False

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
            return self._failed(exc)
        self._recovered()
        return None

    async def calls(self, keys: dict[Any, str]) -> tuple[dict[Any, ModelCall], str | None]:
        """``({name: stored call} for the ``{name: key}`` the store knows, store error)``:
        what the model wrote, for the calls of a history (see :mod:`.restore`)."""
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
