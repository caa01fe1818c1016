"""The client APIs as the routes use them: error bodies, responses and SSE frames.

Each route belongs to one API (``/v1/messages…`` is Anthropic, ``/v1/responses…`` OpenAI
Responses, everything else speaks OpenAI Chat's shapes); this module is the only place that
picks between the adapters.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from fastapi.responses import JSONResponse

from dsmlkit.api import (
    AnthropicStream,
    ChatRequest,
    OpenAIStream,
    ResponsesRequest,
    ResponsesStream,
    Usage,
    anthropic_error_body,
    anthropic_response,
    openai_error_body,
    openai_response,
    responses_response,
    sse_anthropic,
    sse_openai,
)
from dsmlkit.api.common import Api
from dsmlkit.api.seal import Sealer
from dsmlkit.errors import ApiError, CallerError
from dsmlkit.parse import Diagnostic, Event, ParsedMessage


def api_for_path(path: str) -> Api:
    """Which API's shapes a route answers in."""
    if path.startswith("/v1/messages"):
        return "anthropic"
    return "responses" if path.startswith("/v1/responses") else "openai"


def error_body(api: Api, err: ApiError, request_id: str) -> dict[str, Any]:
    if api == "anthropic":
        return {**anthropic_error_body(err), "request_id": request_id}
    return openai_error_body(err)


#: Statuses a client must not retry: the same key gets the same answer. The official SDKs
#: (and Claude Code) honour ``x-should-retry: false`` and stop at once.
NO_RETRY_STATUSES = (401, 403)


def error_response(api: Api, err: ApiError, request_id: str) -> JSONResponse:
    """A complete error response in ``api``'s envelope (401 and 403 say not to retry)."""
    headers = {"x-should-retry": "false"} if err.status in NO_RETRY_STATUSES else None
    return JSONResponse(error_body(api, err, request_id), status_code=err.status, headers=headers)


def error_frame(api: Api, err: ApiError, request_id: str) -> str:
    """The SSE frame that reports an error in the middle of a stream."""
    if api == "anthropic":
        return sse_anthropic("error", error_body(api, err, request_id))
    return sse_openai(error_body(api, err, request_id))


_ID_PREFIXES: dict[Api, str] = {"anthropic": "msg_", "responses": "resp_", "openai": "chatcmpl-"}


def new_response_id(api: Api) -> str:
    """``msg_…``, ``resp_…`` or ``chatcmpl-…`` with 24 random hex digits."""
    return _ID_PREFIXES[api] + secrets.token_hex(12)


def build_response(
    msg: ParsedMessage,
    api: Api,
    model: str,
    *,
    response_id: str,
    created: int,
    usage: Usage | None,
    stop_sequence: str | None,
    sign_thinking: Callable[[str], str] | None = None,
    request: ChatRequest | None = None,
    sealer: Sealer | None = None,
) -> dict[str, Any]:
    """The non-streaming response body in ``api``'s shape (``sign_thinking``: Anthropic's
    thinking-block signatures; ``request`` and ``sealer``: what a Responses ``response``
    echoes and seals, and whether Anthropic's thinking text is omitted)."""
    if api == "responses":
        if not isinstance(request, ResponsesRequest):
            raise CallerError("a Responses response echoes its request: pass request=")
        return responses_response(
            msg, request, id=response_id, created_at=created, usage=usage, sealer=sealer
        )
    if api == "anthropic":
        return anthropic_response(
            msg,
            model,
            id=response_id,
            usage=usage,
            stop_sequence=stop_sequence,
            sign_thinking=sign_thinking,
            omit_thinking=request is not None and request.omit_reasoning,
        )
    return openai_response(msg, model, id=response_id, created=created, usage=usage)


class StreamFrames(Protocol):
    """SSE frames of one streamed response, from start to finish."""

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


class _SseStream(Protocol):
    """What the Chat Completions and Messages streams share: they write their own SSE."""

    @property
    def diagnostics(self) -> Sequence[Diagnostic]: ...
    def start_sse(self) -> list[str]: ...
    def feed_sse(self, events: Sequence[Event]) -> list[str]: ...


class _SseFrames:
    """Frames of a stream that writes its own SSE; subclasses say how it finishes."""

    def __init__(self, api: Api, stream: _SseStream) -> None:
        self._api = api
        self._sse = stream

    def start(self) -> list[str]:
        return self._sse.start_sse()

    def feed(self, events: Sequence[Event]) -> list[str]:
        return self._sse.feed_sse(events)

    def fail(self, err: ApiError, request_id: str) -> list[str]:
        return [error_frame(self._api, err, request_id)]

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]:
        return tuple(self._sse.diagnostics)

    @property
    def response(self) -> dict[str, Any] | None:
        return None


class _OpenAIFrames(_SseFrames):
    def __init__(self, req: ChatRequest, response_id: str, created: int) -> None:
        self._stream = OpenAIStream(req, id=response_id, created=created)
        super().__init__("openai", self._stream)

    def finish(self, usage: Usage | None, stop_sequence: str | None) -> list[str]:
        return self._stream.finish_sse(usage)


class _AnthropicFrames(_SseFrames):
    def __init__(
        self,
        req: ChatRequest,
        response_id: str,
        prompt_usage: Usage | None,
        sign_thinking: Callable[[str], str] | None,
    ) -> None:
        self._stream = AnthropicStream(
            req, id=response_id, usage=prompt_usage, sign_thinking=sign_thinking
        )
        super().__init__("anthropic", self._stream)

    def finish(self, usage: Usage | None, stop_sequence: str | None) -> list[str]:
        return self._stream.finish_sse(usage, stop_sequence=stop_sequence)


class _ResponsesFrames(_SseFrames):
    """A Responses stream ends in its own events, failed ones too, and keeps its response."""

    def __init__(
        self, req: ResponsesRequest, response_id: str, created: int, sealer: Sealer | None
    ) -> None:
        self._stream = ResponsesStream(req, id=response_id, created_at=created, sealer=sealer)
        super().__init__("responses", self._stream)

    def finish(self, usage: Usage | None, stop_sequence: str | None) -> list[str]:
        return self._stream.finish_sse(usage)

    def fail(self, err: ApiError, request_id: str) -> list[str]:
        return self._stream.fail_sse(str(err))

    @property
    def response(self) -> dict[str, Any] | None:
        return self._stream.response


def stream_frames(
    req: ChatRequest,
    *,
    response_id: str,
    created: int,
    prompt_usage: Usage | None,
    sign_thinking: Callable[[str], str] | None = None,
    sealer: Sealer | None = None,
) -> StreamFrames:
    """The frame writer for ``req``'s API; ``prompt_usage`` is what is known at the start
    (``sign_thinking`` for Anthropic, ``sealer`` for Responses)."""
    if isinstance(req, ResponsesRequest):
        return _ResponsesFrames(req, response_id, created, sealer)
    if req.api == "anthropic":
        return _AnthropicFrames(req, response_id, prompt_usage, sign_thinking)
    return _OpenAIFrames(req, response_id, created)
