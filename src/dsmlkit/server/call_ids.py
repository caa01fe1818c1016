"""Tool-call ids: unique within a conversation for the client, the upstream's own upstream.

Behind ``--upstream-api chat`` the endpoint names the calls it makes, and some endpoints
number them per answer (``call_0`` in every answer). A client that keys calls by id (Claude
Code) drops a call whose id it has seen, so the client never gets such an id:
:class:`AnswerIds` keeps an upstream id that is *unique-looking* (:func:`_unique_looking`)
and new to the conversation, and gives any other call a fresh id in the API's own style
(``call_…``, ``toolu_…``, 24 random hex digits). The upstream's id of such a call is kept
with what the model wrote in that answer (:class:`~.model_turns.ModelCall`, in the state
store under the client's id); when the client sends the conversation back,
:func:`with_upstream_ids` puts the upstream's ids back into the assistant turns and the
tool results that answer them, so the upstream sees the history with the ids it issued.
Without the entry (store lost, entry expired) the upstream gets the client's id, the same
in the call and in its result.

Completions mode needs none of this: the parser names every call with the API's prefix and
96 random bits.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

from dsmlkit.conversation.model import Message
from dsmlkit.server.model_turns import MIN_CALL_ID_LENGTH

#: The characters of an id every API takes as it is (Anthropic's ``tool_use`` id pattern).
_ID_CHARACTERS = re.compile(r"[A-Za-z0-9_-]+")


def _unique_looking(call_id: str) -> bool:
    """Whether an upstream's call id can go to a client as it is: 16 characters or more
    (shorter ids, ``call_0``, are numbers that repeat) of letters, digits, ``_`` and ``-``
    (``functions.bash:0`` is neither)."""
    return len(call_id) >= MIN_CALL_ID_LENGTH and _ID_CHARACTERS.fullmatch(call_id) is not None


class AnswerIds:
    """The ids of one answer's upstream calls as the client sees them.

    ``mint`` makes a fresh id in the API's style; ``taken`` are the call ids of the
    conversation as the client sent it. ``upstream`` maps each minted id to the upstream's
    own id of that call (a call the upstream gave no id has none).
    """

    def __init__(self, mint: Callable[[], str], taken: Iterable[str]) -> None:
        self._mint = mint
        self._taken = set(taken)
        self.upstream: dict[str, str] = {}

    def client_id(self, upstream_id: str) -> str:
        """The client's id for a call the upstream named ``upstream_id`` (``""``: none):
        the upstream's own when it is unique-looking and not taken, else a fresh one."""
        if _unique_looking(upstream_id) and upstream_id not in self._taken:
            client = upstream_id
        else:
            client = self._mint()
            if upstream_id:
                self.upstream[client] = upstream_id
        self._taken.update((upstream_id, client))
        return client


def with_upstream_ids(
    messages: Sequence[Message], upstream: Mapping[str, str]
) -> tuple[Message, ...]:
    """``messages`` with every call id that ``upstream`` maps (client id → the upstream's
    id) replaced: in the assistant turns' calls and in the tool results that answer them."""
    if not upstream:
        return tuple(messages)
    return tuple(_with_upstream_ids(message, upstream) for message in messages)


def _with_upstream_ids(message: Message, upstream: Mapping[str, str]) -> Message:
    answered = upstream.get(message.tool_call_id or "")
    if answered is not None:
        return replace(message, tool_call_id=answered)
    if not any(call.id in upstream for call in message.tool_calls):
        return message
    calls = tuple(
        replace(call, id=upstream.get(call.id or "", call.id)) for call in message.tool_calls
    )
    return replace(message, tool_calls=calls)
