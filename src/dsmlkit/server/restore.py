"""The restore stage: a request's stored state put back on its typed conversation.

:func:`restore` works on the typed :class:`~dsmlkit.conversation.Conversation`,
whichever API it came in (a Responses conversation includes the stored history its
``previous_response_id`` names, read with it: :func:`.response_store.stored_history`):
every assistant turn with calls the gateway issued gets

* the reasoning the gateway remembered for them when the turn has none, or only reasoning
  the reader could not verify (``reasoning_trusted`` false: an Anthropic thinking block
  without the gateway's signature, a sealed Responses token that does not open here),
  marked ``reasoning_sealed`` when the answer did not show it to the client (so that the
  render routes do not show it either);
* the model's own words where the client did not really change them
  (:func:`.model_turns.reconcile`);
* the upstream's own signature of the reasoning (``--upstream-api messages``: an
  Anthropic thinking block's), when the turn's reasoning is the one it signed;
* the upstream's own ids of the calls whose client got another id, in the calls and in
  the tool results that answer them (:func:`.call_ids.with_upstream_ids`).

A store that cannot be reached restores nothing: the request is answered as sent, and the
error and what the read noted come back in the :class:`Restored` result (see
:mod:`.reasoning_store`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

from dsmlkit.api import ChatRequest
from dsmlkit.server.call_ids import with_upstream_ids
from dsmlkit.server.model_turns import ModelCall, restored_turns
from dsmlkit.server.reasoning_store import Digests, ReasoningMemory
from dsmlkit.server.reqlog import Note


@dataclass(frozen=True)
class Restored:
    """A typed request with its state put back, and what was done."""

    req: ChatRequest
    #: The digests of the conversation as sent, for short call ids (the store's keys are
    #: the client's ids; the restored request may carry the upstream's); the remember
    #: stage keys the answer's calls with them.
    digests: Digests
    #: The call ids of the conversation as sent: a new call may not take one of them.
    call_ids: frozenset[str] = frozenset()
    #: Assistant turns whose dropped reasoning was put back.
    reasoning: int = 0
    #: What the client really changed in the model's turns (used as sent): ``call``,
    #: ``content``, ``reasoning``.
    changed: Counter[str] = field(default_factory=Counter)
    #: Why the store could not be used, if it could not.
    error: str | None = None
    #: Whether anything was put back (``req`` is not the request as read).
    put_back: bool = False
    #: What the store read noted (an outage, corrupt entries), for the request's log.
    notes: tuple[Note, ...] = ()


async def restore(memory: ReasoningMemory, req: ChatRequest) -> Restored:
    """``req`` with dropped reasoning and the model's own words put back (see the module
    docstring); ``req`` itself is not changed."""
    messages = req.conversation.messages
    digests = Digests(messages)
    turns = [i for i, m in enumerate(messages) if m.role == "assistant" and m.tool_calls]
    keys = {
        (i, call.id): key
        for i in turns
        for call in messages[i].tool_calls
        if call.id is not None and (key := digests.key(call.id, i)) is not None
    }
    call_ids = frozenset(call_id for _, call_id in keys)
    read = await memory.read(set(keys.values()), ModelCall.loads)
    found = {name: read.values[key] for name, key in keys.items() if key in read.values}
    if not found:
        return Restored(req, digests, call_ids, error=read.error, notes=read.notes)
    calls = {
        i: {
            call.id: found[i, call.id]
            for call in messages[i].tool_calls
            if call.id is not None and (i, call.id) in found
        }
        for i in turns
    }
    put_back = restored_turns(messages, calls)
    upstream = {
        call_id: call.upstream_id
        for (_, call_id), call in found.items()
        if call.upstream_id is not None
    }
    conversation = replace(
        req.conversation, messages=with_upstream_ids(put_back.messages, upstream)
    )
    return Restored(
        replace(req, conversation=conversation),
        digests,
        call_ids,
        put_back.reasoning,
        put_back.changed,
        read.error,
        True,
        read.notes,
    )
