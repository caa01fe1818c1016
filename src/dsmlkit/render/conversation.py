"""The canonical conversation: OpenAI-style chat messages, checked and normalised.

Input is what ``shared/spec/api.md`` §0.4 calls the canonical form: OpenAI chat messages
(roles ``system``, ``developer``, ``user``, ``assistant``, ``tool``, plus the reference
encoders' ``latest_reminder``) with ``reasoning_content`` (alias ``reasoning``), tool
``is_error``, ``tool_reference`` parts and ``defer_loading`` tools, and the reference
encoders' message-level ``tools`` / ``response_format`` / ``task`` / ``mask`` / ``wo_eos``.

:func:`build_conversation` checks every field and raises
:class:`~dsmlkit.errors.InvalidRequest` naming the message and field at the first
mistake; what it returns is typed and needs no further checks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeAlias

from dsmlkit.errors import InvalidRequest
from dsmlkit.render.templates import TASK_TOKENS

Role = Literal["system", "developer", "user", "assistant", "tool", "latest_reminder"]
ROLES: tuple[Role, ...] = ("system", "developer", "user", "assistant", "tool", "latest_reminder")

#: Content part types each role accepts.
_PART_TYPES: dict[str, tuple[str, ...]] = {
    "system": ("text",),
    "developer": ("text",),
    "latest_reminder": ("text",),
    "assistant": ("text",),
    "user": ("text", "image_url", "image"),
    "tool": ("text", "image_url", "image", "tool_reference"),
}
_IMAGE_TYPES = ("image_url", "image")

# One encoder for every call: json.dumps builds a new one each time it gets options.
_JSON = json.JSONEncoder(ensure_ascii=False)


def to_json(value: Any) -> str:
    """JSON as the reference encoders write it: ``json.dumps(value, ensure_ascii=False)``."""
    return _JSON.encode(value)


@dataclass(frozen=True)
class Tool:
    """A tool definition; ``function`` is the object the tools section shows as JSON."""

    name: str
    function: Mapping[str, Any]
    deferred: bool

    def schema_line(self) -> str:
        """The tool's line in the tools section: ``json.dumps`` of the function object."""
        return to_json(dict(self.function))


@dataclass(frozen=True)
class HistoryCall:
    """A tool call in an earlier assistant turn; ``arguments`` is always an object."""

    id: str | None
    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class TextPart:
    text: str


@dataclass(frozen=True)
class ImagePart:
    """An image; the prompt holds a placeholder token, the pixels travel separately."""


@dataclass(frozen=True)
class ToolReferencePart:
    """A pointer to a tool by name (Anthropic tool search ``tool_reference``)."""

    name: str


Part: TypeAlias = TextPart | ImagePart | ToolReferencePart


@dataclass(slots=True)
class Message:
    """One checked message. ``index`` is its position in the caller's list (-1: added).

    Treat it as read-only. It is not a frozen dataclass only because those initialise
    several times slower, and a long agent history holds thousands of messages.
    """

    index: int
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

    @property
    def param(self) -> str:
        """How errors and notes name this message."""
        return f"messages[{self.index}]" if self.index >= 0 else "tools"

    def text(self) -> str:
        """The text parts joined with blank lines (for roles that hold text only)."""
        return "\n\n".join(part.text for part in self.parts if isinstance(part, TextPart))


def build_conversation(
    messages: Any, tools: Any, response_format: Any, notes: list[str]
) -> list[Message]:
    """Check and normalise a conversation and attach request-level options.

    Request ``tools`` and ``response_format`` go on the leading system message; when the
    conversation does not start with one, an empty system message is added for them.
    Things that are rendered but worth telling the caller are appended to ``notes``.
    """
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("expected a non-empty list of messages", "messages")
    result = [_message(raw, index, notes) for index, raw in enumerate(messages)]
    request_tools = _tools(tools, "tools")
    request_format = _response_format(response_format, "response_format")
    if request_tools or request_format:
        result = _attach_to_system(result, request_tools, request_format)
    return result


def _attach_to_system(
    messages: list[Message], tools: tuple[Tool, ...], response_format: Mapping[str, Any] | None
) -> list[Message]:
    first = messages[0]
    if first.role != "system":
        return [Message(-1, "system", tools=tools, response_format=response_format), *messages]
    if response_format is not None and first.response_format is not None:
        raise InvalidRequest(
            "response_format is given both on the request and on messages[0]; give it once",
            "response_format",
        )
    merged = replace(
        first, tools=first.tools + tools, response_format=first.response_format or response_format
    )
    return [merged, *messages[1:]]


def _message(raw: Any, index: int, notes: list[str]) -> Message:
    where = f"messages[{index}]"
    if not isinstance(raw, Mapping):
        raise InvalidRequest("expected a message object", where)
    role = raw.get("role")
    if role not in ROLES:
        raise InvalidRequest(
            f"unknown role {role!r}; use one of: {', '.join(ROLES)}", f"{where}.role"
        )
    parts = _content(raw.get("content"), role, where)
    for field in ("tools", "response_format"):
        if raw.get(field) is not None and role not in ("system", "developer"):
            raise InvalidRequest(
                f"{field} belongs on a system or developer message (or on the request)",
                f"{where}.{field}",
            )
    if role == "developer" and not any(isinstance(p, TextPart) and p.text for p in parts):
        raise InvalidRequest("a developer message needs text content", f"{where}.content")
    task = raw.get("task")
    if task is not None and (role not in ("user", "developer") or task not in TASK_TOKENS):
        raise InvalidRequest(
            f"task must be one of {', '.join(TASK_TOKENS)} on a user or developer message",
            f"{where}.task",
        )
    tool_calls = raw.get("tool_calls") if role == "assistant" else None
    return Message(
        index,
        role,
        parts,
        reasoning=_reasoning(raw, where) if role == "assistant" else None,
        tool_calls=_history_calls(tool_calls, where, notes),
        tool_call_id=_optional_str(raw.get("tool_call_id"), f"{where}.tool_call_id"),
        is_error=_flag(raw.get("is_error"), f"{where}.is_error"),
        tools=_tools(raw.get("tools"), f"{where}.tools"),
        response_format=_response_format(raw.get("response_format"), f"{where}.response_format"),
        task=task,
        wo_eos=_flag(raw.get("wo_eos"), f"{where}.wo_eos"),
    )


def _content(content: Any, role: str, where: str) -> tuple[Part, ...]:
    if content is None:
        return ()
    if isinstance(content, str):
        return (TextPart(content),)
    if not isinstance(content, list):
        raise InvalidRequest(
            "content must be a string, null or a list of parts", f"{where}.content"
        )
    return tuple(_part(part, role, f"{where}.content[{i}]") for i, part in enumerate(content))


def _part(raw: Any, role: str, where: str) -> Part:
    if not isinstance(raw, Mapping):
        raise InvalidRequest("expected a content part object", where)
    kind = raw.get("type")
    allowed = _PART_TYPES[role]
    if kind not in allowed:
        raise InvalidRequest(
            f"unsupported content part type {kind!r} in a {role} message; "
            f"supported: {', '.join(allowed)}",
            where,
        )
    if kind == "text":
        text = raw.get("text")
        if not isinstance(text, str):
            raise InvalidRequest("a text part needs a string 'text'", f"{where}.text")
        return TextPart(text)
    if kind in _IMAGE_TYPES:
        return ImagePart()
    name = raw.get("name", raw.get("tool_name"))
    if not isinstance(name, str) or not name:
        raise InvalidRequest("a tool_reference part needs the tool's 'name'", f"{where}.name")
    return ToolReferencePart(name)


def _reasoning(raw: Mapping[str, Any], where: str) -> str | None:
    key = "reasoning_content" if raw.get("reasoning_content") is not None else "reasoning"
    return _optional_str(raw.get(key), f"{where}.{key}")


def _history_calls(raw: Any, where: str, notes: list[str]) -> tuple[HistoryCall, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InvalidRequest("tool_calls must be a list", f"{where}.tool_calls")
    calls = []
    for i, call in enumerate(raw):
        call_where = f"{where}.tool_calls[{i}]"
        if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
            raise InvalidRequest(
                'expected {"type": "function", "function": {"name", "arguments"}}', call_where
            )
        if call.get("type", "function") != "function":
            raise InvalidRequest(
                f"unsupported tool call type {call.get('type')!r}", f"{call_where}.type"
            )
        function = call["function"]
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest("a tool call needs a function name", f"{call_where}.function.name")
        arguments_where = f"{call_where}.function.arguments"
        arguments = _arguments(function.get("arguments"), arguments_where, notes)
        call_id = _optional_str(call.get("id"), f"{call_where}.id")
        calls.append(HistoryCall(call_id, name, arguments))
    return tuple(calls)


def _arguments(raw: Any, where: str, notes: list[str]) -> Mapping[str, Any]:
    """Arguments as an object: from an object, JSON text or double-encoded JSON text.

    Anything else becomes one ``arguments`` parameter holding the raw value, as the V4.1
    reference encoder does, and is reported in ``notes``. Empty text means no arguments.
    """
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    value = raw
    for _ in range(2):
        if not isinstance(value, str):
            break
        try:
            value = json.loads(value)
        except ValueError:
            break
    if isinstance(value, dict):
        return value
    notes.append(
        f"{where}: arguments are not a JSON object; rendered as one parameter named "
        "'arguments' holding the raw value"
    )
    return {"arguments": raw}


def _tools(raw: Any, where: str) -> tuple[Tool, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InvalidRequest("tools must be a list", where)
    tools = []
    for i, tool in enumerate(raw):
        tool_where = f"{where}[{i}]"
        if (
            not isinstance(tool, Mapping)
            or tool.get("type", "function") != "function"
            or not isinstance(tool.get("function"), Mapping)
        ):
            raise InvalidRequest(
                'expected an OpenAI tool {"type": "function", "function": {...}}', tool_where
            )
        function = dict(tool["function"])
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest("a tool needs a function name", f"{tool_where}.function.name")
        deferred = _flag(tool.get("defer_loading"), f"{tool_where}.defer_loading")
        deferred |= _flag(
            function.pop("defer_loading", None), f"{tool_where}.function.defer_loading"
        )
        tools.append(Tool(name, function, deferred))
    return tuple(tools)


def _response_format(raw: Any, where: str) -> Mapping[str, Any] | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise InvalidRequest("response_format must be an object", where)
    return None if raw.get("type") == "text" else raw


def _optional_str(raw: Any, where: str) -> str | None:
    if raw is not None and not isinstance(raw, str):
        raise InvalidRequest("expected a string", where)
    return raw


def _flag(raw: Any, where: str) -> bool:
    if raw is None:
        return False
    if not isinstance(raw, bool):
        raise InvalidRequest("expected true or false", where)
    return raw
