"""Errors in each API's own envelope.

One :class:`ApiError` serves both APIs; :func:`openai_error_body` and
:func:`anthropic_error_body` render it the way each API's clients expect.
"""

from __future__ import annotations

from typing import Any

from dsmlkit.errors import DsmlkitError, InvalidRequest

#: Error type for each HTTP status (Anthropic's ``ErrorType`` names, used for both APIs).
ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


class ApiError(DsmlkitError):
    """An error to send to an API client: HTTP ``status``, error ``type``, ``message``, ``param``.

    ``param`` names the offending field in the request's own path syntax
    (``messages[3].content[1].tool_use_id``).
    """

    def __init__(self, status: int, type: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        self.message = message
        self.param = param

    def __str__(self) -> str:
        return f"{self.param}: {self.message}" if self.param else self.message

    @classmethod
    def invalid_request(cls, message: str, param: str | None = None) -> ApiError:
        """A 400 ``invalid_request_error``."""
        return cls(400, ERROR_TYPES[400], message, param)

    @classmethod
    def from_invalid_request(cls, exc: InvalidRequest) -> ApiError:
        """The 400 error for a caller mistake the renderer or another core module reported."""
        return cls.invalid_request(exc.message, exc.param)

    @classmethod
    def for_status(cls, status: int, message: str) -> ApiError:
        """An error whose type follows from ``status`` (e.g. an upstream failure)."""
        fallback = ERROR_TYPES[400] if 400 <= status < 500 else ERROR_TYPES[500]
        return cls(status, ERROR_TYPES.get(status, fallback), message)


def openai_error_body(err: ApiError) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}``; the field path leads the message."""
    return {"error": {"message": str(err), "type": err.type, "param": err.param, "code": None}}


def anthropic_error_body(err: ApiError) -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"}}``; the field path leads the message."""
    return {"type": "error", "error": {"type": err.type, "message": str(err)}}
