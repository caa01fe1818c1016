"""The server's own failures: the upstream behind the gateway."""

from __future__ import annotations

from typing import Literal

from dsmlkit.errors import DsmlkitError

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
