"""OpenAI Responses API: request body → :class:`ResponsesRequest`; parser events → responses.

Requests: ``input`` (a string or items: ``message``, ``reasoning``, ``function_call``,
``function_call_output``) becomes typed :class:`~dsmlkit.conversation.Message` values,
finished by the same :func:`~dsmlkit.conversation.normalize.finish_conversation` step as every API:
consecutive assistant-side items (reasoning, an assistant message, function calls) are one
assistant turn, and every output answers a call of the turn before it. So a Responses body
holding the same conversation as a Chat Completions body renders byte-identically. Function
tools inside ``namespace`` tools are flattened to one DSML name (:func:`qualified_name`) and
split again on the way out; server tools (``web_search`` …) are dropped with a note.

Responses: :func:`responses_response` builds the ``response`` object; :class:`ResponsesStream`
emits the streaming event grammar (``response.created`` … ``response.completed``, every
event numbered by ``sequence_number``). With ``include: ["reasoning.encrypted_content"]``
reasoning items carry the reasoning sealed by the caller's :class:`~dsmlkit.api.seal.Sealer`
for the request's model, which a stateless client's next request hands back.
:data:`RESPONSES` is the API itself (:class:`ResponsesApi`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import count
from typing import Any

from dsmlkit.api.common import (
    Answer,
    ChatRequest,
    ClientApi,
    ParseOptions,
    ReadContext,
    Usage,
    note_ignored,
    read_effort,
    read_numbers,
    read_switch,
    request_root,
    resolve_thinking,
)
from dsmlkit.api.errors import ApiError
from dsmlkit.api.seal import Sealer, SealError
from dsmlkit.api.sse import TextFrames, json_string, sse_event
from dsmlkit.api.stream import BlockStream, Opened, TextKind
from dsmlkit.conversation.model import (
    CHOICE_MODES,
    HistoryCall,
    ImagePart,
    Message,
    Part,
    Role,
    TextPart,
    Tool,
    ToolChoice,
)
from dsmlkit.conversation.normalize import finish_conversation
from dsmlkit.conversation.readers import (
    history_arguments,
    read_response_format,
    tool,
    tool_name,
    tool_reference,
)
from dsmlkit.conversation.server_tools import is_server_tool, read_server_tools
from dsmlkit.dialects import DEFAULT_DIALECT, Dialect
from dsmlkit.errors import CallerError
from dsmlkit.fields import Field
from dsmlkit.parse import ParsedMessage, ToolCallStart, UpstreamBlock, UpstreamFields
from dsmlkit.render import RenderOptions
from dsmlkit.render.renderer import resolve_dialect

#: The ``include`` entry that asks for sealed reasoning on reasoning items.
ENCRYPTED_REASONING = "reasoning.encrypted_content"
#: Message roles; OpenAI's developer messages are instructions (see ``as_instruction``).
_MESSAGE_ROLES: dict[str, Role] = {
    "user": "user",
    "system": "system",
    "developer": "system",
    "assistant": "assistant",
}
#: Characters that already end a namespace as a separator (``mcp__server__`` + ``tool``).
_SEPARATORS = ("_", ".", ":", "-")
#: Fields accepted and echoed or ignored: they change nothing in the prompt.
IGNORED_FIELDS = (
    "metadata",
    "store",
    "include",
    "user",
    "service_tier",
    "prompt_cache_key",
    "client_metadata",
    "safety_identifier",
    "truncation",
)
#: Tool fields that describe the tool to the API, not to the model.
_NOT_SHOWN = ("type", "defer_loading")


def qualified_name(namespace: str, name: str) -> str:
    """The one DSML tool name for ``name`` inside ``namespace``.

    ``mcp__srv__`` + ``read`` → ``mcp__srv__read`` (the namespace already ends in a
    separator); ``crm`` + ``lookup`` → ``crm.lookup``.
    """
    return namespace + name if namespace.endswith(_SEPARATORS) else f"{namespace}.{name}"


@dataclass(frozen=True)
class ResponsesOptions:
    """What a Responses request says beyond the conversation: echoed in the ``response``
    object, or steering how output items are written (``namespaces``: each flattened tool
    name's ``(namespace, name)``)."""

    instructions: str | None = None
    tools: list[Any] = field(default_factory=list)
    tool_choice: Any = "auto"
    namespaces: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    reasoning: Mapping[str, Any] = field(default_factory=dict)
    text: Mapping[str, Any] = field(default_factory=lambda: {"format": {"type": "text"}})
    max_output_tokens: int | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    store: bool = True
    previous_response_id: str | None = None
    include_encrypted_reasoning: bool = False
    prompt_cache_key: str | None = None
    temperature: float | None = None
    top_p: float | None = None


@dataclass(frozen=True)
class ResponsesRequest(ChatRequest):
    """A Responses request: the shared :class:`ChatRequest` plus :class:`ResponsesOptions`."""

    responses: ResponsesOptions = field(default_factory=ResponsesOptions)


# --- requests --------------------------------------------------------------------------


def parse_responses_request(
    body: Any,
    *,
    dialect: str | Dialect = DEFAULT_DIALECT,
    sealer: Sealer | None = None,
    history: Sequence[Any] = (),
) -> ResponsesRequest:
    """Validate a Responses body and convert it; raises :class:`InvalidRequest` (400).

    ``sealer`` opens the ``encrypted_content`` of reasoning items (sealed for the body's
    ``model``); a reasoning item whose token does not open is used as sent (its clear
    ``content``, else its summary), with a note. ``history``: the items of the stored
    conversation the body's ``previous_response_id`` continues, read before ``input`` as
    one conversation with it (results answer calls across the two; errors in them name
    ``previous_response_id``).
    """
    root = request_root(body)
    model = root["model"].nonempty_string()
    resolved = resolve_dialect(dialect)
    notes: list[str] = []
    tools, namespaces = _read_responses_tools(root["tools"], notes)
    instructions = root["instructions"]
    messages: list[Message] = []
    if instructions.present:
        text = _instructions(instructions)
        messages.append(Message("instructions", "system", (TextPart(text),), plain=True))
    items = _Input(namespaces, sealer, model, notes)
    if history:
        messages += items.convert(Field(list(history), "previous_response_id"))
    messages += items.convert(root["input"])
    requested_effort, reasoning = _reasoning(root["reasoning"])
    thinking, effort = resolve_thinking(
        [(read_switch(root["thinking"]), "thinking.type")],
        requested_effort,
        "reasoning.effort",
        default=True,
        dialect=resolved,
        notes=notes,
    )
    response_format, text_echo = _text(root["text"])
    note_ignored(root, IGNORED_FIELDS, notes)
    conversation = finish_conversation(
        messages, tools, response_format, notes, _tool_choice(root["tool_choice"])
    )
    include = [item.string() for item in root["include"].array()] if root["include"].present else []
    max_output = root["max_output_tokens"]
    max_tokens = max_output.integer(minimum=1) if max_output.present else None
    sampling = read_numbers(root, ("temperature", "top_p"))
    if root["background"].present and root["background"].boolean():
        raise root["background"].error("background responses are not supported; omit it")
    previous = root["previous_response_id"]
    parallel = root["parallel_tool_calls"]
    cache_key = root["prompt_cache_key"]
    options = ResponsesOptions(
        instructions=instructions.value if isinstance(instructions.value, str) else None,
        tools=list(root["tools"].value) if root["tools"].present else [],
        tool_choice=root["tool_choice"].value if root["tool_choice"].present else "auto",
        namespaces=namespaces,
        reasoning=reasoning,
        text=text_echo,
        max_output_tokens=max_tokens,
        metadata=_metadata(root["metadata"]),
        store=root["store"].boolean() if root["store"].present else True,
        previous_response_id=previous.string() if previous.present else None,
        include_encrypted_reasoning=ENCRYPTED_REASONING in include,
        prompt_cache_key=cache_key.string() if cache_key.present else None,
        temperature=sampling.get("temperature"),
        top_p=sampling.get("top_p"),
    )
    return ResponsesRequest(
        api=RESPONSES,
        model=model,
        conversation=conversation,
        render=RenderOptions(dialect=resolved, thinking=thinking, reasoning_effort=effort),
        parse=ParseOptions(resolved, conversation.tools),
        parallel_tool_calls=parallel.boolean() if parallel.present else True,
        stream=root["stream"].boolean() if root["stream"].present else False,
        include_usage=True,
        max_tokens=max_tokens,
        sampling=sampling,
        server_tools=read_server_tools(root["tools"]),
        responses=options,
    )


def _instructions(field: Field) -> str:
    """Instructions: a string, or input items of which only text messages make sense."""
    if isinstance(field.value, str):
        return field.value
    texts = []
    for item in field.array():
        parts = _parts(item["content"], ("input_text",))
        texts.append("".join(part.text for part in parts if isinstance(part, TextPart)))
    return "\n\n".join(texts)


def _parts(content: Field, allowed: Sequence[str]) -> tuple[Part, ...]:
    """Message content (a string or content parts) as typed parts."""
    if isinstance(content.value, str):
        return (TextPart(content.value),)
    if not isinstance(content.value, list):
        raise content.error("must be a string or an array of content parts")
    parts: list[Part] = []
    for part in content.array():
        kind = part.type_tag()
        if kind not in allowed:
            raise part.error(f"{kind!r} parts are not supported here; use {', '.join(allowed)}")
        if kind == "input_image":
            parts.append(_image(part))
        elif kind == "tool_reference":  # dsmlkit extension, as on /v1/chat/completions
            parts.append(tool_reference(part))
        else:
            parts.append(TextPart(part["refusal" if kind == "refusal" else "text"].string()))
    return tuple(parts)


def _image(part: Field) -> ImagePart:
    if not part["image_url"].present:
        raise part.error("only images given by image_url (an https or data URL) can be rendered")
    return ImagePart(part["image_url"].nonempty_string(), part.path)


class _Input:
    """Converts ``input`` in order into typed messages (one per item; the conversation step
    joins a turn's items)."""

    def __init__(
        self,
        namespaces: Mapping[str, tuple[str, str]],
        sealer: Sealer | None,
        model: str,
        notes: list[str],
    ) -> None:
        self._qualified = {pair: name for name, pair in namespaces.items()}
        self._sealer = sealer
        self._model = model
        self._notes = notes
        self._turn_calls: set[str] = set()  # call ids of the assistant turn being read

    def convert(self, field: Field) -> list[Message]:
        if isinstance(field.value, str):
            return [Message(field.path, "user", (TextPart(field.value),), plain=True)]
        items = field.array()
        if not items:
            raise field.error("must hold at least one item")
        messages: list[Message] = []
        for item in items:
            kind = item["type"].nonempty_string() if item["type"].present else "message"
            if kind == "message":
                messages += self._message(item)
            elif kind == "reasoning":
                messages.append(self._reasoning(item))
            elif kind == "function_call":
                messages.append(Message(item.path, "assistant", tool_calls=(self._call(item),)))
            elif kind == "function_call_output":
                self._turn_calls = set()
                messages += self._output(item)
            elif kind == "item_reference":
                raise item.error(
                    "item_reference is not supported; send the item itself (or continue a "
                    "stored response with previous_response_id)"
                )
            else:
                self._notes.append(f"{item.path}: dropped a {kind!r} item (no such tool here)")
        return messages

    def _message(self, item: Field) -> list[Message]:
        if item["role"].value == "latest_reminder":
            raise item["role"].error(
                "latest_reminder is not a Responses role (DeepSeek's Responses API refuses it "
                "too); send it in a Chat Completions or Messages request, as a message directly "
                "before the user message it belongs to"
            )
        role = _MESSAGE_ROLES[item["role"].choice(_MESSAGE_ROLES)]
        content = item["content"]
        plain = isinstance(content.value, str)
        if role == "assistant":
            parts = _parts(content, ("output_text", "refusal", "input_text"))
            return [Message(item.path, "assistant", parts, plain=plain)]
        self._turn_calls = set()
        allowed = ("input_text", "input_image") if role == "user" else ("input_text",)
        return [Message(item.path, role, _parts(content, allowed), plain=plain)]

    def _reasoning(self, item: Field) -> Message:
        """The sealed reasoning when its token opens here; else the item as sent (the text
        in the clear, ``content``, else its summary), never a mix of both, and not trusted
        when it held a token that did not open."""
        sealed = item["encrypted_content"]
        if sealed.present:
            token = sealed.string()
            why = "no sealer here"
            if self._sealer is not None:
                try:
                    text = self._sealer.open(token, self._model)
                    return Message(item.path, "assistant", reasoning=text, reasoning_sealed=True)
                except SealError as exc:
                    why = str(exc)
            self._notes.append(f"{sealed.path}: not opened ({why}); the item is used as sent")
        trusted = not sealed.present
        content = item["content"]
        summary = item["summary"]
        if content.present and content.array():
            text = "".join(part["text"].string() for part in content.array())
        elif summary.present:
            text = "\n\n".join(part["text"].string() for part in summary.array())
        else:
            text = ""
        return Message(item.path, "assistant", reasoning=text, reasoning_trusted=trusted)

    def _call(self, item: Field) -> HistoryCall:
        name = tool_name(item["name"])
        namespace = item["namespace"]
        if namespace.present:
            space = namespace.nonempty_string()
            name = self._qualified.get((space, name), qualified_name(space, name))
        call_id = item["call_id"].nonempty_string()
        if call_id in self._turn_calls:
            raise item["call_id"].error("two tool calls of one turn share this call_id")
        self._turn_calls.add(call_id)
        given = item["arguments"]
        if not given.present:
            raise given.error('is required: the call\'s arguments as JSON text ("{}" for none)')
        arguments = history_arguments(given, self._notes)
        text = given.value if isinstance(given.value, str) else None
        return HistoryCall(call_id, name, arguments, text)

    def _output(self, item: Field) -> list[Message]:
        """One tool message and, for images, a user message right after it."""
        call_id = item["call_id"].nonempty_string()
        output = item["output"]
        id_param = item["call_id"].path
        if isinstance(output.value, str):
            parts: tuple[Part, ...] = (TextPart(output.value),)
            return [
                Message(
                    item.path, "tool", parts, tool_call_id=call_id, plain=True, id_param=id_param
                )
            ]
        parts = _parts(output, ("input_text", "input_image", "tool_reference"))
        images = tuple(part for part in parts if isinstance(part, ImagePart))
        others = tuple(part for part in parts if not isinstance(part, ImagePart))
        message = Message(item.path, "tool", others, tool_call_id=call_id, id_param=id_param)
        return [message, Message(item.path, "user", images)] if images else [message]


def _read_responses_tools(
    field: Field, notes: list[str]
) -> tuple[list[Tool], dict[str, tuple[str, str]]]:
    """Typed tools, and for each flattened namespace tool its ``(namespace, name)``."""
    tools: list[Tool] = []
    namespaces: dict[str, tuple[str, str]] = {}
    if not field.present:
        return tools, namespaces
    for item in field.array():
        kind = item["type"].nonempty_string()
        if kind == "function":
            tools.append(_function(item, tool_name(item["name"])))
        elif kind == "namespace":
            space = item["name"].nonempty_string()
            for inner in item["tools"].array():
                inner_kind = inner["type"].nonempty_string()
                if inner_kind != "function":
                    notes.append(
                        f"{inner.path}: dropped a {inner_kind!r} tool; only function tools render"
                    )
                    continue
                name = tool_name(inner["name"])
                qualified = qualified_name(space, name)
                tools.append(_function(inner, qualified))
                namespaces[qualified] = (space, name)
        elif not is_server_tool(
            item.value
        ):  # a hosted endpoint's: carried (dsmlkit.conversation.server_tools)
            name = item["name"].value if isinstance(item["name"].value, str) else kind
            notes.append(f"{item.path}: dropped server tool {name!r} ({kind}); dsmlkit runs none")
    return tools, namespaces


def _function(item: Field, name: str) -> Tool:
    """A flat Responses function tool: the Chat function object, plus ``type`` and
    ``defer_loading`` (kept in the client's key order, as Chat's tools are)."""
    function = {key: value for key, value in item.object().items() if key not in _NOT_SHOWN}
    function["name"] = name
    deferred = item["defer_loading"]
    return tool(function, deferred.boolean() if deferred.present else False, item["name"].path)


def _tool_choice(field: Field) -> ToolChoice | None:
    """``none`` | ``auto`` | ``required`` | ``{"type": "function", "name", "namespace"?}``."""
    if not field.present:
        return None
    if isinstance(field.value, str):
        return ToolChoice(CHOICE_MODES[field.choice(CHOICE_MODES)], param=field.path)
    kind = field["type"].nonempty_string()
    if kind != "function":
        raise field["type"].error(
            f"tool_choice {kind!r} names a tool dsmlkit does not offer; use none, auto, "
            "required or a function"
        )
    name = field["name"]
    qualified = name.nonempty_string()
    if field["namespace"].present:
        qualified = qualified_name(field["namespace"].nonempty_string(), qualified)
    return ToolChoice("required", qualified, name.path)


def _reasoning(field: Field) -> tuple[str | int | None, dict[str, Any]]:
    """``(effort, echo)`` from ``reasoning`` (``summary``, echoed, also puts the reasoning
    into the reasoning items' ``summary``)."""
    if not field.present:
        return None, {}
    effort = read_effort(field["effort"])
    summary = field["summary"]
    summaries = ("auto", "concise", "detailed", "none")
    echo = {
        "effort": field["effort"].value if field["effort"].present else None,
        "summary": summary.choice(summaries) if summary.present else None,
    }
    return effort, echo


def _text(field: Field) -> tuple[Mapping[str, Any] | None, dict[str, Any]]:
    """``(response_format, echo)`` from ``text.format`` (``verbosity`` is accepted)."""
    echo: dict[str, Any] = {"format": {"type": "text"}}
    if not field.present:
        return None, echo
    if field["verbosity"].present:
        echo["verbosity"] = field["verbosity"].choice(("low", "medium", "high"))
    fmt = field["format"]
    if not fmt.present:
        return None, echo
    kind = fmt["type"].choice(("text", "json_object", "json_schema"))
    echo["format"] = dict(fmt.object())
    if kind == "json_schema":
        fmt["schema"].object()
        schema = {key: value for key, value in fmt.object().items() if key != "type"}
        chat_form: dict[str, Any] = {"type": "json_schema", "json_schema": schema}
    else:
        chat_form = {"type": kind}
    return read_response_format(Field(chat_form, fmt.path)), echo


def _metadata(field: Field) -> dict[str, str]:
    if not field.present:
        return {}
    return {key: field[key].string() for key in field.object()}


# --- responses -------------------------------------------------------------------------


def _responses_usage(usage: Usage | None) -> dict[str, Any]:
    """The ``usage`` object of a response."""
    usage = usage or Usage(0, 0)
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    }


class _Items:
    """Output items of one response, numbered from the response id (so a stream and the
    non-streamed response of one output carry the same ids)."""

    def __init__(self, req: ResponsesRequest, response_id: str, sealer: Sealer | None) -> None:
        self._req = req
        self._token = response_id.removeprefix("resp_")
        self._sealer = sealer
        self.done: list[dict[str, Any]] = []

    def item_id(self, prefix: str) -> str:
        return f"{prefix}_{self._token}_{len(self.done)}"

    @property
    def summarized(self) -> bool:
        """Whether the request asked for ``reasoning.summary`` (not ``none``): the finished
        reasoning items then carry their text as one summary part too."""
        return self._req.responses.reasoning.get("summary") not in (None, "none")

    def reasoning(self, item_id: str, text: str, status: str) -> dict[str, Any]:
        summarized = self.summarized and bool(text) and status != "in_progress"
        item: dict[str, Any] = {
            "type": "reasoning",
            "id": item_id,
            "summary": [_summary_text(text)] if summarized else [],
            "content": [{"type": "reasoning_text", "text": text}] if text else [],
            "status": status,
        }
        if self._req.responses.include_encrypted_reasoning and status != "in_progress":
            if self._sealer is None:
                raise CallerError("this request asks for encrypted reasoning: pass sealer")
            item["encrypted_content"] = self._sealer.seal(text, self._req.model)
        return item

    @staticmethod
    def message(item_id: str, text: str | None, status: str) -> dict[str, Any]:
        content = [] if text is None else [_output_text(text)]
        return {
            "type": "message",
            "id": item_id,
            "role": "assistant",
            "status": status,
            "content": content,
        }

    def function_call(
        self, item_id: str, call_id: str, name: str, arguments: str, status: str
    ) -> dict[str, Any]:
        item: dict[str, Any] = {
            "type": "function_call",
            "id": item_id,
            "call_id": call_id,
            "name": name,
            "arguments": arguments,
            "status": status,
        }
        split = self._req.responses.namespaces.get(name)
        if split is not None:
            item["namespace"], item["name"] = split
        return item


def _output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _summary_text(text: str) -> dict[str, Any]:
    return {"type": "summary_text", "text": text}


def _response_object(
    req: ResponsesRequest,
    *,
    id: str,
    created_at: int,
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    options = req.responses
    reasoning = {key: value for key, value in options.reasoning.items() if value is not None}
    return {
        "id": id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "error": error,
        "incomplete_details": ({"reason": "max_output_tokens"} if status == "incomplete" else None),
        "instructions": options.instructions,
        "max_output_tokens": options.max_output_tokens,
        "metadata": options.metadata,
        "model": req.model,
        "output": output,
        "parallel_tool_calls": req.parallel_tool_calls,
        "previous_response_id": options.previous_response_id,
        "prompt_cache_key": options.prompt_cache_key,
        "reasoning": reasoning,
        "store": options.store,
        "temperature": options.temperature,
        "text": options.text,
        "tool_choice": options.tool_choice,
        "tools": options.tools,
        "top_p": options.top_p,
        "truncation": "disabled",
        "usage": usage,
    }


def _status(msg_finish: str) -> str:
    return "incomplete" if msg_finish == "length" else "completed"


def responses_response(
    msg: ParsedMessage,
    req: ResponsesRequest,
    *,
    id: str,
    created_at: int,
    usage: Usage | None = None,
    sealer: Sealer | None = None,
) -> dict[str, Any]:
    """The ``response`` object for one parsed model output.

    Items: the reasoning, then the answer message, then one ``function_call`` per call;
    output cut off by the length limit makes the response ``incomplete``.
    ``sealer`` seals the reasoning when the request included ``reasoning.encrypted_content``.
    """
    items = _Items(req, id, sealer)
    if msg.reasoning:
        items.done.append(items.reasoning(items.item_id("rs"), msg.reasoning, "completed"))
    if msg.content:
        items.done.append(items.message(items.item_id("msg"), msg.content, "completed"))
    for call in msg.calls:
        item_id = items.item_id("fc")
        items.done.append(
            items.function_call(item_id, call.id, call.name, call.arguments_json, "completed")
        )
    status = _status(msg.finish_reason)
    return _response_object(
        req,
        id=id,
        created_at=created_at,
        status=status,
        output=items.done,
        usage=_responses_usage(usage),
    )


StreamEvent = dict[str, Any]
#: The delta event of each text item type.
_TEXT_DELTAS = {
    "reasoning": "response.reasoning_text.delta",
    "message": "response.output_text.delta",
}


class ResponsesStream(BlockStream[StreamEvent]):
    """Parser events → Responses stream events (dicts with ``type`` and ``sequence_number``).

    Call :meth:`start`, then :meth:`feed` with each batch of parser events (including the
    ``close()`` events), then :meth:`finish` (or :meth:`fail`). Frame each event with
    ``sse_event(event["type"], event)``. Or call :meth:`start_sse`, :meth:`feed_sse` and
    :meth:`finish_sse` (or :meth:`fail_sse`), which return those frames (byte for byte) and
    build no event dict per text delta. After finishing, :attr:`response` is the final
    ``response`` object. The items are folded by :class:`~dsmlkit.api.stream.BlockStream`.
    """

    def __init__(
        self,
        req: ResponsesRequest,
        *,
        id: str,
        created_at: int,
        sealer: Sealer | None = None,
    ) -> None:
        self._output = _OutputItems(_Items(req, id, sealer))
        super().__init__(req, self._output)
        self._responses_req = req
        self._id = id
        self._created_at = created_at
        self._response: dict[str, Any] | None = None

    def _snapshot(self, status: str, usage: Usage | None = None, **extra: Any) -> dict[str, Any]:
        return _response_object(
            self._responses_req,
            id=self._id,
            created_at=self._created_at,
            status=status,
            output=list(self._output.items.done),
            usage=_responses_usage(usage) if status != "in_progress" else None,
            **extra,
        )

    def start(self) -> list[StreamEvent]:
        """``response.created`` and ``response.in_progress``."""
        event = self._output.event
        return [
            event("response.created", response=self._snapshot("in_progress")),
            event("response.in_progress", response=self._snapshot("in_progress")),
        ]

    def finish(self, usage: Usage | None = None) -> list[StreamEvent]:
        """Close the open item; then ``response.completed`` (or ``.incomplete`` when cut off)."""
        status = _status(self._end().finish_reason)
        out = self._close()
        name = "response.completed" if status == "completed" else "response.incomplete"
        self._response = self._snapshot(status, usage)
        out.append(self._output.event(name, response=self._response))
        return out

    def fail(self, message: str) -> list[StreamEvent]:
        """``response.failed`` for an output that broke off (the engine failed)."""
        out = self._close()
        error = {"code": "server_error", "message": message}
        response = self._snapshot("failed", error=error)
        out.append(self._output.event("response.failed", response=response))
        return out

    def start_sse(self) -> list[str]:
        """:meth:`start` as SSE frames."""
        return [_framed(event) for event in self.start()]

    def finish_sse(self, usage: Usage | None = None, stop_sequence: str | None = None) -> list[str]:
        """:meth:`finish` as SSE frames (the response has no field for the matched
        ``stop_sequence``)."""
        return [_framed(event) for event in self.finish(usage)]

    def fail_sse(self, message: str) -> list[str]:
        """:meth:`fail` as SSE frames."""
        return [_framed(event) for event in self.fail(message)]

    def error_sse(self, err: ApiError, request_id: str) -> list[str]:
        """A stream that fails ends in its own ``response.failed`` event."""
        return self.fail_sse(str(err))

    @property
    def response(self) -> dict[str, Any] | None:
        """The final ``response`` object once :meth:`finish` made it (else None)."""
        return self._response


class _OutputItems:
    """Responses' block steps: every block an output item, and every event numbered
    (``sequence_number``). An item opens with ``response.output_item.added`` (a text item
    also with ``response.content_part.added``), each delta is one ``….delta`` event, and it
    closes with its ``….done`` events, after which it joins the finished items."""

    def __init__(self, items: _Items) -> None:
        self.items = items
        self._numbers = count()  # the events' sequence numbers
        self._open: dict[str, Any] | None = None  # the item being streamed
        self._text: list[str] = []  # its text (reasoning or answer) or arguments so far
        self._text_frames: TextFrames[int] = TextFrames(self._delta_frame)

    def event(self, kind: str, **fields: Any) -> StreamEvent:
        """The next event (numbered)."""
        return {"type": kind, "sequence_number": next(self._numbers), **fields}

    def open_text(self, kind: TextKind) -> Opened[StreamEvent]:
        items = self.items
        if kind == "reasoning":
            item = items.reasoning(items.item_id("rs"), "", "in_progress")
            part: dict[str, Any] = {"type": "reasoning_text", "text": ""}
        else:
            item = items.message(items.item_id("msg"), None, "in_progress")
            part = _output_text("")
        opened = self._opened(item)
        opened.frames.append(self._part_event("response.content_part.added", part))
        return opened

    def open_call(self, start: ToolCallStart) -> Opened[StreamEvent]:
        item_id = self.items.item_id("fc")
        call = self.items.function_call(item_id, start.id, start.name, "", "in_progress")
        return self._opened(call)

    def fields(self, event: UpstreamFields) -> list[StreamEvent]:
        """A Responses answer has no place for a chat upstream's own fields (the chat kind
        passes them on to Chat Completions clients only)."""
        return []

    def block(self, event: UpstreamBlock) -> list[StreamEvent]:
        """A Responses answer has no place for an Anthropic upstream's own blocks (the
        messages kind passes them on to Messages clients only)."""
        return []

    def close(self, completed: bool) -> list[StreamEvent]:
        """``….done`` events for the open item, which then joins the finished ones.

        A text item is complete once it stops; a call only when it ended (``completed``:
        a call the output broke off inside is ``incomplete`` and the non-streamed
        response has none).
        """
        item = self._open
        if item is None:
            return []
        text = "".join(self._text)
        output_index = len(self.items.done)
        out: list[StreamEvent] = []
        if item["type"] == "function_call":
            out.append(
                self.event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=output_index,
                    arguments=text,
                )
            )
            status = "completed" if completed else "incomplete"
            done = {**item, "arguments": text, "status": status}
        else:
            if item["type"] == "reasoning":
                part: dict[str, Any] = {"type": "reasoning_text", "text": text}
                out.append(self._text_done("response.reasoning_text.done", item, text))
                done = self.items.reasoning(item["id"], text, "completed")
            else:
                part = _output_text(text)
                out.append(self._text_done("response.output_text.done", item, text, logprobs=[]))
                done = self.items.message(item["id"], text, "completed")
            out.append(self._part_event("response.content_part.done", part))
            if done.get("summary"):
                out += self._summary_events(done, text)
        out.append(self.event("response.output_item.done", output_index=output_index, item=done))
        self.items.done.append(done)
        self._open = None
        return out

    def _summary_events(self, item: Mapping[str, Any], text: str) -> list[StreamEvent]:
        """The summary of a finished reasoning item (its text, as one part and one delta),
        in the order OpenAI streams a summary: part added, text delta and done, part done."""
        where = {"item_id": item["id"], "output_index": len(self.items.done), "summary_index": 0}
        return [
            self.event("response.reasoning_summary_part.added", **where, part=_summary_text("")),
            self.event("response.reasoning_summary_text.delta", **where, delta=text),
            self.event("response.reasoning_summary_text.done", **where, text=text),
            self.event("response.reasoning_summary_part.done", **where, part=_summary_text(text)),
        ]

    def sse(self, frame: StreamEvent) -> str:
        return _framed(frame)

    def _opened(self, item: dict[str, Any]) -> Opened[StreamEvent]:
        index = len(self.items.done)
        self._open = item
        self._text = []
        added = self.event("response.output_item.added", output_index=index, item=item)
        keep = self._text.append
        numbers = self._numbers
        before, middle, after = self._text_frames.parts(index, 2)

        def write_event(text: str) -> StreamEvent:
            keep(text)
            return self._delta(index, next(numbers), text)

        def write_sse(text: str) -> str:  # the frame cut at the number and the text
            keep(text)
            return f"{before}{next(numbers)}{middle}{json_string(text)}{after}"

        return Opened([added], write_event, write_sse)

    def _delta(self, index: int, sequence: Any, text: str) -> StreamEvent:
        """The delta event of the open item, number ``index`` (``sequence``: the event's
        number, or a marker in its place)."""
        item = self._open
        assert item is not None
        if item["type"] == "function_call":
            return {
                "type": "response.function_call_arguments.delta",
                "sequence_number": sequence,
                "item_id": item["id"],
                "output_index": index,
                "delta": text,
            }
        event: StreamEvent = {
            "type": _TEXT_DELTAS[item["type"]],
            "sequence_number": sequence,
            "item_id": item["id"],
            "output_index": index,
            "content_index": 0,
            "delta": text,
        }
        if item["type"] == "message":
            event["logprobs"] = []
        return event

    def _delta_frame(self, index: int, sequence: str, text: str) -> str:
        """The full frame of a delta event of item ``index``."""
        return _framed(self._delta(index, sequence, text))

    def _part_event(self, kind: str, part: dict[str, Any]) -> StreamEvent:
        assert self._open is not None
        return self.event(
            kind,
            item_id=self._open["id"],
            output_index=len(self.items.done),
            content_index=0,
            part=part,
        )

    def _text_done(
        self, kind: str, item: Mapping[str, Any], text: str, **extra: Any
    ) -> StreamEvent:
        return self.event(
            kind,
            item_id=item["id"],
            output_index=len(self.items.done),
            content_index=0,
            text=text,
            **extra,
        )


def _framed(event: StreamEvent) -> str:
    return sse_event(event["type"], event)


# --- the API ---------------------------------------------------------------------------


class ResponsesApi(ClientApi[ResponsesRequest]):
    """OpenAI Responses, ``POST /v1/responses``: a stream ends in its own events, failed
    ones too, and its answers may be stored."""

    name = "responses"
    path = "/v1/responses"
    response_id_prefix = "resp_"
    call_id_prefix = "call_"
    keeps_responses = True

    def read(self, body: Any, context: ReadContext) -> ResponsesRequest:
        return parse_responses_request(
            body, dialect=context.dialect, sealer=context.sealer, history=context.history
        )

    def read_tools(self, tools: Any) -> tuple[Tool, ...]:
        return tuple(_read_responses_tools(Field(tools, "tools"), [])[0])

    def respond(
        self, msg: ParsedMessage, model: str, answer: Answer, req: ResponsesRequest | None
    ) -> dict[str, Any]:
        if req is None:
            raise CallerError("a Responses answer echoes its request: pass the ResponsesRequest")
        return responses_response(
            msg,
            req,
            id=answer.id,
            created_at=answer.created,
            usage=answer.usage,
            sealer=answer.sealer,
        )

    def open_stream(self, req: ResponsesRequest, answer: Answer) -> ResponsesStream:
        return ResponsesStream(req, id=answer.id, created_at=answer.created, sealer=answer.sealer)


#: OpenAI Responses.
RESPONSES = ResponsesApi()
