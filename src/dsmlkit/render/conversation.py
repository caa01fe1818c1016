"""The typed conversation every API reader produces and the renderer and parser consume.

A :class:`Conversation` holds checked :class:`Message` values, the request's tools and
response format and the notes taken while reading. Every rule about a conversation lives
here once, whichever API it came from:

* :func:`read_messages` reads the canonical form (``docs/rendering.md``, The conversation:
  OpenAI chat messages with ``reasoning_content`` (alias ``reasoning``), tool ``is_error``,
  ``tool_reference`` parts, ``defer_loading`` tools, ``latest_reminder`` and the reference
  encoders' message-level ``tools`` / ``response_format`` / ``task`` / ``mask`` /
  ``wo_eos``); OpenAI Chat Completions bodies are that form, except that their developer
  messages are OpenAI's (:func:`as_instruction`).
* Readers of other shapes (Anthropic Messages) build :class:`Message` values with the
  same helpers (:func:`tool`, :func:`tool_name`, :func:`history_arguments`,
  :func:`tool_reference`, …) on the fields of their own request.
* :func:`conversation` finishes either: tool results are matched to the calls they
  answer, tool names must be unique, and for the API readers consecutive assistant
  messages become one turn (the canonical form keeps them apart, as the reference does).

Every reader here reads :class:`~dsmlkit.fields.Field` values (a value and its path in
the request), as the API readers do: every mistake raises
:class:`~dsmlkit.errors.InvalidRequest` naming the field; what comes out is typed and needs
no further checks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeAlias

from dsmlkit.errors import InvalidRequest
from dsmlkit.fields import MISSING, Field
from dsmlkit.render.cache import RenderCache
from dsmlkit.render.templates import TASK_TOKENS

Role = Literal["system", "developer", "user", "assistant", "tool", "latest_reminder"]
ROLES: tuple[Role, ...] = ("system", "developer", "user", "assistant", "tool", "latest_reminder")

#: Characters a tool name may hold (it is written into ``name="…"`` in DSML).
TOOL_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,128}")

#: Content part types each role accepts.
_PART_TYPES: dict[str, tuple[str, ...]] = {
    "system": ("text",),
    "developer": ("text",),
    "latest_reminder": ("text",),
    "assistant": ("text", "refusal"),
    "user": ("text", "image_url", "image"),
    "tool": ("text", "image_url", "image", "tool_reference"),
}
_IMAGE_TYPES = ("image_url", "image")

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


Part: TypeAlias = TextPart | ImagePart | ToolReferencePart


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

    def text(self) -> str:
        """The text parts joined with blank lines (for roles that hold text only)."""
        return "\n\n".join(part.text for part in self.parts if isinstance(part, TextPart))

    def to_chat(self) -> dict[str, Any]:
        """The message in canonical OpenAI chat form."""
        chat: dict[str, Any] = {"role": self.role}
        if self.name is not None:
            chat["name"] = self.name
        if self.role == "assistant":
            chat["content"] = self.text() if self.parts else None
            if self.reasoning is not None:
                chat["reasoning_content"] = self.reasoning
            if self.tool_calls:
                chat["tool_calls"] = [_call_to_chat(call) for call in self.tool_calls]
            if self.prefix:
                chat["prefix"] = True
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


def build_conversation(
    messages: Any,
    tools: Any = None,
    response_format: Any = None,
    cache: RenderCache | None = None,
) -> Conversation:
    """Read a conversation in canonical form (an OpenAI chat body's ``messages``, ``tools``
    and ``response_format``) and check it; ``cache`` keeps the messages read."""
    notes: list[str] = []
    return conversation(
        read_messages(Field(messages, "messages"), notes, cache),
        read_tools(Field(tools, "tools")),
        read_response_format(Field(response_format, "response_format")),
        notes,
        merge_assistants=False,
    )


def conversation(
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


# --- the canonical form --------------------------------------------------------------


def read_messages(
    messages: Field, notes: list[str], cache: RenderCache | None = None
) -> list[Message]:
    """Messages in canonical form, checked; notes are appended to ``notes``.

    A message of a usual shape (see :func:`_message_key`) is built straight from what that
    shape holds; any other goes through the full reader, which names what is wrong. With
    a ``cache``, a usual message that an earlier request sent at the same place is the
    message read then, and what is read is kept.
    """
    items = messages.value
    if not isinstance(items, list) or not items:
        raise messages.error("expected a non-empty list of messages")
    read = []
    path = messages.path
    for index, raw in enumerate(items):
        where = f"{path}[{index}]"
        shape = _message_key(raw, where)
        if shape is None:
            read.append(_message(Field(raw, where), notes))
            continue
        key, chars = shape
        message = cache.message(key) if cache is not None else None
        if message is None:
            noted = len(notes)
            message = _usual_message(key, notes)
            if cache is not None and len(notes) == noted:
                cache.keep_message(key, chars, message)
        read.append(message)
    return read


def _message_key(raw: Any, where: str) -> tuple[tuple[Any, ...], int] | None:
    """Everything a message of a usual shape is read from, as strings (type-exact, so
    equal keys read alike), after its place and role, in one flat tuple (an assistant
    message: content, reasoning, its number of calls, then each call's id, name and
    arguments text); and how many characters those strings hold. None for any other
    shape, and for one the full reader would refuse (a bad tool name)."""
    if raw.__class__ is not dict:
        return None
    role = raw.get("role")
    content = raw.get("content")
    if role == "tool":
        call_id = raw.get("tool_call_id")
        if len(raw) == 3 and content.__class__ is str and call_id.__class__ is str:
            return (where, role, call_id, content), len(call_id) + len(content)
        return None
    if role in ("user", "system"):
        if len(raw) == 2 and content.__class__ is str:
            return (where, role, content), len(content)
        return None
    if role != "assistant":
        return None
    reasoning = raw.get("reasoning_content")
    calls = raw.get("tool_calls")
    given = 1 + ("content" in raw) + ("reasoning_content" in raw) + ("tool_calls" in raw)
    if len(raw) != given:
        return None
    chars = 0
    for text in (content, reasoning):
        if text is not None:
            if text.__class__ is not str:
                return None
            chars += len(text)
    if calls is None:
        return (where, role, content, reasoning, None), chars
    if calls.__class__ is not list:
        return None
    key: list[Any] = [where, role, content, reasoning, len(calls)]
    for call in calls:
        # Three members, each of its type: exactly id, type and function (and so for the
        # function's two).
        if call.__class__ is not dict or len(call) != 3 or call.get("type") != "function":
            return None
        function = call.get("function")
        if function.__class__ is not dict or len(function) != 2:
            return None
        call_id, name, arguments = call.get("id"), function.get("name"), function.get("arguments")
        if call_id.__class__ is not str or arguments.__class__ is not str:
            return None
        if name.__class__ is not str or TOOL_NAME.fullmatch(name) is None:
            return None
        key += (call_id, name, arguments)
        chars += len(call_id) + len(name) + len(arguments)
    return tuple(key), chars


def _usual_message(key: tuple[Any, ...], notes: list[str]) -> Message:
    """The message a key of :func:`_message_key` was read from (nothing in it is wrong but
    what only the whole message shows: two calls with one id)."""
    where, role = key[0], key[1]
    if role == "tool":
        return Message(where, role, (TextPart(key[3]),), tool_call_id=key[2] or None, plain=True)
    if role != "assistant":
        return Message(where, role, (TextPart(key[2]),), plain=True)
    content, reasoning = key[2], key[3]
    calls = []
    for start in range(5, len(key), 3):  # each call: id, name, arguments text
        text = key[start + 2]
        arguments = _arguments(text)
        if arguments is None:
            index = (start - 5) // 3
            path = f"{where}.tool_calls[{index}].function.arguments"
            arguments = _one_parameter(Field(text, path), notes)
        calls.append(HistoryCall(key[start] or None, key[start + 1], arguments, text))
    if len(calls) > 1:
        check_call_ids(calls, Field(None, f"{where}.tool_calls"))
    parts = () if content is None else (TextPart(content),)
    return Message(where, role, parts, reasoning, tuple(calls), plain=content is not None)


#: Message fields most messages leave out; they are read when one is there.
_RARE_FIELDS = frozenset(
    ("tools", "response_format", "task", "prefix", "is_error", "wo_eos", "name")
)


def _message(field: Field, notes: list[str]) -> Message:
    """Any message in canonical form, every field checked."""
    raw = field.value
    if not _is_object(raw):
        raise field.error("expected a message object")
    where = field.path
    role = raw.get("role")
    if role not in ROLES:
        raise field["role"].error(f"unknown role {role!r}; use one of: {', '.join(ROLES)}")
    content = field["content"]
    parts = _content(content, role)
    rare = _RARE_FIELDS.intersection(raw)  # those this message has
    if rare and role not in ("system", "developer"):
        for key in ("tools", "response_format"):
            if raw.get(key) is not None:
                raise field[key].error(
                    f"{key} belongs on a system or developer message (or on the request)"
                )
    if role == "developer" and not any(isinstance(p, TextPart) and p.text for p in parts):
        raise content.error("a developer message needs text content")
    task = raw.get("task") if rare else None
    if task is not None and (
        role not in ("user", "developer") or not isinstance(task, str) or task not in TASK_TOKENS
    ):
        raise field["task"].error(
            f"task must be one of {', '.join(TASK_TOKENS)} on a user or developer message"
        )
    prefix = "prefix" in rare and field["prefix"].flag()
    if prefix and role != "assistant":
        raise field["prefix"].error("prefix belongs on an assistant message")
    reasoning: str | None = None
    tool_calls: tuple[HistoryCall, ...] = ()
    if role == "assistant":
        key = "reasoning_content" if raw.get("reasoning_content") is not None else "reasoning"
        reasoning = field[key].optional_string()
        tool_calls = _history_calls(field["tool_calls"], notes)
    tool_call_id = field["tool_call_id"].optional_string() or None
    plain = isinstance(content.value, str)
    if not rare:
        return Message(where, role, parts, reasoning, tool_calls, tool_call_id, plain=plain)
    return Message(
        where,
        role,
        parts,
        reasoning,
        tool_calls,
        tool_call_id,
        is_error="is_error" in rare and field["is_error"].flag(),
        tools=read_tools(field["tools"]) if "tools" in rare else (),
        response_format=(
            read_response_format(field["response_format"]) if "response_format" in rare else None
        ),
        task=task,
        wo_eos="wo_eos" in rare and field["wo_eos"].flag(),
        name=field["name"].optional_string() if "name" in rare and role != "tool" else None,
        plain=plain,
        prefix=prefix,
    )


def _is_object(value: Any) -> bool:
    """Whether ``value`` is a JSON object (a dict, as JSON gives, asked first: the ABC
    check costs several times more)."""
    return value.__class__ is dict or isinstance(value, Mapping)


def _content(content: Field, role: str) -> tuple[Part, ...]:
    if not content.present:
        return ()
    if isinstance(content.value, str):
        return (TextPart(content.value),)
    if not isinstance(content.value, list):
        raise content.error("content must be a string, null or a list of parts")
    return tuple(_part(part, role) for part in content.array())


def _part(field: Field, role: str) -> Part:
    raw = field.value
    if not _is_object(raw):
        raise field.error("expected a content part object")
    kind = raw.get("type")
    allowed = _PART_TYPES[role]
    if kind not in allowed:
        raise field.error(
            f"unsupported content part type {kind!r} in a {role} message; "
            f"supported: {', '.join(allowed)}"
        )
    if kind in ("text", "refusal"):
        text = field[kind]
        if not isinstance(text.value, str):
            raise text.error(f"a {kind} part needs a string {kind!r}")
        return TextPart(text.value)
    if kind in _IMAGE_TYPES:
        image = raw.get("image_url")
        url = image.get("url") if isinstance(image, Mapping) else None
        return ImagePart(url if isinstance(url, str) else None, field.path)
    return tool_reference(field)


def tool_reference(part: Field) -> ToolReferencePart:
    """A ``tool_reference`` part (an object) from either spelling (``name`` or ``tool_name``)."""
    raw = part.object()
    name = raw.get("tool_name", raw.get("name"))
    if not isinstance(name, str) or not name:
        raise part["name"].error("a tool_reference part needs the tool's 'name'")
    return ToolReferencePart(name)


def _history_calls(field: Field, notes: list[str]) -> tuple[HistoryCall, ...]:
    if not field.present:
        return ()
    if not isinstance(field.value, list):
        raise field.error("tool_calls must be a list")
    calls = []
    for call in field.array():
        raw = call.value
        function = raw.get("function") if _is_object(raw) else None
        if not _is_object(function):
            raise call.error('expected {"type": "function", "function": {"name", "arguments"}}')
        if raw.get("type", "function") != "function":
            raise call["type"].error(f"unsupported tool call type {raw.get('type')!r}")
        function_field = call["function"]
        name = tool_name(function_field["name"])
        arguments = function_field["arguments"]
        read = history_arguments(arguments, notes)
        text = arguments.value if isinstance(arguments.value, str) else None
        calls.append(HistoryCall(call["id"].optional_string() or None, name, read, text))
    return check_call_ids(calls, field)


def check_call_ids(calls: Iterable[HistoryCall], where: Field) -> tuple[HistoryCall, ...]:
    """The calls of one assistant turn (given at ``where``); two with one id could not be
    told apart."""
    result = tuple(calls)
    ids = [call.id for call in result if call.id is not None]
    if len(set(ids)) != len(ids):
        raise where.error("two tool calls share an id")
    return result


def history_arguments(field: Field, notes: list[str]) -> Mapping[str, Any]:
    """Arguments as an object: from an object, JSON text or double-encoded JSON text.

    Anything else becomes one ``arguments`` parameter holding the raw value, as the V4.1
    reference encoder does, and is reported in ``notes``. Empty text means no arguments.
    """
    arguments = _arguments(field.value)
    if arguments is None:
        return _one_parameter(field, notes)
    return arguments


def _arguments(raw: Any) -> dict[str, Any] | None:
    """The object of the arguments ``raw`` (an object, JSON text of one or JSON text of
    such text; empty text or null: none), each text scanned once; None for anything else."""
    if raw.__class__ is str:
        if not raw or raw.isspace():
            return {}
        value = _json_value(raw)
        if value.__class__ is str:
            value = _json_value(value)
        return value if isinstance(value, dict) else None
    if raw is None or raw is MISSING:
        return {}
    return raw if isinstance(raw, dict) else None


def _one_parameter(field: Field, notes: list[str]) -> dict[str, Any]:
    notes.append(
        f"{field.path}: arguments are not a JSON object; rendered as one parameter named "
        "'arguments' holding the raw value"
    )
    return {"arguments": field.value}


#: What json.loads runs on the text after its checks (the C scanner, where there is one).
_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
#: JSON's whitespace, which json.loads allows around the value.
_SPACE = " \t\n\r"


def _json_value(text: str) -> Any:
    """The value ``json.loads(text)`` reads, by its scanner directly; ``MISSING`` when the
    text is not JSON. The usual arguments (an object, nothing around it) skip the
    whitespace checks."""
    start = 0 if text[:1] == "{" else len(text) - len(text.lstrip(_SPACE))
    try:
        value, end = _SCAN(text, start)
    except (StopIteration, ValueError):
        return MISSING
    if end != len(text) and text[end:].strip(_SPACE):
        return MISSING
    return value


def tool_name(name: Field) -> str:
    """A tool name fit for DSML's ``name="…"`` attribute."""
    value = name.value
    if not isinstance(value, str) or not value:
        raise name.error("a tool needs a function name (a non-empty string)")
    if not TOOL_NAME.fullmatch(value):
        raise name.error(f"tool name {value!r} must be 1-128 characters from A-Z a-z 0-9 _ . : -")
    return value


def tool(function: Mapping[str, Any], deferred: bool, name_param: str) -> Tool:
    """A tool from its function object (``name``, ``description``, ``parameters``, …)."""
    name = tool_name(Field(function.get("name"), name_param))
    return Tool(name, function, deferred, name_param)


def read_tools(field: Field) -> tuple[Tool, ...]:
    """OpenAI-style tools; ``defer_loading`` may sit beside ``function`` or inside it."""
    if not field.present:
        return ()
    if not isinstance(field.value, list):
        raise field.error("tools must be a list")
    expected = 'expected an OpenAI tool {"type": "function", "function": {...}}'
    tools = []
    for item in field.array():
        raw = item.value
        if not _is_object(raw):
            raise item.error(expected)
        if raw.get("type", "function") != "function":
            raise item["type"].error(expected)
        if not _is_object(raw.get("function")):
            raise item.error(expected)
        function = dict(raw["function"])
        inner = Field(function.pop("defer_loading", None), f"{item.path}.function.defer_loading")
        deferred = item["defer_loading"].flag() | inner.flag()
        tools.append(tool(function, deferred, f"{item.path}.function.name"))
    return tuple(tools)


def read_response_format(field: Field) -> Mapping[str, Any] | None:
    """``response_format``: ``text`` (None), ``json_object`` or ``json_schema`` (with a schema)."""
    if not field.present:
        return None
    raw = field.value
    if not isinstance(raw, Mapping):
        raise field.error("response_format must be an object")
    kind = raw.get("type")
    if kind == "text":
        return None
    if kind not in ("json_object", "json_schema"):
        raise field["type"].error(
            f"unknown response_format type {kind!r}; use text, json_object or json_schema"
        )
    if kind == "json_schema":
        schema = raw.get("json_schema")
        if not isinstance(schema, Mapping) or not isinstance(schema.get("schema"), Mapping):
            raise field["json_schema"].error(
                'a json_schema response format needs "json_schema": {"schema": {...}}'
            )
    return raw
