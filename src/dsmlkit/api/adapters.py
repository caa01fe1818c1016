"""The three client APIs as values: everything that differs between them, in one table.

An :class:`ApiAdapter` owns one API's side of a request, from the body to the bytes: its
request reader, its tool reader, its response builder, its stream writer, its error
envelope and its id prefixes. Code above this layer (the CLI, the server) holds an adapter
and asks it; :data:`ADAPTERS` is the only place that tells the APIs apart by name.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from dsmlkit.api.anthropic import (
    AnthropicStream,
    anthropic_response,
    anthropic_response_json,
    parse_anthropic_request,
    read_anthropic_tools,
)
from dsmlkit.api.common import Api, ChatRequest, Usage
from dsmlkit.api.errors import ApiError, anthropic_error_body, openai_error_body
from dsmlkit.api.openai import OpenAIStream, openai_response, parse_openai_request
from dsmlkit.api.responses import (
    ResponsesRequest,
    ResponsesStream,
    parse_responses_request,
    read_responses_tools,
    responses_response,
)
from dsmlkit.api.seal import Sealer
from dsmlkit.api.sse import json_body, sse_anthropic, sse_openai
from dsmlkit.dialects import Dialect
from dsmlkit.errors import CallerError, InvalidRequest
from dsmlkit.fields import Field
from dsmlkit.parse import Diagnostic, Event, ParsedMessage
from dsmlkit.render import RenderCache
from dsmlkit.render.conversation import Tool, read_tools


@dataclass(frozen=True)
class ReadContext:
    """What a request reader may use besides the body: the dialect, the ``sealer`` that
    opens sealed Responses reasoning, the caller's ``cache``, ``signatures``, which checks
    Anthropic thinking-block signatures, and the ``history`` items of a stored Responses
    conversation the body continues."""

    dialect: str | Dialect
    sealer: Sealer | None = None
    cache: RenderCache | None = None
    signatures: Sealer | None = None
    history: Sequence[Any] = ()


@dataclass(frozen=True)
class Answer:
    """What an answer carries besides the parsed message: its id and creation time, the
    usage (for a stream: what is known at its start), the matched stop string, how
    Anthropic thinking blocks are signed and what seals Responses reasoning."""

    id: str
    created: int
    usage: Usage | None = None
    stop_sequence: str | None = None
    sign_thinking: Callable[[str], str] | None = None
    sealer: Sealer | None = None


class StreamWriter(Protocol):
    """The SSE text of one streamed answer, from start to finish."""

    def start(self) -> list[str]: ...
    def feed(self, events: Sequence[Event]) -> list[str]: ...
    def finish(self, usage: Usage | None, stop_sequence: str | None) -> list[str]: ...
    def fail(self, err: ApiError, request_id: str) -> list[str]: ...
    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]: ...
    @property
    def response(self) -> dict[str, Any] | None:
        """The finished Responses ``response`` object (other APIs: None)."""
        ...


@dataclass(frozen=True)
class ApiAdapter:
    """One client API: how its requests are read and its answers written.

    ``keeps_responses``: a finished answer is a response object the server may store
    (Responses' ``store`` / ``previous_response_id``). ``chat_form``: the request body is
    already an OpenAI chat body (sent to a chat upstream as it came).
    ``beta_header``: the request header naming beta features the API accepts.
    ``usage_at_start``: a streamed answer reports the prompt's tokens before any output
    (Messages' ``message_start``).
    """

    name: Api
    response_id_prefix: str
    call_id_prefix: str
    read_body: Callable[[Any, ReadContext], ChatRequest]
    read_tool_list: Callable[[Field], Sequence[Tool]]
    respond: Callable[[ParsedMessage, str, Answer, ChatRequest | None], dict[str, Any]]
    respond_json: Callable[[ParsedMessage, str, Answer, ChatRequest | None], bytes]
    open_stream: Callable[[ChatRequest, Answer], StreamWriter]
    envelope: Callable[[ApiError | InvalidRequest, str | None], dict[str, Any]]
    keeps_responses: bool = False
    chat_form: bool = False
    beta_header: str | None = None
    usage_at_start: bool = False

    def read(self, body: Any, context: ReadContext) -> ChatRequest:
        """The typed request of ``body``; raises ``InvalidRequest`` naming the field."""
        return self.read_body(body, context)

    def read_tools(self, tools: Any) -> tuple[Tool, ...]:
        """A ``tools`` list in this API's form, read and checked as the request reader does."""
        return tuple(self.read_tool_list(Field(tools, "tools")))

    def new_response_id(self) -> str:
        """A fresh answer id: this API's prefix and 24 random hex digits."""
        return self.response_id_prefix + secrets.token_hex(12)

    def call_ids(self, token: Callable[[], str] | None = None) -> Callable[[], str]:
        """Fresh tool-call ids with this API's prefix (``token``: the part after it;
        default 24 random hex digits)."""
        make_token = token or (lambda: secrets.token_hex(12))
        prefix = self.call_id_prefix
        return lambda: prefix + make_token()

    def error_body(
        self, err: ApiError | InvalidRequest, request_id: str | None = None
    ) -> dict[str, Any]:
        """``err`` in this API's error envelope (with the server's ``request_id`` where the
        API carries one)."""
        return self.envelope(err, request_id)


class _SseStream(Protocol):
    """What the three API streams share: they write their own SSE."""

    @property
    def diagnostics(self) -> Sequence[Diagnostic]: ...
    def start_sse(self) -> list[str]: ...
    def feed_sse(self, events: Sequence[Event]) -> list[str]: ...


@dataclass
class _Writer:
    """A :class:`StreamWriter` over one API's stream: its start and deltas as they are,
    how it finishes and fails, and the response object it ends with (if any)."""

    stream: _SseStream
    finish_with: Callable[[Usage | None, str | None], list[str]]
    fail_with: Callable[[ApiError, str], list[str]]
    response_of: Callable[[], dict[str, Any] | None] = lambda: None

    def start(self) -> list[str]:
        return self.stream.start_sse()

    def feed(self, events: Sequence[Event]) -> list[str]:
        return self.stream.feed_sse(events)

    def finish(self, usage: Usage | None, stop_sequence: str | None) -> list[str]:
        return self.finish_with(usage, stop_sequence)

    def fail(self, err: ApiError, request_id: str) -> list[str]:
        return self.fail_with(err, request_id)

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]:
        return tuple(self.stream.diagnostics)

    @property
    def response(self) -> dict[str, Any] | None:
        return self.response_of()


# --- Chat Completions ------------------------------------------------------------------


def _chat_stream(req: ChatRequest, answer: Answer) -> StreamWriter:
    stream = OpenAIStream(req, id=answer.id, created=answer.created)
    return _Writer(
        stream,
        lambda usage, stop_sequence: stream.finish_sse(usage),
        lambda err, request_id: [sse_openai(CHAT.error_body(err, request_id))],
    )


def _chat_response(
    msg: ParsedMessage, model: str, answer: Answer, req: ChatRequest | None
) -> dict[str, Any]:
    return openai_response(msg, model, id=answer.id, created=answer.created, usage=answer.usage)


def _chat_json(msg: ParsedMessage, model: str, answer: Answer, req: ChatRequest | None) -> bytes:
    return json_body(_chat_response(msg, model, answer, req))


CHAT = ApiAdapter(
    name="openai",
    response_id_prefix="chatcmpl-",
    call_id_prefix="call_",
    read_body=lambda body, c: parse_openai_request(body, dialect=c.dialect, cache=c.cache),
    read_tool_list=read_tools,
    respond=_chat_response,
    respond_json=_chat_json,
    open_stream=_chat_stream,
    envelope=lambda err, request_id: openai_error_body(err),
    chat_form=True,
)


# --- Messages --------------------------------------------------------------------------


def _messages_stream(req: ChatRequest, answer: Answer) -> StreamWriter:
    stream = AnthropicStream(
        req, id=answer.id, usage=answer.usage, sign_thinking=answer.sign_thinking
    )
    return _Writer(
        stream,
        lambda usage, stop_sequence: stream.finish_sse(usage, stop_sequence=stop_sequence),
        lambda err, request_id: [sse_anthropic("error", MESSAGES.error_body(err, request_id))],
    )


def _messages_response(
    msg: ParsedMessage, model: str, answer: Answer, req: ChatRequest | None
) -> dict[str, Any]:
    return anthropic_response(msg, model, **_messages_fields(answer, req))


def _messages_json(
    msg: ParsedMessage, model: str, answer: Answer, req: ChatRequest | None
) -> bytes:
    return anthropic_response_json(msg, model, **_messages_fields(answer, req))


def _messages_fields(answer: Answer, req: ChatRequest | None) -> dict[str, Any]:
    return {
        "id": answer.id,
        "usage": answer.usage,
        "stop_sequence": answer.stop_sequence,
        "sign_thinking": answer.sign_thinking,
        "omit_thinking": req is not None and req.omit_reasoning,
    }


MESSAGES = ApiAdapter(
    name="anthropic",
    response_id_prefix="msg_",
    call_id_prefix="toolu_",
    read_body=lambda body, c: parse_anthropic_request(
        body, dialect=c.dialect, signatures=c.signatures
    ),
    read_tool_list=lambda field: read_anthropic_tools(field, [])[0],
    respond=_messages_response,
    respond_json=_messages_json,
    open_stream=_messages_stream,
    envelope=lambda err, request_id: (
        anthropic_error_body(err)
        if request_id is None
        else {**anthropic_error_body(err), "request_id": request_id}
    ),
    beta_header="anthropic-beta",
    usage_at_start=True,
)


# --- Responses -------------------------------------------------------------------------


def _responses_stream(req: ChatRequest, answer: Answer) -> StreamWriter:
    """A Responses stream ends in its own events, failed ones too, and keeps its response."""
    stream = ResponsesStream(
        _responses_request(req), id=answer.id, created_at=answer.created, sealer=answer.sealer
    )
    return _Writer(
        stream,
        lambda usage, stop_sequence: stream.finish_sse(usage),
        lambda err, request_id: stream.fail_sse(str(err)),
        lambda: stream.response,
    )


def _responses_request(req: ChatRequest | None) -> ResponsesRequest:
    if not isinstance(req, ResponsesRequest):
        raise CallerError("a Responses answer echoes its request: pass the ResponsesRequest")
    return req


def _responses_response(
    msg: ParsedMessage, model: str, answer: Answer, req: ChatRequest | None
) -> dict[str, Any]:
    return responses_response(
        msg,
        _responses_request(req),
        id=answer.id,
        created_at=answer.created,
        usage=answer.usage,
        sealer=answer.sealer,
    )


def _responses_json(
    msg: ParsedMessage, model: str, answer: Answer, req: ChatRequest | None
) -> bytes:
    return json_body(_responses_response(msg, model, answer, req))


RESPONSES = ApiAdapter(
    name="responses",
    response_id_prefix="resp_",
    call_id_prefix="call_",
    read_body=lambda body, c: parse_responses_request(
        body, dialect=c.dialect, sealer=c.sealer, history=c.history
    ),
    read_tool_list=lambda field: read_responses_tools(field, [])[0],
    respond=_responses_response,
    respond_json=_responses_json,
    open_stream=_responses_stream,
    envelope=lambda err, request_id: openai_error_body(err),
    keeps_responses=True,
)


#: Every API by its name (``ChatRequest.api``).
ADAPTERS: dict[Api, ApiAdapter] = {adapter.name: adapter for adapter in (CHAT, MESSAGES, RESPONSES)}


def adapter_for(api: Api) -> ApiAdapter:
    """The adapter of the API named ``api`` (``openai``, ``anthropic``, ``responses``)."""
    try:
        return ADAPTERS[api]
    except KeyError:
        raise CallerError(f"unknown API {api!r}; expected one of {', '.join(ADAPTERS)}") from None
