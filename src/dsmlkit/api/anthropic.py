"""Anthropic Messages: request body → :class:`ChatRequest`; parser events → messages and events.

Conversion rules follow api.md §0 (one tool message per ``tool_result``, references first,
images in a user message right after it; thinking → ``reasoning_content``). Non-streaming:
:func:`anthropic_response`. Streaming: :class:`AnthropicStream` emits the event grammar of
api.md §2.4 (one block open at a time, strictly increasing indexes, no ``[DONE]``).
:data:`MESSAGES` is the API itself (:class:`MessagesApi`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeVar

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
    read_stop,
    read_switch,
    request_root,
    resolve_thinking,
)
from dsmlkit.api.errors import ApiError, anthropic_error_body
from dsmlkit.api.seal import Sealer, SealError
from dsmlkit.api.sse import RawJSON, TextFrames, json_body, sse_anthropic
from dsmlkit.api.stream import BlockStream, Opened, TextKind, spliced
from dsmlkit.conversation.model import (
    CHOICE_MODES,
    HistoryCall,
    ImagePart,
    Message,
    Part,
    RawBlockPart,
    Role,
    TextPart,
    Tool,
    ToolChoice,
)
from dsmlkit.conversation.normalize import finish_conversation
from dsmlkit.conversation.readers import check_call_ids, tool, tool_name, tool_reference
from dsmlkit.conversation.server_tools import is_server_tool, read_server_tools
from dsmlkit.dialects import DEFAULT_DIALECT, Dialect
from dsmlkit.errors import InvalidRequest
from dsmlkit.fields import Field
from dsmlkit.parse import (
    FinishReason,
    ParsedMessage,
    PlacedBlock,
    ToolCall,
    ToolCallStart,
    UpstreamBlock,
    UpstreamFields,
)
from dsmlkit.render import RenderOptions
from dsmlkit.render.renderer import resolve_dialect

#: Signature on thinking blocks when no signer is given (the gateway signs its own).
THINKING_SIGNATURE = "dsmlkit-unsigned"
#: Claude Code's per-request system block; it would defeat prefix caching.
BILLING_HEADER = "x-anthropic-billing-header"
#: Fields accepted that change nothing in the prompt (listed in the render notes).
IGNORED_FIELDS = ("metadata", "context_management", "service_tier", "cache_control")

#: The roles besides ``user`` and ``assistant`` of messages that hold text only: ``system``
#: and DeepSeek's ``latest_reminder`` (the user's date, place, platform and language, put
#: directly before the user message it belongs to; written after ``<｜latest_reminder｜>``).
_TEXT_ROLES: dict[str, Role] = {"system": "system", "latest_reminder": "latest_reminder"}

STOP_REASONS: dict[FinishReason, str] = {
    "tool_calls": "tool_use",
    "length": "max_tokens",
    "stop": "end_turn",
}


# --- requests --------------------------------------------------------------------------


def parse_anthropic_request(
    body: Any, *, dialect: str | Dialect = DEFAULT_DIALECT, signatures: Sealer | None = None
) -> ChatRequest:
    """Validate a Messages body and convert it; raises :class:`InvalidRequest` (400).

    ``signatures`` checks the signatures of thinking blocks (sealed for the body's model):
    an assistant turn whose thinking blocks are not all validly signed, or that has a
    ``redacted_thinking`` block, gets ``reasoning_trusted`` false. Without it, thinking
    text is read as sent.
    """
    root = request_root(body)
    model = root["model"].nonempty_string()
    resolved = resolve_dialect(dialect)
    max_tokens = root["max_tokens"].integer(minimum=1)
    sampling: dict[str, Any] = {}
    notes: list[str] = []
    reader = _Conversation(notes, signatures, model)
    tools, server_tools = _read_anthropic_tools(root["tools"], notes, reader.cached)
    messages: list[Message] = []
    system = reader.system_text(root["system"]) if root["system"].present else ""
    if system:
        messages.append(Message("system", "system", (TextPart(system),), plain=True))
    messages += reader.convert(root["messages"])
    requested_effort, response_format = _output_config(root["output_config"])
    budget = root["thinking"]["budget_tokens"] if root["thinking"].present else root["thinking"]
    if budget.present:
        budget.integer(minimum=1)  # accepted, cannot be enforced
    display = root["thinking"]["display"] if root["thinking"].present else root["thinking"]
    omitted = display.present and display.choice(("summarized", "omitted")) == "omitted"
    thinking, effort = resolve_thinking(
        [(read_switch(root["thinking"], adaptive=True), "thinking.type")],
        requested_effort,
        "output_config.effort",
        default=False,
        dialect=resolved,
        notes=notes,
    )
    reader.note_cached()
    note_ignored(root, IGNORED_FIELDS, notes)
    tool_choice, parallel = _tool_choice(root["tool_choice"], server_tools)
    conversation = finish_conversation(messages, tools, response_format, notes, tool_choice)
    prefill = conversation.messages[-1].role == "assistant"
    sampling.update(read_numbers(root, ("temperature", "top_p", "top_k")))
    if root["stop_sequences"].present:
        sampling["stop"] = read_stop(root["stop_sequences"])
    return ChatRequest(
        api=MESSAGES,
        model=model,
        conversation=conversation,
        render=RenderOptions(
            dialect=resolved,
            thinking=thinking,
            reasoning_effort=effort,
            add_generation_prompt=not prefill,
            continue_final_message=prefill,
        ),
        parse=ParseOptions(resolved, conversation.tools),
        parallel_tool_calls=parallel,
        stream=root["stream"].boolean() if root["stream"].present else False,
        include_usage=True,
        max_tokens=max_tokens,
        sampling=sampling,
        omit_reasoning=omitted,
        server_tools=read_server_tools(root["tools"]),
    )


def _image_part(block: Field) -> ImagePart:
    source = block["source"]
    kind = source["type"].choice(("base64", "url"))
    if kind == "url":
        return ImagePart(source["url"].nonempty_string(), block.path)
    media_type = source["media_type"].nonempty_string()
    data = source["data"].nonempty_string()
    return ImagePart(f"data:{media_type};base64,{data}", block.path)


def _document_part(block: Field) -> TextPart:
    """A ``document`` block with a text source (``text``, or ``content`` text blocks) as
    text, its ``title`` on the first line; other sources cannot be rendered (400)."""
    source = block["source"]
    kind = source["type"].string()
    if kind == "text":
        text = source["data"].string()
    elif kind == "content":
        content = source["content"]
        if isinstance(content.value, str):
            text = content.value
        else:
            text = "\n\n".join(item["text"].string() for item in content.array())
    else:
        raise source["type"].error(
            f"a {kind!r} document source cannot be rendered into a DeepSeek prompt; "
            "send the document's text (source type 'text' or 'content')"
        )
    title = block["title"].string() if block["title"].present else ""
    return TextPart(f"{title}\n\n{text}" if title else text)


def _end_run(texts: list[str], parts: list[Part]) -> None:
    """A run of text blocks as one text part (none when empty); the run starts again."""
    text = "".join(texts)
    if text:
        parts.append(TextPart(text))
    texts.clear()


def _tool_use(block: Field) -> HistoryCall:
    return HistoryCall(
        block["id"].nonempty_string(),
        tool_name(block["name"]),
        dict(block["input"].object()),
    )


class _Conversation:
    """Converts ``messages`` in order into typed messages (tool results one message each)."""

    def __init__(self, notes: list[str], signatures: Sealer | None, model: str) -> None:
        self._notes = notes
        self._signatures = signatures
        self._model = model
        #: Paths of the blocks that carry ``cache_control`` (it changes nothing here).
        self.cached: list[str] = []

    def note_cached(self) -> None:
        """One note for every ``cache_control`` the request carried."""
        if self.cached:
            where = ", ".join(self.cached[:3]) + (", …" if len(self.cached) > 3 else "")
            self._notes.append(
                f"cache_control on {len(self.cached)} blocks ({where}): accepted; "
                "changes nothing in the prompt (prefix caching is the engine's)"
            )

    def block_type(self, block: Field) -> str:
        """A content block's ``type``; its ``cache_control`` is recorded."""
        if block["cache_control"].present:
            self.cached.append(block.path)
        return block.type_tag()

    def system_text(self, field: Field) -> str:
        """System text: a string, or text blocks joined with "" minus the billing header."""
        if isinstance(field.value, str):
            return field.value
        texts = []
        for block in field.array():
            if self.block_type(block) != "text":
                raise block["type"].error("must be text")
            text = block["text"].string()
            if not text.startswith(BILLING_HEADER):
                texts.append(text)
        return "".join(texts)

    def convert(self, field: Field) -> list[Message]:
        items = field.array()
        if not items:
            raise field.error("must hold at least one message")
        messages: list[Message] = []
        for item in items:
            role = item["role"].choice(("user", "assistant", *_TEXT_ROLES))
            content = item["content"]
            if role in _TEXT_ROLES:
                text = (TextPart(self.system_text(content)),)
                messages.append(Message(item.path, _TEXT_ROLES[role], text, plain=True))
            elif role == "assistant":
                messages.append(self._assistant(item.path, content))
            else:
                messages += self._user(item.path, content)
        return messages

    def _blocks(self, content: Field) -> list[Field] | None:
        """The content blocks, or ``None`` for string content."""
        if isinstance(content.value, str):
            return None
        if not isinstance(content.value, list):
            raise content.error("must be a string or an array of content blocks")
        return content.array()

    def _raw(self, block: Field, kind: str) -> RawBlockPart:
        """A block nothing here reads, kept whole (see :class:`RawBlockPart`), and noted."""
        self._notes.append(
            f"{block.path}: a {kind} block, kept whole for an Anthropic Messages upstream "
            "(--upstream-api messages); the prompt and the chat form leave it out"
        )
        return RawBlockPart(block.value, block.path)

    def _assistant(self, where: str, content: Field) -> Message:
        """Thinking blocks are the turn's reasoning and ``tool_use`` blocks its calls; its
        text blocks are joined, each run of them one text part, in place among the blocks
        of other types, which are kept whole (``redacted_thinking`` leaves the reasoning
        unverified)."""
        blocks = self._blocks(content)
        if blocks is None:
            return Message(where, "assistant", (TextPart(content.value),), plain=True)
        parts: list[Part] = []
        texts: list[str] = []  # the run of text blocks since the last kept block
        reasoning: list[str] = []
        calls: list[HistoryCall] = []
        trusted = True
        for block in blocks:
            kind = self.block_type(block)
            if kind == "text":
                texts.append(block["text"].string())
            elif kind == "thinking":
                reasoning.append(block["thinking"].string())
                trusted = trusted and self._signed(block, reasoning[-1])
            elif kind == "tool_use":
                calls.append(_tool_use(block))
            else:
                trusted = trusted and kind != "redacted_thinking"
                _end_run(texts, parts)
                parts.append(self._raw(block, kind))
        _end_run(texts, parts)
        if not (parts or reasoning or calls):
            parts.append(TextPart(""))
        return Message(
            where,
            "assistant",
            tuple(parts),
            reasoning="".join(reasoning) if reasoning else None,
            tool_calls=check_call_ids(calls, content),
            reasoning_trusted=trusted or self._signatures is None,
        )

    def _signed(self, block: Field, thinking: str) -> bool:
        """Whether a thinking block's signature seals exactly its text for the model."""
        signature = block["signature"].value
        if self._signatures is None or not isinstance(signature, str):
            return False
        try:
            return self._signatures.open(signature, self._model) == thinking
        except SealError:
            return False

    def _user(self, where: str, content: Field) -> list[Message]:
        blocks = self._blocks(content)
        if blocks is None:
            return [Message(where, "user", (TextPart(content.value),), plain=True)]
        messages: list[Message] = []
        parts: list[Part] = []

        def flush() -> None:
            if parts:
                messages.append(Message(where, "user", tuple(parts)))
                parts.clear()

        for block in blocks:
            kind = self.block_type(block)
            if kind == "text":
                if block["text"].string():
                    parts.append(TextPart(block["text"].value))
            elif kind == "image":
                parts.append(_image_part(block))
            elif kind == "document":
                parts.append(_document_part(block))
            elif kind == "tool_reference":
                parts.append(TextPart(tool_reference(block).name))
            elif kind == "tool_result":
                flush()
                messages += self._tool_result(block)
            else:
                raise block.error(
                    f"{kind!r} blocks are not supported in user messages; "
                    "use text, image, document, tool_result or tool_reference"
                )
        flush()
        return messages or [Message(where, "user")]

    def _tool_result(self, block: Field) -> list[Message]:
        """One tool message (references, then text) and, for images, a user message after it."""
        id_field = block["tool_use_id"] if block["tool_use_id"].present else block["id"]
        references: list[Part] = []
        texts: list[Part] = []
        images: list[Part] = []
        content = block["content"]
        if content.present and not isinstance(content.value, str):
            for part in content.array():
                kind = self.block_type(part)
                if kind == "text":
                    if part["text"].string():
                        texts.append(TextPart(part["text"].value))
                elif kind == "document":
                    texts.append(_document_part(part))
                elif kind == "tool_reference":
                    references.append(tool_reference(part))
                elif kind == "image":
                    images.append(_image_part(part))
                else:
                    raise part.error(
                        f"{kind!r} items are not supported in a tool_result; "
                        "use text, image, document or tool_reference"
                    )
        plain = isinstance(content.value, str)
        message = Message(
            block.path,
            "tool",
            (TextPart(content.value),) if plain else tuple(references + texts),
            tool_call_id=id_field.nonempty_string() if id_field.present else None,
            is_error=block["is_error"].present and block["is_error"].boolean(),
            plain=plain,
            id_param=block.path,
        )
        return [message, Message(block.path, "user", tuple(images))] if images else [message]


def _read_anthropic_tools(
    field: Field, notes: list[str], cached: list[str] | None = None
) -> tuple[list[Tool], set[str]]:
    """Custom tools as typed tools; server tools are not (their names returned): a hosted
    endpoint's are carried by
    :func:`~dsmlkit.conversation.server_tools.read_server_tools`, others dropped.

    The paths of tools carrying ``cache_control`` are added to ``cached``.
    """
    tools: list[Tool] = []
    server_tools: set[str] = set()
    if not field.present:
        return tools, server_tools
    for item in field.array():
        if cached is not None and item["cache_control"].present:
            cached.append(item.path)
        kind = item["type"].string() if item["type"].present else "custom"
        if kind != "custom":
            name = item["name"].value if isinstance(item["name"].value, str) else kind
            server_tools.add(name)
            if not is_server_tool(item.value):  # else carried (dsmlkit.conversation.server_tools)
                notes.append(
                    f"{item.path}: dropped server tool {name!r} ({kind}); dsmlkit runs none"
                )
            continue
        function: dict[str, Any] = {"name": item["name"].value}
        if item["description"].present:
            function["description"] = item["description"].string()
        function["parameters"] = dict(item["input_schema"].object())
        if item["strict"].present:
            function["strict"] = item["strict"].boolean()
        deferred = item["defer_loading"]
        tools.append(
            tool(function, deferred.boolean() if deferred.present else False, item["name"].path)
        )
    return tools, server_tools


def _tool_choice(field: Field, server_tools: set[str]) -> tuple[ToolChoice | None, bool]:
    """``(tool_choice, parallel_tool_calls)``: ``any`` is ``required``, ``tool`` names one."""
    if not field.present:
        return None, True
    kind = field["type"].choice(("auto", "any", "tool", "none"))
    no_parallel = field["disable_parallel_tool_use"]
    parallel = not (no_parallel.present and no_parallel.boolean())
    if kind == "tool":
        name = field["name"]
        if name.string() in server_tools:
            raise name.error(f"names the server tool {name.value!r}, which dsmlkit does not run")
        return ToolChoice("required", name.nonempty_string(), name.path), parallel
    mode = CHOICE_MODES["required" if kind == "any" else kind]
    return ToolChoice(mode, param=field.path), parallel


def _output_config(field: Field) -> tuple[str | int | None, dict[str, Any] | None]:
    """``(reasoning_effort, response_format)`` from ``output_config``."""
    if not field.present:
        return None, None
    effort = read_effort(field["effort"])
    response_format = None
    if field["format"].present:
        field["format"]["type"].choice(("json_schema",))
        schema = dict(field["format"]["schema"].object())
        response_format = {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": schema},
        }
    return effort, response_format


# --- responses -------------------------------------------------------------------------


def anthropic_usage(usage: Usage | None) -> dict[str, Any]:
    """Anthropic usage: ``input_tokens`` excludes the cached part of the prompt."""
    usage = usage or Usage(0, 0)
    return {
        "input_tokens": usage.prompt_tokens - usage.cached_tokens,
        "output_tokens": usage.completion_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": usage.cached_tokens,
    }


def _stop(finish_reason: FinishReason, stop_sequence: str | None) -> tuple[str, str | None]:
    """``(stop_reason, stop_sequence)``; a matched stop string turns end_turn into stop_sequence."""
    reason = STOP_REASONS[finish_reason]
    if reason == "end_turn" and stop_sequence is not None:
        return "stop_sequence", stop_sequence
    return reason, None


def anthropic_response(
    msg: ParsedMessage,
    model: str,
    *,
    id: str,
    usage: Usage | None = None,
    stop_sequence: str | None = None,
    sign_thinking: Callable[[str], str] | None = None,
    omit_thinking: bool = False,
) -> dict[str, Any]:
    """A ``message`` for one parsed output of ``model`` (never with empty ``content``).

    ``sign_thinking(text)`` makes the thinking block's signature (default: a constant);
    ``omit_thinking`` leaves the block's text empty (``display: "omitted"``), its signature
    still made from the text.
    """
    return _message_body(
        msg, model, id, usage, stop_sequence, sign_thinking, omit_thinking, _call_input
    )


def anthropic_response_json(
    msg: ParsedMessage,
    model: str,
    *,
    id: str,
    usage: Usage | None = None,
    stop_sequence: str | None = None,
    sign_thinking: Callable[[str], str] | None = None,
    omit_thinking: bool = False,
) -> bytes:
    """:func:`anthropic_response` as its JSON text (UTF-8), written once: each call's
    ``input`` is the argument JSON the parser wrote, embedded as it is (not decoded and
    encoded again)."""
    body = _message_body(
        msg, model, id, usage, stop_sequence, sign_thinking, omit_thinking, _raw_call_input
    )
    return json_body(body)


def _call_input(call: ToolCall) -> Any:
    return call.arguments


def _raw_call_input(call: ToolCall) -> Any:
    return RawJSON(call.arguments_json)


def _message_body(
    msg: ParsedMessage,
    model: str,
    id: str,
    usage: Usage | None,
    stop_sequence: str | None,
    sign_thinking: Callable[[str], str] | None,
    omit_thinking: bool,
    call_input: Callable[[ToolCall], Any],
) -> dict[str, Any]:
    """The ``message`` body, each call's ``input`` written by ``call_input``."""
    content: list[dict[str, Any]] = []
    if msg.reasoning:
        signature = sign_thinking(msg.reasoning) if sign_thinking else THINKING_SIGNATURE
        shown = "" if omit_thinking else msg.reasoning
        content.append({"type": "thinking", "thinking": shown, "signature": signature})
    content += _text_and_blocks(msg.content, msg.upstream_blocks)
    content += [
        {"type": "tool_use", "id": call.id, "name": call.name, "input": call_input(call)}
        for call in msg.calls
    ]
    stop_reason, matched = _stop(msg.finish_reason, stop_sequence)
    return {
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content or [{"type": "text", "text": ""}],
        "stop_reason": stop_reason,
        "stop_sequence": matched,
        "usage": anthropic_usage(usage),
    }


def _text_and_blocks(text: str, blocks: Sequence[PlacedBlock]) -> list[dict[str, Any]]:
    """The answer's text as text blocks, with the upstream's own blocks whole in their
    places: one text block when there are none (none when the text is empty)."""
    out: list[dict[str, Any]] = []
    start = 0
    for placed in blocks:
        if placed.at > start:
            out.append({"type": "text", "text": text[start : placed.at]})
            start = placed.at
        out.append(dict(placed.block))
    if text[start:]:
        out.append({"type": "text", "text": text[start:]})
    return out


StreamEvent = tuple[str, dict[str, Any]]
_Out = TypeVar("_Out")
#: The delta type of each block type, and the field that holds the delta's text.
_DELTA_TYPES = {"text": "text_delta", "thinking": "thinking_delta", "tool_use": "input_json_delta"}
_DELTA_FIELDS = {
    "text_delta": "text",
    "thinking_delta": "thinking",
    "input_json_delta": "partial_json",
}


class AnthropicStream(BlockStream[StreamEvent]):
    """Parser events → Anthropic stream events ``(name, data)`` for one streamed message.

    Call :meth:`start`, then :meth:`feed` with each batch of parser events (including the
    ``close()`` events), then :meth:`finish`; frame each event with ``sse_anthropic``. Or
    call :meth:`start_sse`, :meth:`feed_sse` and :meth:`finish_sse`, which return those
    frames (byte for byte) and build no event dict per text delta.
    ``usage`` given here is the prompt's (reported in ``message_start``); ``sign_thinking``
    as for :func:`anthropic_response`. A request with ``omit_reasoning`` gets thinking
    blocks without ``thinking_delta`` events: start, ``signature_delta``, stop.
    The blocks are folded by :class:`~dsmlkit.api.stream.BlockStream`.
    """

    def __init__(
        self,
        req: ChatRequest,
        *,
        id: str,
        usage: Usage | None = None,
        sign_thinking: Callable[[str], str] | None = None,
    ) -> None:
        self._content_blocks = _MessagesBlocks(sign_thinking, req.omit_reasoning)
        super().__init__(req, self._content_blocks)
        self._id = id
        self._prompt_usage = usage

    def start(self) -> list[StreamEvent]:
        """``message_start``."""
        message: dict[str, Any] = {
            "id": self._id,
            "type": "message",
            "role": "assistant",
            "model": self._req.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": anthropic_usage(self._prompt_usage),
        }
        return [("message_start", {"type": "message_start", "message": message})]

    def finish(
        self, usage: Usage | None = None, stop_sequence: str | None = None
    ) -> list[StreamEvent]:
        """Close the last block; then ``message_delta`` (stop reason, usage), ``message_stop``."""
        message = self._end()
        out = self._close()
        blocks = self._content_blocks
        if not blocks.count:  # an empty completion still has one (empty) text block
            out += blocks.open_text("content").frames + blocks.close(False)
        stop_reason, matched = _stop(message.finish_reason, stop_sequence)
        final = anthropic_usage(usage)
        out.append(
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop_reason, "stop_sequence": matched},
                    "usage": final,
                },
            )
        )
        out.append(("message_stop", {"type": "message_stop"}))
        return out

    def start_sse(self) -> list[str]:
        """:meth:`start` as SSE frames."""
        return [sse_anthropic(name, data) for name, data in self.start()]

    def finish_sse(self, usage: Usage | None = None, stop_sequence: str | None = None) -> list[str]:
        """:meth:`finish` as SSE frames."""
        return [sse_anthropic(name, data) for name, data in self.finish(usage, stop_sequence)]

    def error_sse(self, err: ApiError, request_id: str) -> list[str]:
        """A stream that fails ends with an ``error`` event holding the error envelope."""
        return [sse_anthropic("error", MESSAGES.error_body(err, request_id))]


class _MessagesBlocks:
    """Messages' block steps: ``content_block_start`` (indexes 0, 1, 2 …), one
    ``content_block_delta`` per delta, ``content_block_stop``; a thinking block's text is
    kept until its stop, which a ``signature_delta`` of that text precedes."""

    def __init__(self, sign_thinking: Callable[[str], str] | None, omit_thinking: bool) -> None:
        self._sign_thinking = sign_thinking
        self._omit_thinking = omit_thinking
        self._thinking: list[str] = []  # the open thinking block's text
        self.count = 0  # blocks started so far; the open one has index count - 1
        self._open: str | None = None  # type of the open block
        self._delta_types: list[str] = []  # of each block's text deltas, by block index
        self._text_frames: TextFrames[int] = TextFrames(self._delta_frame)

    def open_text(self, kind: TextKind) -> Opened[StreamEvent]:
        if kind == "content":
            return self._opened("text", {"text": ""})
        return self._opened("thinking", {"thinking": "", "signature": ""})

    def open_call(self, start: ToolCallStart) -> Opened[StreamEvent]:
        return self._opened("tool_use", {"id": start.id, "name": start.name, "input": {}})

    def fields(self, event: UpstreamFields) -> list[StreamEvent]:
        """A Messages answer has no place for a chat upstream's own fields (the chat kind
        passes them on to Chat Completions clients only)."""
        return []

    def block(self, event: UpstreamBlock) -> list[StreamEvent]:
        """The block at the next index as the upstream streamed it: its start, its deltas,
        its stop."""
        index = self.count
        self.count += 1
        self._delta_types.append("")  # a block whose deltas are not text
        block = dict(event.start)
        start = {"type": "content_block_start", "index": index, "content_block": block}
        out: list[StreamEvent] = [("content_block_start", start)]
        out += [_block_delta(index, dict(delta)) for delta in event.deltas]
        return [*out, ("content_block_stop", {"type": "content_block_stop", "index": index})]

    def close(self, completed: bool) -> list[StreamEvent]:
        if self._open is None:
            return []
        out: list[StreamEvent] = []
        if self._open == "thinking":
            text = "".join(self._thinking)
            self._thinking.clear()
            signature = self._sign_thinking(text) if self._sign_thinking else THINKING_SIGNATURE
            delta = {"type": "signature_delta", "signature": signature}
            out.append(_block_delta(self.count - 1, delta))
        self._open = None
        stop = {"type": "content_block_stop", "index": self.count - 1}
        return [*out, ("content_block_stop", stop)]

    def sse(self, frame: StreamEvent) -> str:
        return sse_anthropic(*frame)

    def _opened(self, kind: str, fields: dict[str, Any]) -> Opened[StreamEvent]:
        index = self.count
        self.count += 1
        self._open = kind
        self._delta_types.append(_DELTA_TYPES[kind])
        block = {"type": kind, **fields}
        data = {"type": "content_block_start", "index": index, "content_block": block}
        event = partial(self._delta, index)
        sse = spliced(self._text_frames.parts(index))
        if kind == "thinking":
            return Opened([("content_block_start", data)], self._kept(event), self._kept(sse))
        return Opened([("content_block_start", data)], event, sse)

    def _kept(self, write: Callable[[str], _Out]) -> Callable[[str], _Out | None]:
        """A thinking block's delta writer: the text is kept (signed at the block's stop);
        with ``omit_thinking`` the delta writes nothing (the signature is sent, the text
        is not)."""
        keep = self._thinking.append
        if self._omit_thinking:

            def keep_only(text: str) -> None:
                keep(text)

            return keep_only

        def keep_and_write(text: str) -> _Out:
            keep(text)
            return write(text)

        return keep_and_write

    def _delta(self, index: int, text: str) -> StreamEvent:
        """The ``content_block_delta`` of one text delta to block ``index``."""
        kind = self._delta_types[index]
        return _block_delta(index, {"type": kind, _DELTA_FIELDS[kind]: text})

    def _delta_frame(self, index: int, text: str) -> str:
        """The full frame of one text delta to block ``index``."""
        return sse_anthropic(*self._delta(index, text))


def _block_delta(index: int, delta: dict[str, Any]) -> StreamEvent:
    return ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})


# --- the API ---------------------------------------------------------------------------


class MessagesApi(ClientApi[ChatRequest]):
    """Anthropic Messages, ``POST /v1/messages``."""

    name = "messages"
    aliases = ("anthropic",)
    path = "/v1/messages"
    response_id_prefix = "msg_"
    call_id_prefix = "toolu_"
    beta_header = "anthropic-beta"
    usage_at_start = True

    def read(self, body: Any, context: ReadContext) -> ChatRequest:
        return parse_anthropic_request(body, dialect=context.dialect, signatures=context.signatures)

    def read_tools(self, tools: Any) -> tuple[Tool, ...]:
        return tuple(_read_anthropic_tools(Field(tools, "tools"), [])[0])

    def respond(
        self, msg: ParsedMessage, model: str, answer: Answer, req: ChatRequest | None
    ) -> dict[str, Any]:
        return anthropic_response(msg, model, **_answer_fields(answer, req))

    def respond_json(
        self, msg: ParsedMessage, model: str, answer: Answer, req: ChatRequest | None
    ) -> bytes:
        return anthropic_response_json(msg, model, **_answer_fields(answer, req))

    def open_stream(self, req: ChatRequest, answer: Answer) -> AnthropicStream:
        return AnthropicStream(
            req, id=answer.id, usage=answer.usage, sign_thinking=answer.sign_thinking
        )

    def error_body(
        self, err: ApiError | InvalidRequest, request_id: str | None = None
    ) -> dict[str, Any]:
        """Anthropic's envelope, with the server's ``request_id`` when there is one."""
        body = anthropic_error_body(err)
        return body if request_id is None else {**body, "request_id": request_id}


def _answer_fields(answer: Answer, req: ChatRequest | None) -> dict[str, Any]:
    """The keyword arguments of :func:`anthropic_response` for ``answer`` to ``req``."""
    return {
        "id": answer.id,
        "usage": answer.usage,
        "stop_sequence": answer.stop_sequence,
        "sign_thinking": answer.sign_thinking,
        "omit_thinking": req is not None and req.omit_reasoning,
    }


#: Anthropic Messages.
MESSAGES = MessagesApi()
