"""Finishing a conversation the readers read: tool results matched to their calls, tool
names unique, the tool choice checked, and (for the API readers) consecutive assistant
messages merged into one turn."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from dsmlkit.conversation.model import Conversation, HistoryCall, Message, Tool, ToolChoice
from dsmlkit.errors import InvalidRequest


def finish_conversation(
    messages: Sequence[Message],
    tools: Sequence[Tool],
    response_format: Mapping[str, Any] | None,
    notes: Sequence[str],
    tool_choice: ToolChoice | None = None,
    *,
    merge_assistants: bool = True,
) -> Conversation:
    """Finish a conversation: match tool results, check the tool choice (None: ``auto``
    with tools, else ``none``) and, with ``merge_assistants``, merge consecutive assistant
    messages.

    The API readers merge: a client may split one turn over several messages (Codex's chat
    mode sends the text after the calls as a second message). The canonical form does not:
    the reference encoders close each assistant message with its own EOS. A tool message
    answers a call of the latest run of assistant messages: the one its ``tool_call_id``
    names, else the next unanswered one (its id is filled in).
    """
    if not messages:
        raise InvalidRequest("expected a non-empty list of messages", "messages")
    unique_tools(tuple(tools) + tuple(t for m in messages for t in m.tools))
    first = messages[0]
    if response_format is not None and first.role == "system" and first.response_format:
        raise InvalidRequest(
            "response_format is given both on the request and on messages[0]; give it once",
            "response_format",
        )
    for message in messages[:-1]:
        if message.prefix:
            raise InvalidRequest(
                "prefix (chat prefix completion) belongs on the final assistant message only",
                f"{message.param}.prefix",
            )
    choice = _checked_choice(tool_choice, tools)
    turns = _merge_assistants(messages) if merge_assistants else messages
    return Conversation(_answer_calls(turns), tuple(tools), response_format, tuple(notes), choice)


def _checked_choice(choice: ToolChoice | None, tools: Sequence[Tool]) -> ToolChoice:
    if choice is None:
        return ToolChoice("auto" if tools else "none")
    if choice.name is not None and choice.name not in {tool.name for tool in tools}:
        raise InvalidRequest(f"names the tool {choice.name!r}, which is not in tools", choice.param)
    if choice.mode == "required" and not tools:
        raise InvalidRequest("requires a call but the request has no tools", choice.param)
    return choice


def unique_tools(tools: Sequence[Tool]) -> tuple[Tool, ...]:
    """``tools``, checked to have distinct names (calls to them would be ambiguous)."""
    seen: set[str] = set()
    for tool in tools:
        if tool.name in seen:
            raise InvalidRequest(f"two tools are named {tool.name!r}", tool.param)
        seen.add(tool.name)
    return tuple(tools)


def as_instruction(message: Message) -> Message:
    """An OpenAI ``developer`` message as the system message it is, at its place.

    OpenAI's developer role holds the instructions of newer clients (Codex sends its
    permissions and environment so). DeepSeek's own ``developer`` role is a user turn that
    thinking mode drops before the last user turn, so the OpenAI readers give the model
    that text as a system message, which every mode keeps. Other messages are returned as
    they are.
    """
    if message.role != "developer":
        return message
    if message.task is not None:
        raise InvalidRequest(
            "here a developer message is a system instruction, which takes no task; "
            "put the task on a user message",
            f"{message.param}.task",
        )
    return replace(message, role="system")


def _merge_assistants(messages: Sequence[Message]) -> list[Message]:
    merged: list[Message] = []
    for message in messages:
        previous = merged[-1] if merged else None
        if message.role != "assistant" or previous is None or previous.role != "assistant":
            merged.append(message)
            continue
        reasoning = [text for text in (previous.reasoning, message.reasoning) if text]
        merged[-1] = replace(
            previous,
            parts=previous.parts + message.parts,
            reasoning="".join(reasoning) if reasoning else previous.reasoning or message.reasoning,
            tool_calls=previous.tool_calls + message.tool_calls,
            wo_eos=message.wo_eos,
            prefix=message.prefix,
            reasoning_trusted=previous.reasoning_trusted and message.reasoning_trusted,
            reasoning_sealed=previous.reasoning_sealed or message.reasoning_sealed,
            passthrough={**(previous.passthrough or {}), **(message.passthrough or {})} or None,
        )
    return merged


def _answer_calls(messages: Sequence[Message]) -> tuple[Message, ...]:
    """Match every tool message to a call of the latest run of assistant messages."""
    open_calls = _OpenCalls(())
    result: list[Message] = []
    for message in messages:
        if message.role == "assistant":
            run = open_calls.calls if result and result[-1].role == "assistant" else ()
            open_calls = _OpenCalls((*run, *message.tool_calls))
        elif message.role == "tool":
            message = open_calls.answer(message)
        result.append(message)
    return tuple(result)


class _OpenCalls:
    """The calls of one assistant turn and which of them still wait for a result.

    Each answer costs the same however many calls the turn has; results that come in the
    order of their calls need no table of ids (it is made when one does not).
    """

    def __init__(self, calls: Sequence[HistoryCall]) -> None:
        self.calls = calls
        self.waiting = set(range(len(calls)))  # positions of unanswered calls
        self.first_waiting = 0  # no position before it is waiting
        self.answered: set[str] = set()
        self._position_of: dict[str, int] | None = None  # an id → its first call's position

    def _position(self, call_id: str) -> int | None:
        if self._position_of is None:
            self._position_of = {}
            for i, call in enumerate(self.calls):
                if call.id is not None:
                    self._position_of.setdefault(call.id, i)
        return self._position_of.get(call_id)

    def answer(self, message: Message) -> Message:
        """``message`` (a tool result) with the id of the call it answers, which is done."""
        call_id = message.tool_call_id
        if call_id is not None and call_id in self.answered:
            raise InvalidRequest(f"call {call_id!r} already has a result", _id_param(message))
        if not self.waiting:
            if call_id is not None:
                raise InvalidRequest(
                    f"tool_call_id {call_id!r} answers no tool call of the preceding assistant "
                    "message",
                    _id_param(message),
                )
            problem = "more tool results than" if self.calls else "a tool result without"
            raise InvalidRequest(
                f"{problem} tool calls in the preceding assistant message", message.param
            )
        while self.first_waiting not in self.waiting:
            self.first_waiting += 1
        position = self.first_waiting
        if call_id is not None and self.calls[position].id != call_id:
            # A call leaves the waiting ones only when answered, and its id with it: an id
            # not answered yet still has its first call waiting.
            found = self._position(call_id)
            if found is not None:
                position = found
            elif any(known.id for known in self.calls):  # calls without ids take any result
                ids = ", ".join(known.id for known in self.calls if known.id)
                raise InvalidRequest(
                    f"tool_call_id {call_id!r} matches no call of the preceding assistant "
                    f"message (its calls: {ids})",
                    _id_param(message),
                )
        self.waiting.remove(position)
        call = self.calls[position]
        if call.id is not None:
            self.answered.add(call.id)
        if call_id is None and call.id is not None:
            return replace(message, tool_call_id=call.id)
        return message


def _id_param(message: Message) -> str:
    """Where the request names the call a tool result answers."""
    return message.id_param or f"{message.param}.tool_call_id"
