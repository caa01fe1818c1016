"""OpenAI Chat Completions, Anthropic Messages and OpenAI Responses adapters (sans-IO).

Requests become a :class:`ChatRequest` (a typed conversation plus render, parse and
sampling options); parser events become each API's responses and stream chunks.
See ``docs/api-adapters.md``.
"""

from dsmlkit.api.adapters import ADAPTERS, CHAT, MESSAGES, RESPONSES, ApiAdapter, adapter_for
from dsmlkit.api.anthropic import (
    AnthropicStream,
    anthropic_response,
    anthropic_response_json,
    parse_anthropic_request,
)
from dsmlkit.api.common import (
    ChatRequest,
    ParseOptions,
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
from dsmlkit.api.openai import OpenAIStream, openai_response, parse_openai_request
from dsmlkit.api.request import (
    call_id_factory,
    convert_output,
    parse_options,
    parse_request,
    to_openai_chat_body,
)
from dsmlkit.api.responses import (
    ResponsesRequest,
    ResponsesStream,
    parse_responses_request,
    responses_response,
)
from dsmlkit.api.seal import Sealer, SealError
from dsmlkit.api.sse import SSE_DONE, RawJSON, json_body, sse_anthropic, sse_event, sse_openai
from dsmlkit.errors import InvalidRequest

__all__ = [
    "ADAPTERS",
    "CHAT",
    "MESSAGES",
    "RESPONSES",
    "SSE_DONE",
    "AnthropicStream",
    "ApiAdapter",
    "ApiError",
    "ChatRequest",
    "ClientError",
    "InvalidRequest",
    "OpenAIStream",
    "ParseOptions",
    "RawJSON",
    "ResponsesRequest",
    "ResponsesStream",
    "SealError",
    "Sealer",
    "Usage",
    "adapter_for",
    "anthropic_error_body",
    "anthropic_response",
    "anthropic_response_json",
    "api_error",
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
