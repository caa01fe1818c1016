"""dsmlkit's one error hierarchy, split by whose fault an error is.

* :class:`CallerError` — the code or person calling dsmlkit did something wrong (a bad
  argument, a parser fed after ``close()``). Raised at once.

  * :class:`InvalidRequest` — a client's request or a conversation is wrong; carries the
    request's own ``param`` path and the HTTP ``status`` to answer with (400 unless said).
  * :class:`UsageError` — a command-line problem (bad flags, unreadable file).

* :class:`ApiError` — anything the server answers a client with an error status; an
  :class:`InvalidRequest` is one (the client's fault), a bare :class:`ApiError` is the
  server's or the upstream's fault (5xx).
* :class:`UpstreamError` — the engine or hosted API behind the gateway misbehaved.
* :class:`InternalError` — a check inside dsmlkit found its own state impossible: a bug,
  never the caller's or the model's doing.

Model output never raises: what a model writes becomes content, calls or diagnostics.
"""

from __future__ import annotations

from typing import Literal

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


class DsmlkitError(Exception):
    """Base class of every error dsmlkit raises on purpose."""


class CallerError(DsmlkitError, ValueError):
    """The caller used dsmlkit wrongly; the message says what to do instead."""


class InternalError(DsmlkitError, RuntimeError):
    """dsmlkit found its own state impossible (a bug: please report it with the input)."""


class UsageError(CallerError):
    """A command-line problem (exit code 2): a bad flag combination or unreadable input."""


class ApiError(DsmlkitError):
    """An error to answer an API client with: HTTP ``status``, error ``type``, ``param``.

    ``param`` names the offending field in the request's own path syntax
    (``messages[3].content[1].tool_use_id``). Use :class:`InvalidRequest` for the
    client's mistakes; :meth:`for_status` picks the class from the status.
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
    def for_status(status: int, message: str) -> ApiError:
        """An error whose class and type follow from ``status`` (4xx: the client's fault)."""
        if 400 <= status < 500:
            return InvalidRequest(message, status=status)
        return ApiError(message, status=status)


class InvalidRequest(CallerError, ApiError):
    """A conversation, request or option is wrong; ``param`` names the field.

    ``param`` uses the request's own path syntax, e.g. ``messages[3].content[1]``, so the
    API adapters put it straight into the error body; ``status`` is 400 unless a server
    check (authentication, body size) says otherwise.
    """

    def __init__(self, message: str, param: str | None = None, *, status: int = 400) -> None:
        ApiError.__init__(self, message, param, status=status)


UpstreamKind = Literal["connect", "timeout", "status", "auth", "reported", "malformed", "broken"]


class UpstreamError(DsmlkitError):
    """The upstream failed: ``kind`` says how, ``status`` is its HTTP status if it sent one.

    ``auth`` is an upstream 401/403 to the gateway's own key and ``reported`` an error the
    upstream sent inside a stream it had accepted: both the gateway's problem (502), never
    the client's. ``url`` names what was asked, without credentials, for the server's own
    log: the message, which clients may see, never holds an upstream URL.
    """

    def __init__(
        self, kind: UpstreamKind, message: str, status: int | None = None, url: str | None = None
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status
        self.url = url


def install_hint(extra: str) -> str:
    """How to install dsmlkit with ``extra`` (``server``, ``tokenizer``): dsmlkit is not on a
    package index yet, so from a checkout or from a wheel built from one."""
    from dsmlkit import __version__

    return (
        f"pip install '.[{extra}]' in a dsmlkit checkout, or "
        f"pip install 'dsmlkit-{__version__}-py3-none-any.whl[{extra}]' from a built wheel"
    )
