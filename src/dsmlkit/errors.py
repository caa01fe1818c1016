"""dsmlkit's one error hierarchy, split by whose fault an error is.

* :class:`CallerError` — the code or person calling dsmlkit did something wrong (a bad
  argument, a parser fed after ``close()``, a bad CLI flag). Raised at once.
* :class:`InvalidRequest` — a client's API request is wrong; carries the request's own
  ``param`` path and the HTTP ``status`` to answer with.
* :class:`UpstreamError` — the engine or hosted API behind the gateway misbehaved.

Model output never raises: what a model writes becomes content, calls or diagnostics.
"""

from __future__ import annotations


class DsmlkitError(Exception):
    """Base class of every error dsmlkit raises on purpose."""


class CallerError(DsmlkitError, ValueError):
    """The caller used dsmlkit wrongly; the message says what to do instead."""


class InvalidRequest(CallerError):
    """A conversation, request or option is wrong; ``param`` names the field.

    ``param`` uses the request's own path syntax, e.g. ``messages[3].content[1]``, so the
    API adapters can put it straight into the error body.
    """

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

    def __str__(self) -> str:
        return f"{self.param}: {self.message}" if self.param else self.message
