"""One structured record per request, logged as one line (JSON or text).

The request's observer (:mod:`.observer`, in the ASGI scope's state from the moment the
request arrives until its last byte is sent) is the only one that fills it, and the only
writer of structured lines: the request line, and the :class:`Note` lines the stages and
the state store return (a store outage, a corrupt entry, a call held back, a lowered
``max_tokens``). Their fields ride on the log record (:data:`FIELDS`) and the JSON
formatter writes them out in one go.
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from collections import Counter
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

#: The logger that receives one line per request (INFO; WARNING for a 4xx, ERROR for a 5xx).
ACCESS_LOGGER = logging.getLogger("dsmlkit.server.access")
#: The attribute of a log record that holds a structured line's fields.
FIELDS = "dsmlkit_fields"
#: The id of the request being answered, for every log line written while it is.
CURRENT_REQUEST: ContextVar[str | None] = ContextVar("dsmlkit_request_id", default=None)
#: The longest ``x-request-id`` taken from a client.
MAX_REQUEST_ID = 128
#: An HTTP token (RFC 9110 ``tchar``): printable ASCII without spaces, quotes or separators.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


@dataclass(frozen=True)
class Note:
    """A line a stage or store asks the request's observer to log (at warning, on the
    ``dsmlkit.server`` logger): ``message``, what a plain handler shows, and ``fields``,
    what the JSON formatter writes (its ``event`` first)."""

    message: str
    fields: Mapping[str, Any]


def _new_request_id() -> str:
    """A fresh request id (``req_`` + 24 hex digits)."""
    return "req_" + secrets.token_hex(12)


def request_id_from(sent: str | None) -> str:
    """The client's ``x-request-id`` when it is an HTTP token of at most
    :data:`MAX_REQUEST_ID` characters, else a fresh id (an unusable one is replaced, not
    refused)."""
    if sent is not None and len(sent) <= MAX_REQUEST_ID and _TOKEN.fullmatch(sent):
        return sent
    return _new_request_id()


def request_level(status: int) -> int:
    """A request line's level: ERROR for a 5xx, WARNING for a 4xx, else INFO."""
    if status >= 500:
        return logging.ERROR
    return logging.WARNING if status >= 400 else logging.INFO


@dataclass
class RequestRecord:
    """What one request did; timings are in seconds (``time.perf_counter`` based)."""

    id: str
    method: str
    route: str
    started: float = field(default_factory=time.perf_counter)
    #: The size of the request body (it decides whether rendering takes a worker thread).
    body_bytes: int = 0
    status: int = 0
    stream: bool = False
    model: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    diagnostics: Counter[str] = field(default_factory=Counter)
    parsed: bool = False
    parse_seconds: float = 0.0
    upstream_seconds: float | None = None
    #: Time spent waiting on the upstream (see :attr:`overhead`): its ``/tokenize`` count of
    #: a text prompt, its answer's headers and each read of its stream.
    upstream_wait: float | None = None
    #: The gateway's own time per read of the upstream stream (arrival to the next read).
    chunk_overheads: list[float] = field(default_factory=list)
    #: Assistant turns whose dropped reasoning the gateway put back.
    reasoning_restored: int = 0
    #: What the client really changed in turns the model wrote (used as sent), by part.
    history_changed: Counter[str] = field(default_factory=Counter)
    #: Why the state store could not be used, if it could not.
    state_error: str | None = None
    #: Where a request went instead of its model's own upstream route, and why
    #: (``chat; reason=image``: it carries images; the ``x-dsmlkit-upstream`` header's value).
    upstream_route: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    duration: float = 0.0
    #: From the request's arrival to the first part of its response body.
    first_chunk: float | None = None
    #: The time between each part of the response body and the one before.
    chunk_gaps: list[float] = field(default_factory=list)

    @property
    def overhead(self) -> float | None:
        """The gateway's own time: the wall time minus the upstream wait (gateway requests
        whose upstream answered)."""
        if self.upstream_seconds is None or self.upstream_wait is None:
            return None
        return max(0.0, self.duration - self.upstream_wait)

    def fail(self, error_type: str, message: str) -> None:
        """Note the error this request ended in (the first one wins)."""
        if self.error_type is None:
            self.error_type = error_type
            self.error_message = message

    def finish(self) -> None:
        """Stop the clock."""
        self.duration = time.perf_counter() - self.started

    @property
    def line(self) -> str:
        """What a plain handler shows of the request line."""
        return f"{self.method} {self.route} {self.status} {self.id}"

    def log_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "event": "request",
            "id": self.id,
            "method": self.method,
            "route": self.route,
            "status": self.status,
            "ms": round(self.duration * 1000, 3),
        }
        optional: dict[str, Any] = {
            "stream": self.stream or None,
            "model": self.model,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "finish_reason": self.finish_reason,
            "diagnostics": dict(self.diagnostics) or None,
            "parse_ms": round(self.parse_seconds * 1000, 3) if self.parsed else None,
            "upstream_ms": (
                round(self.upstream_seconds * 1000, 3)
                if self.upstream_seconds is not None
                else None
            ),
            "overhead_ms": (round(self.overhead * 1000, 3) if self.overhead is not None else None),
            "reasoning_restored": self.reasoning_restored or None,
            "history_changed": dict(self.history_changed) or None,
            "state_error": self.state_error,
            "upstream_route": self.upstream_route,
            "error": self.error_type,
            "error_message": self.error_message,
        }
        fields.update((key, value) for key, value in optional.items() if value is not None)
        return fields
