"""The restore stage: a request's stored state put back before it is answered.

A Responses request gets the conversation its ``previous_response_id`` names
(:mod:`.response_store`); every request gets the reasoning its client dropped and the
model's own words in the turns the gateway answered (:mod:`.reasoning_store`,
:mod:`.model_turns`).
"""

from __future__ import annotations

from typing import Any

from dsmlkit.api.adapters import ApiAdapter
from dsmlkit.server.reasoning_store import ReasoningMemory, Restored
from dsmlkit.server.response_store import with_history
from dsmlkit.server.sealing import KeyRing


async def restore_history(
    memory: ReasoningMemory, keys: KeyRing, adapter: ApiAdapter, body: Any
) -> Restored:
    """``body`` with its history, dropped reasoning and the model's own words put back
    (before it is read), the same for the gateway and the render routes."""
    if adapter.keeps_responses:
        return await with_history(memory, keys, body)
    return await memory.restore(adapter.name, body)
