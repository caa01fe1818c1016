"""Errors in each API's own envelope.

Errors are :class:`~dsmlkit.errors.ApiError` values (:class:`~dsmlkit.errors.InvalidRequest`
for the client's mistakes); :func:`openai_error_body` and :func:`anthropic_error_body`
render one the way each API's clients expect.
"""

from __future__ import annotations

from typing import Any

from dsmlkit.errors import ApiError


def openai_error_body(err: ApiError) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}``; the field path leads the message."""
    return {"error": {"message": str(err), "type": err.type, "param": err.param, "code": None}}


def anthropic_error_body(err: ApiError) -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"}}``; the field path leads the message."""
    return {"type": "error", "error": {"type": err.type, "message": str(err)}}
