"""The server's own failures: the upstream behind the gateway; and :class:`Noted`, the
mark of an error raised with lines for the request's log."""

from __future__ import annotations

from typing import Literal

from dsmlkit.errors import DsmlkitError
from dsmlkit.server.reqlog import Note

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


class Noted:
    """Mixed into an error a stage raises with the lines it noted on the way (``notes``:
    a store outage, a corrupt entry), which the request's observer logs when the error is
    answered; the error's message, which clients see, holds none of them."""

    notes: tuple[Note, ...] = ()
