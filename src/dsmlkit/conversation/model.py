"""The conversation's typed values: messages, their parts, tools, the tool choice.

Every API reader builds these; the renderer and the server read them. They are checked
when made (:mod:`dsmlkit.conversation.readers`, :mod:`dsmlkit.conversation.normalize`):
what holds one needs no further checks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

Role = Literal["system", "developer", "user", "assistant", "tool", "latest_reminder"]
ROLES: tuple[Role, ...] = ("system", "developer", "user", "assistant", "tool", "latest_reminder")

#: Characters a tool name may hold (it is written into ``name="…"`` in DSML).
TOOL_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


# One encoder for every call: json.dumps builds a new one each time it gets options.
_JSON = json.JSONEncoder(ensure_ascii=False)
# The C encoder json.dumps runs, made once. Without the circular-reference check it can be
# reused; a circular value recurses until RecursionError, and then _JSON reports it as
# json.dumps does. None where the C accelerator is missing.
_C_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)
_ENCODE = (
    _C_ENCODER(
        None, _JSON.default, json.encoder.encode_basestring, None, ": ", ", ", False, False, True
    )
    if _C_ENCODER is not None
    else None
)


def to_json(value: Any) -> str:
    """JSON as the reference encoders write it: ``json.dumps(value, ensure_ascii=False)``."""
    kind = value.__class__
    if kind is int:  # what json.dumps writes for the usual scalars
        return int.__repr__(value)
    if kind is bool:
        return "true" if value else "false"
    if value is None:
        return "null"
    if _ENCODE is None:
        return _JSON.encode(value)
    try:
        return "".join(_ENCODE(value, 0))
    except RecursionError:
        return _JSON.encode(value)


@dataclass(frozen=True)
class Tool:
    """A tool definition; ``function`` is the object the tools section shows as JSON.

    ``param`` is where the request names the tool (for errors about it).
    """

    name: str
    function: Mapping[str, Any]
    deferred: bool
    param: str = "tools"

    def schema_line(self) -> str:
        """The tool's line in the tools section: ``json.dumps`` of the function object."""
        return to_json(dict(self.function))

    def to_chat(self) -> dict[str, Any]:
        """The tool in OpenAI chat form (``defer_loading`` beside ``function``)."""
        chat: dict[str, Any] = {"type": "function", "function": dict(self.function)}
        if self.deferred:
            chat["defer_loading"] = True
        return chat


@dataclass(frozen=True)
class HistoryCall:
    """A tool call in an earlier assistant turn; ``arguments`` is always an object.

    ``arguments_text`` is the request's JSON text that ``arguments`` was read from (by
    :func:`history_arguments`), when the request gave text: the same text always gives the
    same arguments, so the renderer reuses what it wrote for it before.
    """

    id: str | None
    name: str
    arguments: Mapping[str, Any]
    arguments_text: str | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class TextPart:
    text: str


@dataclass(frozen=True)
class ImagePart:
    """An image; the prompt holds a placeholder token, the pixels travel separately.

    ``param`` is where the request gives it (``messages[2].content[1]``), for errors."""

    url: str | None = None
    param: str = field(default="", compare=False)


@dataclass(frozen=True)
class ToolReferencePart:
    """A pointer to a tool by name (Anthropic tool search ``tool_reference``)."""

    name: str


@dataclass(frozen=True)
class RawBlockPart:
    """A content block of an assistant turn that nothing here reads (the blocks a hosted
    endpoint's server tools returned: ``server_tool_use``, ``web_search_tool_result`` …),
    the parsed JSON as the client sent it, never changed, in its place among the turn's
    text. Only an Anthropic Messages upstream gets it back
    (:mod:`dsmlkit.api.anthropic_upstream`); the prompt and the chat form leave it out
    (the reader notes each one). ``param`` is where the request gives it."""

    block: Mapping[str, Any]
    param: str = field(default="", compare=False)


Part: TypeAlias = TextPart | ImagePart | ToolReferencePart | RawBlockPart


@dataclass(slots=True)
class Message:
    """One checked message; ``param`` is how errors and notes name it (``messages[3]``).

    Treat it as read-only. It is not a frozen dataclass only because those initialise
    several times slower, and a long agent history holds thousands of messages.
    ``plain`` records that the content was one string (kept so in the chat form).
    ``prefix`` marks a final assistant message the model is to continue (chat prefix
    completion). ``id_param`` is where the request names a tool result's call (default
    ``param.tool_call_id``). ``reasoning_trusted`` is false when the reasoning came in a
    form the reader was asked to verify and could not (an Anthropic thinking block without
    a valid signature, a sealed Responses token that did not open); ``reasoning_sealed``
    when it came sealed and opened (a client that sent a token need not be shown its text).
    ``reasoning_signature``: the upstream's own signature of the reasoning, put back by the
    gateway for an Anthropic upstream (never read from a request).
    ``passthrough``: the fields of an assistant message that nothing here reads (the blocks
    a hosted endpoint's server tools returned, which go back to it unchanged), as sent.
    """

    param: str
    role: Role
    parts: tuple[Part, ...] = ()
    reasoning: str | None = None
    tool_calls: tuple[HistoryCall, ...] = ()
    tool_call_id: str | None = None
    is_error: bool = False
    tools: tuple[Tool, ...] = ()
    response_format: Mapping[str, Any] | None = None
    task: str | None = None
    wo_eos: bool = False
    name: str | None = None
    plain: bool = False
    prefix: bool = False
    id_param: str | None = None
    reasoning_trusted: bool = True
    reasoning_sealed: bool = False
    reasoning_signature: str | None = None
    passthrough: Mapping[str, Any] | None = None

    def text(self) -> str:
        """The text parts joined with blank lines (for roles that hold text only)."""
        return "\n\n".join(part.text for part in self.parts if isinstance(part, TextPart))

    def _has_content(self) -> bool:
        """Whether any part has a place in the chat form (raw blocks have none)."""
        return any(not isinstance(part, RawBlockPart) for part in self.parts)

    def to_chat(self) -> dict[str, Any]:
        """The message in canonical OpenAI chat form."""
        chat: dict[str, Any] = {"role": self.role}
        if self.name is not None:
            chat["name"] = self.name
        if self.role == "assistant":
            chat["content"] = self.text() if self._has_content() else None
            if self.reasoning is not None:
                chat["reasoning_content"] = self.reasoning
            if self.tool_calls:
                chat["tool_calls"] = [_call_to_chat(call) for call in self.tool_calls]
            if self.prefix:
                chat["prefix"] = True
            if self.passthrough:
                chat.update(self.passthrough)
        elif self.role == "tool":
            chat["tool_call_id"] = self.tool_call_id
            chat["content"] = self.text() if self.plain else _parts_to_chat(self.parts) or ""
            if self.is_error:
                chat["is_error"] = True
        else:
            chat["content"] = _collapse(self.parts)
        if self.tools:
            chat["tools"] = [tool.to_chat() for tool in self.tools]
        if self.response_format is not None:
            chat["response_format"] = dict(self.response_format)
        if self.task is not None:
            chat["task"] = self.task
        if self.wo_eos:
            chat["wo_eos"] = True
        return chat


def _call_to_chat(call: HistoryCall) -> dict[str, Any]:
    function = {"name": call.name, "arguments": to_json(dict(call.arguments))}
    return {"id": call.id, "type": "function", "function": function}


def _part_to_chat(part: Part) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImagePart):
        return {"type": "image_url", "image_url": {"url": part.url}}
    if isinstance(part, RawBlockPart):
        return dict(part.block)
    return {"type": "tool_reference", "name": part.name}


def _parts_to_chat(parts: Sequence[Part]) -> list[dict[str, Any]]:
    return [_part_to_chat(part) for part in parts]


def _collapse(parts: Sequence[Part]) -> str | list[dict[str, Any]]:
    """One text part becomes its string, none the empty string; else a list of parts."""
    if not parts:
        return ""
    if len(parts) == 1 and isinstance(parts[0], TextPart):
        return parts[0].text
    return _parts_to_chat(parts)


ChoiceMode = Literal["auto", "none", "required"]
CHOICE_MODES: dict[str, ChoiceMode] = {"auto": "auto", "none": "none", "required": "required"}


@dataclass(frozen=True)
class ToolChoice:
    """Whether the model may (``auto``), must (``required``) or must not (``none``) call
    tools; ``name`` is the one tool a named choice requires (mode ``required``).

    ``param`` is where the request gives it (for errors about it).
    """

    mode: ChoiceMode = "auto"
    name: str | None = None
    param: str = "tool_choice"

    def to_chat(self) -> str | dict[str, Any]:
        """OpenAI's spelling: ``"auto"`` … or ``{"type": "function", "function": {"name"}}``."""
        if self.name is not None:
            return {"type": "function", "function": {"name": self.name}}
        return self.mode


@dataclass(frozen=True)
class Conversation:
    """A checked conversation: messages, the request's tools and response format, notes.

    ``tools``, ``tool_choice`` and ``response_format`` are the request-level ones;
    message-level tools and formats stay on their (system or developer) message. ``notes``
    are things worth telling the caller that were read in a way they might not expect.
    """

    messages: tuple[Message, ...]
    tools: tuple[Tool, ...] = ()
    response_format: Mapping[str, Any] | None = None
    notes: tuple[str, ...] = ()
    tool_choice: ToolChoice = ToolChoice("none")

    def all_tools(self) -> tuple[Tool, ...]:
        """Every tool the conversation defines: the request's, then message-level ones."""
        return self.tools + tuple(tool for message in self.messages for tool in message.tools)

    def chat_messages(self) -> list[dict[str, Any]]:
        """The messages in canonical OpenAI chat form (what ``dsmlkit convert`` prints)."""
        return [message.to_chat() for message in self.messages]

    def chat_tools(self) -> list[dict[str, Any]]:
        """The request's tools in OpenAI chat form."""
        return [tool.to_chat() for tool in self.tools]

    @property
    def prefix(self) -> Message | None:
        """The final assistant message marked ``prefix`` (chat prefix completion): the
        prompt ends with its text and the model continues it."""
        last = self.messages[-1]
        return last if last.prefix else None
