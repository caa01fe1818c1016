"""OpenAI Chat Completions, Anthropic Messages and OpenAI Responses (sans-IO).

Each API is one :class:`ClientApi` (``CHAT``, ``MESSAGES``, ``RESPONSES``; :data:`APIS`):
requests become a :class:`ChatRequest` (a typed conversation plus render, parse and
sampling options) that carries its API; parser events become each API's responses and
stream chunks. See ``docs/api-adapters.md``.
"""

from dsmlkit.api.anthropic import (
    MESSAGES,
    AnthropicStream,
    anthropic_response,
    anthropic_response_json,
    parse_anthropic_request,
)
from dsmlkit.api.common import (
    Answer,
    ChatRequest,
    ClientApi,
    ParseOptions,
    ReadContext,
    StreamWriter,
    Usage,
    check_tool_choice,
    response_diagnostics,
)
from dsmlkit.api.errors import (
    ApiError,
    ClientError,
    anthropic_error_body,
    api_error,
    openai_error_body,
)
from dsmlkit.api.openai import CHAT, OpenAIStream, openai_response, parse_openai_request
from dsmlkit.api.request import (
    API_NAMES,
    APIS,
    api_named,
    call_id_factory,
    convert_output,
    parse_options,
    parse_request,
    to_openai_chat_body,
)
from dsmlkit.api.responses import (
    RESPONSES,
    ResponsesRequest,
    ResponsesStream,
    parse_responses_request,
    responses_response,
)
from dsmlkit.api.seal import Sealer, SealError
from dsmlkit.api.sse import SSE_DONE, RawJSON, json_body, sse_anthropic, sse_event, sse_openai
from dsmlkit.errors import InvalidRequest

__all__ = [
    "APIS",
    "API_NAMES",
    "CHAT",
    "MESSAGES",
    "RESPONSES",
    "SSE_DONE",
    "Answer",
    "AnthropicStream",
    "ApiError",
    "ChatRequest",
    "ClientApi",
    "ClientError",
    "InvalidRequest",
    "OpenAIStream",
    "ParseOptions",
    "RawJSON",
    "ReadContext",
    "ResponsesRequest",
    "ResponsesStream",
    "SealError",
    "Sealer",
    "StreamWriter",
    "Usage",
    "anthropic_error_body",
    "anthropic_response",
    "anthropic_response_json",
    "api_error",
    "api_named",
    "call_id_factory",
    "check_tool_choice",
    "convert_output",
    "json_body",
    "openai_error_body",
    "openai_response",
    "parse_anthropic_request",
    "parse_openai_request",
    "parse_options",
    "parse_request",
    "parse_responses_request",
    "response_diagnostics",
    "responses_response",
    "sse_anthropic",
    "sse_event",
    "sse_openai",
    "to_openai_chat_body",
]
