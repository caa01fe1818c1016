"""The client APIs over HTTP: which API a route speaks, and error responses in its envelope.

Each route belongs to one API: the one whose ``path`` it starts with (``/v1/messages…`` is
Messages, ``/v1/responses…`` Responses); every other route speaks Chat Completions' shapes.
Everything else about an API is its :class:`~dsmlkit.api.ClientApi`.
"""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

from dsmlkit.api import APIS, CHAT, ClientApi
from dsmlkit.api.errors import ApiError
from dsmlkit.server.errors import UpstreamError


def api_for_path(path: str) -> ClientApi[Any]:
    """Which API's shapes a route answers in."""
    return next((api for api in APIS if path.startswith(api.path)), CHAT)


#: Statuses a client must not retry: the same key gets the same answer. The official SDKs
#: (and Claude Code) honour ``x-should-retry: false`` and stop at once.
NO_RETRY_STATUSES = (401, 403)


def error_response(api: ClientApi[Any], err: ApiError, request_id: str) -> JSONResponse:
    """A complete error response in the API's envelope (401 and 403 say not to retry)."""
    headers = {"x-should-retry": "false"} if err.status in NO_RETRY_STATUSES else None
    return JSONResponse(api.error_body(err, request_id), status_code=err.status, headers=headers)


def upstream_api_error(exc: UpstreamError) -> ApiError:
    """The client-facing error for an upstream failure.

    An upstream 4xx before the stream starts is the request's problem and keeps its status
    (422 → 400); a timeout is 504; anything else (connection, 5xx, the upstream refusing the
    gateway's own key, an error reported mid-stream, a broken or malformed stream) is 502.
    """
    if exc.kind == "timeout":
        return ApiError.for_status(504, exc.message)
    if exc.kind == "status" and exc.status is not None and 400 <= exc.status < 500:
        return ApiError.for_status(400 if exc.status == 422 else exc.status, exc.message)
    return ApiError.for_status(502, exc.message)
