"""Reading the canonical form and the pieces every API reader shares.

* :func:`read_messages` reads the canonical form (``docs/rendering.md``, The conversation:
  OpenAI chat messages with ``reasoning_content`` (alias ``reasoning``), tool ``is_error``,
  ``tool_reference`` parts, ``defer_loading`` tools, ``latest_reminder`` and the reference
  encoders' message-level ``tools`` / ``response_format`` / ``task`` / ``mask`` /
  ``wo_eos``); OpenAI Chat Completions bodies are that form, except that their developer
  messages are OpenAI's (:func:`~dsmlkit.conversation.normalize.as_instruction`).
* Readers of other shapes (Anthropic Messages) build :class:`Message` values with the
  same helpers (:func:`tool`, :func:`tool_name`, :func:`history_arguments`,
  :func:`tool_reference`, …) on the fields of their own request.

Every reader here reads :class:`~dsmlkit.fields.Field` values (a value and its path in
the request), as the API readers do: every mistake raises
:class:`~dsmlkit.errors.InvalidRequest` naming the field; what comes out is typed and needs
no further checks.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from dsmlkit.conversation.model import (
    ROLES,
    TOOL_NAME,
    Conversation,
    HistoryCall,
    ImagePart,
    Message,
    Part,
    TextPart,
    Tool,
    ToolReferencePart,
)
from dsmlkit.conversation.normalize import finish_conversation
from dsmlkit.conversation.server_tools import is_server_tool
from dsmlkit.dialects import TASK_TOKENS
from dsmlkit.fields import MISSING, Field

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


class MessageMemory(Protocol):
    """What keeps messages read before, by everything they were read from (the caller's
    :class:`~dsmlkit.render.RenderCache` is one)."""

    def message(self, key: tuple[Any, ...]) -> Message | None:
        """The message read from ``key`` before, if kept."""

    def keep_message(self, key: tuple[Any, ...], chars: int, message: Message) -> None:
        """Keep ``message``, read from ``key`` (whose strings hold ``chars`` characters)."""


def build_conversation(
    messages: Any,
    tools: Any = None,
    response_format: Any = None,
    cache: MessageMemory | None = None,
) -> Conversation:
    """Read a conversation in canonical form (an OpenAI chat body's ``messages``, ``tools``
    and ``response_format``) and check it; ``cache`` keeps the messages read."""
    notes: list[str] = []
    return finish_conversation(
        read_messages(Field(messages, "messages"), notes, cache),
        read_tools(Field(tools, "tools")),
        read_response_format(Field(response_format, "response_format")),
        notes,
        merge_assistants=False,
    )


def read_messages(
    messages: Field, notes: list[str], cache: MessageMemory | None = None
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
#: Every field an assistant message is read from or ignores (the reference encoders'
#: ``mask``); the others are its ``passthrough``.
_ASSISTANT_FIELDS = _RARE_FIELDS | {
    "mask",
    "role",
    "content",
    "reasoning_content",
    "reasoning",
    "tool_calls",
    "tool_call_id",
}


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
    passthrough = None
    if role == "assistant":
        key = "reasoning_content" if raw.get("reasoning_content") is not None else "reasoning"
        reasoning = field[key].optional_string()
        tool_calls = _history_calls(field["tool_calls"], notes)
        passthrough = {k: v for k, v in raw.items() if k not in _ASSISTANT_FIELDS} or None
    tool_call_id = field["tool_call_id"].optional_string() or None
    plain = isinstance(content.value, str)
    if not rare:
        return Message(
            where,
            role,
            parts,
            reasoning,
            tool_calls,
            tool_call_id,
            plain=plain,
            passthrough=passthrough,
        )
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
        passthrough=passthrough,
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


def read_tools(field: Field, *, hosted: bool = False) -> tuple[Tool, ...]:
    """OpenAI-style tools; ``defer_loading`` may sit beside ``function`` or inside it.

    ``hosted``: a request's ``tools``, whose entries for a hosted endpoint's server tools
    are left to :func:`~dsmlkit.conversation.server_tools.read_server_tools` (elsewhere
    they are refused).
    """
    if not field.present:
        return ()
    if not isinstance(field.value, list):
        raise field.error("tools must be a list")
    expected = 'expected an OpenAI tool {"type": "function", "function": {...}}'
    tools = []
    for item in field.array():
        raw = item.value
        if hosted and is_server_tool(raw):
            continue
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
