"""Errors as the client APIs speak them: an HTTP status, an error type, an envelope.

An :class:`ApiError` is what a server answers a client with. A client's mistake is a
:class:`ClientError` (an :class:`~dsmlkit.errors.InvalidRequest` with a 4xx status);
:func:`api_error` gives any ``InvalidRequest`` its 400. :func:`openai_error_body` and
:func:`anthropic_error_body` render one the way each API's clients expect.
"""

from __future__ import annotations

from typing import Any

from dsmlkit.errors import DsmlkitError, InvalidRequest

#: Error type for each HTTP status (Anthropic's ``ErrorType`` names, used for every API).
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
    """An error to answer an API client with: HTTP ``status``, error ``type``, ``param``.

    A bare ``ApiError`` is the server's or the upstream's fault (5xx); :meth:`for_status`
    picks the class from the status.
    """

    def __init__(
        self, message: str, param: str | None = None, *, status: int, type: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        fallback = ERROR_TYPES[400] if 400 <= status < 500 else ERROR_TYPES[500]
        self.type = type or ERROR_TYPES.get(status, fallback)

    def __str__(self) -> str:
        return f"{self.param}: {self.message}" if self.param else self.message

    @staticmethod
    def for_status(status: int, message: str, param: str | None = None) -> ApiError:
        """An error whose class and type follow from ``status`` (4xx: the client's fault)."""
        if 400 <= status < 500:
            return ClientError(message, param, status=status)
        return ApiError(message, param, status=status)


class ClientError(InvalidRequest, ApiError):
    """A client's mistake with the status to answer it with (400 unless a server check,
    such as authentication or the body size, says otherwise)."""

    def __init__(self, message: str, param: str | None = None, *, status: int = 400) -> None:
        ApiError.__init__(self, message, param, status=status)


def api_error(exc: ApiError | InvalidRequest) -> ApiError:
    """``exc`` as an API error: itself when it has a status, else a 400."""
    if isinstance(exc, ApiError):
        return exc
    return ClientError(exc.message, exc.param)


def openai_error_body(err: ApiError | InvalidRequest) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}``; the field path leads the message."""
    err = api_error(err)
    return {"error": {"message": str(err), "type": err.type, "param": err.param, "code": None}}


def anthropic_error_body(err: ApiError | InvalidRequest) -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"}}``; the field path leads the message."""
    err = api_error(err)
    return {"type": "error", "error": {"type": err.type, "message": str(err)}}
