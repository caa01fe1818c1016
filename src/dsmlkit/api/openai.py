"""OpenAI Chat Completions: request body → :class:`ChatRequest`; parser events → responses.

Non-streaming: :func:`openai_response` builds a ``chat.completion``. Streaming:
:class:`OpenAIStream` folds parser events into ``chat.completion.chunk`` dicts (api.md §1.3).
:data:`CHAT` is the API itself (:class:`ChatApi`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
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
    read_stop,
    read_switch,
    request_root,
    resolve_thinking,
)
from dsmlkit.api.errors import ApiError
from dsmlkit.api.sse import SSE_DONE, TextFrames, sse_openai
from dsmlkit.api.stream import BlockStream, Opened, TextKind, spliced
from dsmlkit.conversation.model import CHOICE_MODES, Conversation, Tool, ToolChoice
from dsmlkit.conversation.normalize import as_instruction, finish_conversation
from dsmlkit.conversation.readers import read_messages, read_response_format, read_tools
from dsmlkit.conversation.server_tools import read_server_tools
from dsmlkit.dialects import DEFAULT_DIALECT, Dialect
from dsmlkit.errors import CallerError
from dsmlkit.fields import Field
from dsmlkit.parse import ParsedMessage, ToolCall, ToolCallStart, UpstreamBlock, UpstreamFields
from dsmlkit.render import RenderCache, RenderOptions
from dsmlkit.render.renderer import resolve_dialect

#: Fields accepted that change nothing in the prompt (listed in the render notes).
IGNORED_FIELDS = ("metadata", "store", "user", "service_tier", "prompt_cache_key")
SAMPLING_NUMBERS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
)


# --- requests --------------------------------------------------------------------------


def parse_openai_request(
    body: Any, *, dialect: str | Dialect = DEFAULT_DIALECT, cache: RenderCache | None = None
) -> ChatRequest:
    """Validate a Chat Completions body and convert it; raises :class:`InvalidRequest` (400).

    The messages, tools and response format are the canonical form, read by
    :mod:`dsmlkit.conversation.readers` (with ``cache``, messages read before are reused),
    except that a ``developer`` message is OpenAI's (instructions: a system message at its
    place); this reader adds the request's own options.
    """
    root = request_root(body)
    model = root["model"].nonempty_string()
    resolved = resolve_dialect(dialect)
    notes: list[str] = []
    thinking, effort = _thinking(root, resolved, notes)
    note_ignored(root, IGNORED_FIELDS, notes)
    conversation = finish_conversation(
        [as_instruction(message) for message in read_messages(root["messages"], notes, cache)],
        read_tools(root["tools"], hosted=True),
        read_response_format(root["response_format"]),
        notes,
        _tool_choice(root["tool_choice"]),
    )
    add_generation_prompt, continue_final_message = _prefill(root, conversation)
    if root["n"].present and root["n"].integer() != 1:
        raise root["n"].error("only n=1 is supported")
    stream = root["stream"].boolean() if root["stream"].present else False
    options = root["stream_options"]
    include_usage = (
        options.present and options["include_usage"].present and options["include_usage"].boolean()
    )
    return ChatRequest(
        api=CHAT,
        model=model,
        conversation=conversation,
        render=RenderOptions(
            dialect=resolved,
            thinking=thinking,
            reasoning_effort=effort,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message,
        ),
        parse=ParseOptions(resolved, conversation.tools),
        parallel_tool_calls=(
            root["parallel_tool_calls"].boolean() if root["parallel_tool_calls"].present else True
        ),
        stream=stream,
        include_usage=include_usage,
        max_tokens=_max_tokens(root),
        sampling=_sampling(root),
        server_tools=read_server_tools(root["tools"]),
    )


def _tool_choice(field: Field) -> ToolChoice | None:
    """``none`` | ``auto`` | ``required`` | ``{"type": "function", "function": {"name"}}``."""
    if not field.present:
        return None
    if isinstance(field.value, str):
        return ToolChoice(CHOICE_MODES[field.choice(CHOICE_MODES)], param=field.path)
    field["type"].choice(("function",))
    name = field["function"]["name"]
    return ToolChoice("required", name.nonempty_string(), name.path)


def _thinking(root: Field, dialect: Dialect, notes: list[str]) -> tuple[bool, str | int | None]:
    """Thinking mode and effort: ``thinking.type`` (DeepSeek's switch), then
    ``chat_template_kwargs.thinking`` (vLLM's and SGLang's), then ``reasoning_effort``
    ``none``; thinking mode by default, as DeepSeek's API."""
    kwargs = root["chat_template_kwargs"]
    template_switch = kwargs["thinking"] if kwargs.present else kwargs
    switches = [
        (read_switch(root["thinking"]), "thinking.type"),
        (
            template_switch.boolean() if template_switch.present else None,
            "chat_template_kwargs.thinking",
        ),
    ]
    effort = read_effort(root["reasoning_effort"])
    return resolve_thinking(
        switches, effort, "reasoning_effort", default=True, dialect=dialect, notes=notes
    )


def _prefill(root: Field, conversation: Conversation) -> tuple[bool, bool]:
    """``(add_generation_prompt, continue_final_message)``; ``prefix: true`` on the final
    assistant message (DeepSeek's chat prefix completion) continues it too."""
    cont = root["continue_final_message"]
    gen = root["add_generation_prompt"]
    continue_final = (cont.boolean() if cont.present else False) or bool(conversation.prefix)
    if continue_final and conversation.messages[-1].role != "assistant":
        raise cont.error("needs the last message to be an assistant message to continue")
    add_generation = gen.boolean() if gen.present else not continue_final
    if continue_final and add_generation:
        raise gen.error("cannot be true together with continue_final_message")
    return add_generation, continue_final


def _max_tokens(root: Field) -> int | None:
    """``max_completion_tokens`` (OpenAI's current name) or else ``max_tokens``."""
    limit = root["max_completion_tokens"]
    if not limit.present:
        limit = root["max_tokens"]
    return limit.integer(minimum=1) if limit.present else None


def _sampling(root: Field) -> dict[str, Any]:
    sampling: dict[str, Any] = read_numbers(root, SAMPLING_NUMBERS)
    if root["stop"].present:
        sampling["stop"] = read_stop(root["stop"])
    if root["seed"].present:
        sampling["seed"] = root["seed"].integer()
    return sampling


# --- responses -------------------------------------------------------------------------


def openai_usage(usage: Usage) -> dict[str, Any]:
    """The ``usage`` object of a completion."""
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
    }


def _tool_call(call: ToolCall) -> dict[str, Any]:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments_json},
    }


def openai_response(
    msg: ParsedMessage, model: str, *, id: str, created: int, usage: Usage | None = None
) -> dict[str, Any]:
    """A ``chat.completion`` for one parsed model output of ``model``."""
    message: dict[str, Any] = {"role": "assistant", "content": msg.content or None}
    if msg.reasoning:
        message["reasoning_content"] = msg.reasoning
    if msg.calls:
        message["tool_calls"] = [_tool_call(call) for call in msg.calls]
    message.update(msg.upstream_fields)
    body: dict[str, Any] = {
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": msg.finish_reason, "logprobs": None}
        ],
    }
    if usage is not None:
        body["usage"] = openai_usage(usage)
    return body


class OpenAIStream(BlockStream[dict[str, Any]]):
    """Parser events → ``chat.completion.chunk`` dicts, or their SSE frames, for one completion.

    Call :meth:`start`, then :meth:`feed` with each batch of parser events (including the
    ``close()`` events), then :meth:`finish`; frame each chunk with ``sse_openai`` and end
    with ``SSE_DONE``. Or call :meth:`start_sse`, :meth:`feed_sse` and :meth:`finish_sse`,
    which return those frames (byte for byte) and build no chunk dict per text delta.
    The blocks are folded by :class:`~dsmlkit.api.stream.BlockStream`.
    """

    def __init__(self, req: ChatRequest, *, id: str, created: int) -> None:
        super().__init__(req, _ChatBlocks(self._chunk))
        self._head = {"id": id, "object": "chat.completion.chunk", "created": created}

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        chunk: dict[str, Any] = {
            **self._head,
            "model": self._req.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }
        if self._req.include_usage:
            chunk["usage"] = None
        return chunk

    def start(self) -> list[dict[str, Any]]:
        """The first chunk: the assistant role."""
        return [self._chunk({"role": "assistant", "content": None})]

    def finish(self, usage: Usage | None = None) -> list[dict[str, Any]]:
        """The finish chunk, then the usage chunk when the client asked for usage."""
        chunks = [self._chunk({}, self._end().finish_reason)]
        if self._req.include_usage:
            if usage is None:
                raise CallerError("this stream reports usage (include_usage): pass usage")
            chunks.append(
                {
                    **self._head,
                    "model": self._req.model,
                    "choices": [],
                    "usage": openai_usage(usage),
                }
            )
        return chunks

    def start_sse(self) -> list[str]:
        """:meth:`start` as SSE frames."""
        return [sse_openai(chunk) for chunk in self.start()]

    def finish_sse(self, usage: Usage | None = None, stop_sequence: str | None = None) -> list[str]:
        """:meth:`finish` as SSE frames, then ``SSE_DONE`` (a chunk has no field for the
        matched ``stop_sequence``)."""
        return [sse_openai(chunk) for chunk in self.finish(usage)] + [SSE_DONE]

    def error_sse(self, err: ApiError, request_id: str) -> list[str]:
        """A stream that fails ends with one chunk holding the error envelope."""
        return [sse_openai(CHAT.error_body(err, request_id))]


#: The shape of a text delta's chunk: "content", "reasoning", or the index of its call.
_TextKey = str | int


class _ChatBlocks:
    """Chat's block steps: a call opens with its first chunk (id, name); text blocks have
    no start frame and no block a stop frame; each delta is one chunk."""

    def __init__(self, chunk: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        self._chunk = chunk
        self._text_frames: TextFrames[_TextKey] = TextFrames(self._delta_frame)

    def open_text(self, kind: TextKind) -> Opened[dict[str, Any]]:
        return self._opened([], kind)

    def open_call(self, start: ToolCallStart) -> Opened[dict[str, Any]]:
        function = {"name": start.name, "arguments": ""}
        call = {"index": start.index, "id": start.id, "type": "function", "function": function}
        return self._opened([self._chunk({"tool_calls": [call]})], start.index)

    def close(self, completed: bool) -> list[dict[str, Any]]:
        return []

    def fields(self, event: UpstreamFields) -> list[dict[str, Any]]:
        """One chunk whose delta holds the fields as the upstream sent them."""
        return [self._chunk(dict(event.fields))]

    def block(self, event: UpstreamBlock) -> list[dict[str, Any]]:
        """A Chat Completions answer has no place for an Anthropic upstream's own blocks
        (the messages kind passes them on to Messages clients only)."""
        return []

    def sse(self, frame: dict[str, Any]) -> str:
        return sse_openai(frame)

    def _opened(self, frames: list[dict[str, Any]], key: _TextKey) -> Opened[dict[str, Any]]:
        return Opened(
            frames, partial(self._delta_chunk, key), spliced(self._text_frames.parts(key))
        )

    def _delta_chunk(self, key: _TextKey, text: str) -> dict[str, Any]:
        """The chunk of one text delta: ``key`` is its kind, or the index of its call."""
        if isinstance(key, int):
            return self._chunk({"tool_calls": [{"index": key, "function": {"arguments": text}}]})
        return self._chunk({"content" if key == "content" else "reasoning_content": text})

    def _delta_frame(self, key: _TextKey, text: str) -> str:
        return sse_openai(self._delta_chunk(key, text))


# --- the API ---------------------------------------------------------------------------


class ChatApi(ClientApi[ChatRequest]):
    """OpenAI Chat Completions, ``POST /v1/chat/completions``."""

    name = "chat"
    aliases = ("openai",)
    path = "/v1/chat/completions"
    response_id_prefix = "chatcmpl-"
    call_id_prefix = "call_"

    def read(self, body: Any, context: ReadContext) -> ChatRequest:
        return parse_openai_request(body, dialect=context.dialect, cache=context.cache)

    def read_tools(self, tools: Any) -> tuple[Tool, ...]:
        return tuple(read_tools(Field(tools, "tools"), hosted=True))

    def respond(
        self, msg: ParsedMessage, model: str, answer: Answer, req: ChatRequest | None
    ) -> dict[str, Any]:
        return openai_response(msg, model, id=answer.id, created=answer.created, usage=answer.usage)

    def open_stream(self, req: ChatRequest, answer: Answer) -> OpenAIStream:
        return OpenAIStream(req, id=answer.id, created=answer.created)


#: OpenAI Chat Completions.
CHAT = ChatApi()
