"""Exceptions for caller mistakes. Model output never raises; these do, at once."""

from __future__ import annotations


class DsmlkitError(Exception):
    """Base class of every error dsmlkit raises on purpose."""


class InvalidRequest(DsmlkitError, ValueError):
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
