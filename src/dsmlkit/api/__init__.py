"""OpenAI Chat Completions, Anthropic Messages and OpenAI Responses (sans-IO).

Each API is one :class:`ClientApi` (``CHAT``, ``MESSAGES``, ``RESPONSES``; :data:`APIS`):
requests become a :class:`ChatRequest` (a typed conversation plus render, parse and
sampling options) that carries its API; parser events become each API's responses and
stream chunks. See ``docs/api-adapters.md``.

The package exports the API objects, the typed request and the request helpers; each API's
own functions (``parse_openai_request``, ``anthropic_response``, the stream classes), the
SSE writers and the error envelopes are imported from their modules (``dsmlkit.api.openai``,
``.anthropic``, ``.responses``, ``.sse``, ``.errors``).
"""

from dsmlkit.api.anthropic import MESSAGES
from dsmlkit.api.common import (
    Answer,
    ChatRequest,
    ClientApi,
    ParseOptions,
    ReadContext,
    StreamWriter,
    Usage,
)
from dsmlkit.api.errors import ApiError
from dsmlkit.api.openai import CHAT
from dsmlkit.api.request import (
    APIS,
    api_named,
    call_id_factory,
    convert_output,
    parse_options,
    parse_request,
    to_openai_chat_body,
)
from dsmlkit.api.responses import RESPONSES, ResponsesRequest
from dsmlkit.api.seal import Sealer, SealError
from dsmlkit.errors import InvalidRequest

__all__ = [
    "APIS",
    "CHAT",
    "MESSAGES",
    "RESPONSES",
    "Answer",
    "ApiError",
    "ChatRequest",
    "ClientApi",
    "InvalidRequest",
    "ParseOptions",
    "ReadContext",
    "ResponsesRequest",
    "SealError",
    "Sealer",
    "StreamWriter",
    "Usage",
    "api_named",
    "call_id_factory",
    "convert_output",
    "parse_options",
    "parse_request",
    "to_openai_chat_body",
]
